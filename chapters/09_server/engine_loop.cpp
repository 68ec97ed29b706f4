// engine_loop.cpp — stepping the engine and routing its outputs (see the header).
#include "engine_loop.h"

#include <algorithm>
#include <cstdio>

#include "lio/error.h"
#include "openai_protocol.h"

namespace lio::server {

namespace {
/// How often an idle loop refreshes the gauges.
constexpr auto kIdleInterval = std::chrono::milliseconds(100);
}  // namespace

// ==== Job =====================================================================================

bool Job::take(std::vector<RequestOutput>& out, std::string& error,
               std::chrono::milliseconds timeout) {
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
  return static_cast<size_t>(it - engine_ids_.begin()) * static_cast<size_t>(n) +
         static_cast<size_t>(o.sample_index);
}

// ==== EngineLoop ==============================================================================

EngineLoop::EngineLoop(Engine& engine, ServerMetrics& metrics, int64_t max_queue)
    : engine_(engine), metrics_(metrics), max_queue_(max_queue) {
  if (max_queue < 1)
    throw InvalidArgument("--max-queue must be >= 1, got " + std::to_string(max_queue));
}

EngineLoop::~EngineLoop() {
  stop();
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::start() {
  thread_ = std::thread([this] { run(); });
}

void EngineLoop::stop() {
  stopping_ = true;
  wake();
}

void EngineLoop::wake() {
  {
    std::lock_guard lock(wake_mutex_);
    wake_ = true;
  }
  wake_cv_.notify_one();
}

void EngineLoop::run() {
  while (!stopping_) {
    if (!engine_.has_unfinished()) {
      std::unique_lock lock(wake_mutex_);
      wake_cv_.wait_for(lock, kIdleInterval, [&] { return wake_ || stopping_.load(); });
      wake_ = false;
      lock.unlock();
      publish({});
      continue;
    }
    std::vector<RequestOutput> outputs;
    try {
      outputs = engine_.step();
    } catch (const std::exception& e) {
      // A device failure or a row the sampler rejects: which request caused it is unknown, so
      // every request in flight fails. The engine's queues stay consistent (engine.h); the
      // aborts land at the next step.
      std::fprintf(stderr, "lio-server: engine step failed: %s\n", e.what());
      fail_all(e.what());
    }
    publish(std::move(outputs));
  }
}

void EngineLoop::publish(std::vector<RequestOutput> outputs) {
  for (const RequestOutput& o : outputs) metrics_.on_output(o);
  const EngineSnapshot snap = engine_.snapshot();
  EngineGauges g;
  g.n_running = snap.n_running;
  g.n_waiting = snap.n_waiting + snap.n_swapped;
  g.kv_cache_usage = snap.kv_cache_usage;
  g.prefix_cache_queries = snap.prefix_cache_queries;
  g.prefix_cache_hits = snap.prefix_cache_hits;
  g.n_preemptions = snap.stats.n_preemptions;
  g.spec_num_drafts = snap.stats.spec_num_drafts;
  g.spec_num_draft_tokens = snap.stats.spec_num_draft_tokens;
  g.spec_num_accepted_tokens = snap.stats.spec_num_accepted_tokens;

  std::lock_guard lock(registry_mutex_);
  for (RequestOutput& o : outputs) {
    const auto it = registry_.find(o.request_id);
    if (it == registry_.end()) continue;
    Entry& e = it->second;
    const bool finished = o.finished;
    {
      std::lock_guard job_lock(e.job->mutex_);
      e.job->outputs_.push_back(std::move(o));
      if (finished) e.job->n_open_ -= 1;
    }
    e.job->cv_.notify_all();
    if (finished && --e.samples_left == 0) {
      if (!e.started) n_queued_ -= 1;
      registry_.erase(it);
    }
  }
  // A request leaves the queue when first scheduled; until the engine drains its inbox it is
  // not among the live sequences yet, and still waiting.
  for (auto& [id, e] : registry_) {
    if (e.started) continue;
    const auto held = std::lower_bound(snap.requests.begin(), snap.requests.end(), id,
                                       [](const RequestState& r, int64_t v) { return r.request_id < v; });
    if (held == snap.requests.end() || held->request_id != id) {
      g.n_waiting += 1;
    } else if (held->scheduled) {
      e.started = true;
      n_queued_ -= 1;
    }
  }
  metrics_.set_engine_gauges(g);
}

void EngineLoop::fail_all(const std::string& message) {
  std::lock_guard lock(registry_mutex_);
  for (auto& [id, e] : registry_) {
    {
      std::lock_guard job_lock(e.job->mutex_);
      e.job->error_ = message;
    }
    e.job->cv_.notify_all();
    engine_.abort_request(id);
  }
}

std::shared_ptr<Job> EngineLoop::submit(const std::vector<std::vector<int32_t>>& prompts,
                                        const SamplingParams& params,
                                        const std::string& prompt_param) {
  auto job = std::make_shared<Job>();
  std::lock_guard lock(registry_mutex_);
  if (n_queued_ + static_cast<int64_t>(prompts.size()) > max_queue_) {
    metrics_.on_rejected();
    throw ApiError(503,
                   "The server is overloaded: " + std::to_string(n_queued_) +
                       " prompts are waiting (--max-queue " + std::to_string(max_queue_) +
                       "). Retry later.",
                   "", "", "server_error");
  }
  for (const std::vector<int32_t>& prompt : prompts) {
    int64_t id = 0;
    try {
      id = engine_.add_request(prompt, params);
    } catch (const InvalidArgument& e) {
      for (const int64_t added : job->engine_ids_) engine_.abort_request(added);
      throw ApiError(400, e.what(), params.n > 1 ? "n" : prompt_param);
    }
    job->engine_ids_.push_back(id);
    {
      std::lock_guard job_lock(job->mutex_);
      job->n_open_ += params.n;
    }
    registry_[id] = Entry{job, params.n, false};
    n_queued_ += 1;
  }
  wake();
  return job;
}

void EngineLoop::abort(const Job& job) {
  for (const int64_t id : job.engine_ids_) engine_.abort_request(id);
  wake();
}

}  // namespace lio::server
