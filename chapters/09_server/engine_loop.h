// engine_loop.h — the engine's own thread, and the queues between it and the HTTP threads.
//
// Engine::step() is driven by exactly one thread (engine.h). HTTP threads submit requests
// (Engine::add_request is thread-safe) and wait on a per-request Job for their outputs; the
// loop thread steps the engine and hands each output to the Job it belongs to (mutex +
// condition variable), records the metrics, and counts the prompts not yet scheduled so a
// full queue can be refused (503) instead of growing without bound.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "lio/engine.h"
#include "metrics.h"

namespace lio::server {

/// One HTTP request's link to the engine: its prompts' engine requests (n samples each), and
/// the outputs that arrived for them. The loop thread appends; the request's thread takes.
class Job {
 public:
  /// Moves the outputs that have arrived into `out` (appending), waiting up to `timeout` when
  /// none has; `error` gets the engine's failure message ("" = none). Returns true once every
  /// sequence has finished and its outputs were taken (then nothing more will arrive).
  bool take(std::vector<RequestOutput>& out, std::string& error, std::chrono::milliseconds timeout);
  /// The choice `o` belongs to: prompt index * n + o.sample_index (OpenAI numbers the choices
  /// of a multi-prompt request this way).
  size_t choice_index(const RequestOutput& o, int64_t n) const;
  /// The engine request id of each prompt, in order.
  const std::vector<int64_t>& engine_ids() const { return engine_ids_; }

 private:
  friend class EngineLoop;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<RequestOutput> outputs_;  ///< arrived, not yet taken
  int64_t n_open_ = 0;                 ///< sequences (prompts x n) not yet finished
  std::string error_;                  ///< set when an engine step failed under this job
  std::vector<int64_t> engine_ids_;    ///< constant once submit() returned
};

/// The thread that drives an Engine for many concurrent requests.
class EngineLoop {
 public:
  /// `engine` and `metrics` must outlive the loop. `max_queue` (>= 1) bounds the prompts
  /// submitted but not yet scheduled. Starts nothing yet.
  EngineLoop(Engine& engine, ServerMetrics& metrics, int64_t max_queue);
  /// Stops and joins the thread.
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  /// Starts the thread: it steps the engine while anything is unfinished, otherwise sleeps
  /// until a submit (refreshing the gauges every 100 ms).
  void start();
  /// Ends the thread after its current step (joined by the destructor); requests still in
  /// flight get no more outputs, so waiters must check stopped().
  void stop();
  /// True once stop() was called.
  bool stopped() const { return stopping_; }

  /// Adds every prompt as an engine request with `params` (n samples each) and returns the Job
  /// their outputs go to. Throws ApiError 503 when the prompts would take the queue past
  /// max_queue, and ApiError 400 naming `prompt_param` (or "n" when params.n > 1) when the
  /// engine refuses a prompt (lio::InvalidArgument: too long for the context or the pool);
  /// nothing of the request stays queued then.
  std::shared_ptr<Job> submit(const std::vector<std::vector<int32_t>>& prompts,
                              const SamplingParams& params, const std::string& prompt_param);
  /// Aborts every engine request of `job` (their KV blocks are freed at the next step);
  /// thread-safe, idempotent.
  void abort(const Job& job);

 private:
  /// An engine request in flight.
  struct Entry {
    std::shared_ptr<Job> job;
    int64_t samples_left = 0;  ///< of its n
    bool started = false;      ///< scheduled at least once (no longer queued)
  };
  void run();
  void wake();
  void publish(std::vector<RequestOutput> outputs);
  void fail_all(const std::string& message);

  Engine& engine_;
  ServerMetrics& metrics_;
  int64_t max_queue_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::mutex wake_mutex_;
  std::condition_variable wake_cv_;
  bool wake_ = false;
  std::mutex registry_mutex_;  ///< guards registry_ and n_queued_; taken before any Job's mutex
  std::unordered_map<int64_t, Entry> registry_;  ///< engine request id -> entry
  int64_t n_queued_ = 0;                         ///< engine requests not yet scheduled
};

}  // namespace lio::server
