// Chapter 05, Task 2 — YOUR implementation: one engine step, the batch it runs included.
// Declaration and contract: common/engine/include/lio/engine_step.h (lio::engine_step).
// Grade: ctest -R ch05_task_2
#include "lio/engine_step.h"

#include "lio/error.h"

namespace lio {

std::vector<RequestOutput> engine_step(EngineStepPhases& e) {
  // TODO(Task 2): one step of the engine over e's phases, returning the step's outputs, as
  //   lio/engine_step.h states; the StepBatch you run is yours to build (lesson:
  //   docs/05_continuous_batching.md, "One engine step" and "Task 2").
  (void)e;
  throw NotImplemented("Task 2 (exercises/05_continuous_batching/engine_step.cpp): engine_step — "
                       "lesson docs/05_continuous_batching.md, Task 2");
}

}  // namespace lio
