// engine_loop.h — the engine's own thread, and the queues between it and the HTTP threads.
//
// Engine::step() is driven by exactly one thread (engine.h). HTTP threads submit requests
// (Engine::add_request is thread-safe) and wait on a per-request Job for their outputs
// (serving_loop.h); the loop thread turns the serving loop (serve_step, chapter 09's Task 4:
// cancellations, one engine step, each output to the Job it belongs to, finished requests off
// the books), records the metrics, and counts the prompts not yet scheduled so a full queue can
// be refused (503) instead of growing without bound.
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
#include "serving_loop.h"

namespace lio::server {

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
  /// Cancels every engine request of `job`: the loop's next turn aborts them (serve_step) and
  /// their KV blocks are free after that step; thread-safe, idempotent.
  void abort(const Job& job);

 private:
  void run();
  void wake();
  /// Metrics and gauges after a turn; marks requests the engine has scheduled as started.
  void publish(const std::vector<RequestOutput>& outputs);

  Engine& engine_;
  EngineSteps steps_;
  ServerMetrics& metrics_;
  int64_t max_queue_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::mutex wake_mutex_;
  std::condition_variable wake_cv_;
  bool wake_ = false;
  ServingState state_;  ///< its mutex is taken before any Job's
};

}  // namespace lio::server
