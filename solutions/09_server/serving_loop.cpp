// Chapter 09, Task 4 — reference: one turn of the serving loop (cancellations, one engine step,
// fan-out to the jobs, finishing). Declarations and contract: chapters/09_server/serving_loop.h.
// Lesson: docs/09_server.md, "Task 4".
#include <cstdio>
#include <exception>

#include "serving_loop.h"

namespace lio::server {

std::vector<RequestOutput> serve_step(StepSource& engine, ServingState& state) {
  // 1. Cancellations: aborted now, so this step already frees their blocks.
  std::vector<int64_t> cancelled;
  {
    std::lock_guard lock(state.mutex);
    cancelled.swap(state.cancelled);
  }
  for (const int64_t id : cancelled) engine.abort_request(id);
  // 2. One step, with the books unlocked: HTTP threads keep submitting meanwhile.
  std::vector<RequestOutput> outputs;
  try {
    outputs = engine.step();
  } catch (const std::exception& e) {
    // Which request caused it is unknown: every one in flight fails (its aborts land next step).
    std::fprintf(stderr, "lio-server: engine step failed: %s\n", e.what());
    std::lock_guard lock(state.mutex);
    for (auto& [id, entry] : state.registry) {
      entry.job->fail(e.what());
      engine.abort_request(id);
    }
    return {};
  }
  // 3-4. Each output to its job, in order; a request whose samples are all done leaves the books.
  std::lock_guard lock(state.mutex);
  for (const RequestOutput& o : outputs) {
    const auto it = state.registry.find(o.request_id);
    if (it == state.registry.end()) continue;  // not ours (or already closed): dropped
    ServingEntry& entry = it->second;
    entry.job->deliver(o);
    if (o.finished && --entry.samples_left == 0) {
      if (!entry.started) state.n_queued -= 1;
      state.registry.erase(it);
    }
  }
  return outputs;
}

}  // namespace lio::server
