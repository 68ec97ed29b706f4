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

// ==== EngineLoop ==============================================================================

EngineLoop::EngineLoop(Engine& engine, ServerMetrics& metrics, int64_t max_queue)
    : engine_(engine), steps_(engine), metrics_(metrics), max_queue_(max_queue) {
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
    try {
      publish(serve_step(steps_, state_));  // Task 4
    } catch (const std::exception& e) {
      // serve_step reports engine failures to the jobs itself; what escapes it is the turn's
      // own failure (chapter 09's unsolved Task 4 stub, say): every waiter hears it and the
      // loop stops, so HTTP threads answer 503 instead of the process terminating.
      std::fprintf(stderr, "lio-server: the serving loop failed: %s\n", e.what());
      std::lock_guard lock(state_.mutex);
      for (auto& [id, entry] : state_.registry) entry.job->fail(e.what());
      stopping_ = true;
    }
  }
}

void EngineLoop::publish(const std::vector<RequestOutput>& outputs) {
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
  g.spec_accepted_per_position = snap.stats.spec_accepted_per_position;
  g.structured_output_masks = snap.stats.n_grammar_masks;
  g.structured_output_mask_seconds = snap.stats.grammar_mask_seconds;

  std::lock_guard lock(state_.mutex);
  // A request leaves the queue when first scheduled; until the engine drains its inbox it is
  // not among the live sequences yet, and still waiting.
  for (auto& [id, e] : state_.registry) {
    if (e.started) continue;
    const auto held = std::lower_bound(snap.requests.begin(), snap.requests.end(), id,
                                       [](const RequestState& r, int64_t v) { return r.request_id < v; });
    if (held == snap.requests.end() || held->request_id != id) {
      g.n_waiting += 1;
    } else if (held->scheduled) {
      e.started = true;
      state_.n_queued -= 1;
    }
  }
  metrics_.set_engine_gauges(g);
}

std::shared_ptr<Job> EngineLoop::submit(const std::vector<std::vector<int32_t>>& prompts,
                                        const SamplingParams& params,
                                        const std::string& prompt_param) {
  auto job = std::make_shared<Job>();
  std::lock_guard lock(state_.mutex);
  if (state_.n_queued + static_cast<int64_t>(prompts.size()) > max_queue_) {
    metrics_.on_rejected();
    throw ApiError(503,
                   "The server is overloaded: " + std::to_string(state_.n_queued) +
                       " prompts are waiting (--max-queue " + std::to_string(max_queue_) +
                       "). Retry later.",
                   "", "", "server_error");
  }
  for (const std::vector<int32_t>& prompt : prompts) {
    int64_t id = 0;
    try {
      id = engine_.add_request(prompt, params);
    } catch (const InvalidArgument& e) {
      for (const int64_t added : job->engine_ids()) engine_.abort_request(added);
      throw ApiError(400, e.what(), params.n > 1 ? "n" : prompt_param);
    }
    job->add_engine_request(id, params.n);
    state_.registry[id] = ServingEntry{job, params.n, false};
    state_.n_queued += 1;
  }
  wake();
  return job;
}

void EngineLoop::abort(const Job& job) {
  {
    std::lock_guard lock(state_.mutex);
    state_.cancelled.insert(state_.cancelled.end(), job.engine_ids().begin(), job.engine_ids().end());
  }
  wake();
}

}  // namespace lio::server
