// serving_loop.h — what the engine thread and the HTTP threads share, and one turn of the
// serving loop (chapter 09, Task 4).
//
// An OpenAI-style server runs one engine thread (Engine::step() is driven by exactly one thread)
// and many HTTP threads. An HTTP thread submits a request (Engine::add_request is thread-safe),
// then waits on its Job for outputs; when its client goes away it cancels the Job. The engine
// thread turns the loop: cancellations in, one engine step, each output out to the Job it
// belongs to, finished requests off the books (vLLM: `AsyncLLM`'s output handler and
// `RequestOutputCollector`; SGLang: the detokenizer manager fanning out to `ReqState`s).
// EngineLoop (engine_loop.h) owns the thread and the metrics; the turn is serve_step, Task 4.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "lio/engine.h"

namespace lio::server {

/// One HTTP request's link to the engine: its prompts' engine requests (n samples each), and
/// the outputs that arrived for them. The engine thread delivers; the request's thread takes.
/// Thread-safe.
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

  /// Engine thread: appends `o` to the outputs the request's thread will take, in call order,
  /// and wakes it. An output with `finished` set closes one of the job's sequences.
  void deliver(RequestOutput o);
  /// Engine thread: the engine failed under this job; take() reports `message` from now on.
  void fail(const std::string& message);
  /// Submission (before anyone waits): `n` more sequences for engine request `id`.
  void add_engine_request(int64_t id, int64_t n);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<RequestOutput> outputs_;  ///< arrived, not yet taken
  int64_t n_open_ = 0;                 ///< sequences (prompts x n) not yet finished
  std::string error_;                  ///< set when an engine step failed under this job
  std::vector<int64_t> engine_ids_;    ///< constant once submitted
};

/// An engine request in flight, as the serving loop tracks it.
struct ServingEntry {
  std::shared_ptr<Job> job;   ///< where its outputs go
  int64_t samples_left = 0;   ///< of its n samples, those not yet finished
  bool started = false;       ///< scheduled at least once (no longer counted as queued)
};

/// The books the engine thread and the HTTP threads share. Hold `mutex` to read or change
/// anything here; never hold it across Engine::step() (a submit would then wait a whole step).
struct ServingState {
  std::mutex mutex;
  std::unordered_map<int64_t, ServingEntry> registry;  ///< engine request id -> entry
  std::vector<int64_t> cancelled;  ///< engine request ids whose clients went away, not yet aborted
  int64_t n_queued = 0;            ///< engine requests submitted and not yet scheduled
};

/// What the serving loop needs of an engine: lio::Engine (EngineSteps), or a scripted one in
/// tests. step() and has_unfinished() are called from the engine thread only.
class StepSource {
 public:
  virtual ~StepSource() = default;
  /// True while a request waits, runs or was submitted and not yet taken in (Engine::has_unfinished).
  virtual bool has_unfinished() const = 0;
  /// One engine step: every output it produced, in the engine's order (Engine::step). May throw
  /// (a device failure, a row the sampler rejects); the engine's queues stay consistent.
  virtual std::vector<RequestOutput> step() = 0;
  /// Ends engine request `id` at the next step, freeing its KV blocks; its last output has
  /// finish_reason Abort. Unknown or finished ids are ignored (Engine::abort_request).
  virtual void abort_request(int64_t id) = 0;
};

/// lio::Engine as a StepSource.
class EngineSteps final : public StepSource {
 public:
  /// `engine` must outlive this.
  explicit EngineSteps(Engine& engine) : engine_(engine) {}
  bool has_unfinished() const override { return engine_.has_unfinished(); }
  std::vector<RequestOutput> step() override { return engine_.step(); }
  void abort_request(int64_t id) override { engine_.abort_request(id); }

 private:
  Engine& engine_;
};

/// Task 4 (chapter 09 exercise point; solutions|exercises/09_server/serving_loop.cpp). One turn
/// of the serving loop, on the engine thread: one engine step (engine.step()) and its outputs
/// brought to the requests' jobs (vLLM's `AsyncLLM` output handler; docs/09_server.md, "The
/// serving loop" and "Task 4"). What holds when it returns:
///   - every id that was in state.cancelled when the turn began has been aborted in the engine
///     before this turn's step (so its blocks are free after this very step), and the list no
///     longer holds it;
///   - state.mutex was never held while engine.step() ran (HTTP threads submit meanwhile);
///   - every output of the step reached the Job of its request_id (Job::deliver), in the
///     engine's order, none lost or reordered; outputs of ids not in the registry were dropped;
///   - a request whose n samples have all finished is off the registry, and, if it was never
///     marked started, off the queue count (state.n_queued);
///   - if the step threw, every request in the registry heard the exception's message
///     (Job::fail) and was aborted in the engine, and no output was delivered.
/// Returns the step's outputs (for the metrics; empty after a failure). Errors: none of its
/// own; engine failures are reported to the jobs, not thrown.
std::vector<RequestOutput> serve_step(StepSource& engine, ServingState& state);

}  // namespace lio::server
