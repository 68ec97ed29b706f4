// job.cpp — Job, the queue between the engine thread and one HTTP request (serving_loop.h).
#include <algorithm>

#include "serving_loop.h"

namespace lio::server {

bool Job::take(std::vector<RequestOutput>& out, std::string& error, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  cv_.wait_for(lock, timeout, [&] { return !outputs_.empty() || n_open_ == 0 || !error_.empty(); });
  while (!outputs_.empty()) {
    out.push_back(std::move(outputs_.front()));
    outputs_.pop_front();
  }
  error = error_;
  return n_open_ == 0;
}

size_t Job::choice_index(const RequestOutput& o, int64_t n) const {
  const auto it = std::find(engine_ids_.begin(), engine_ids_.end(), o.request_id);
  return static_cast<size_t>(it - engine_ids_.begin()) * static_cast<size_t>(n) + static_cast<size_t>(o.sample_index);
}

void Job::deliver(RequestOutput o) {
  {
    std::lock_guard lock(mutex_);
    if (o.finished) n_open_ -= 1;
    outputs_.push_back(std::move(o));
  }
  cv_.notify_all();
}

void Job::fail(const std::string& message) {
  {
    std::lock_guard lock(mutex_);
    error_ = message;
  }
  cv_.notify_all();
}

void Job::add_engine_request(int64_t id, int64_t n) {
  std::lock_guard lock(mutex_);
  engine_ids_.push_back(id);
  n_open_ += n;
}

}  // namespace lio::server
