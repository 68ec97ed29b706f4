// Chapter 09, Task 4 — YOUR implementation: one turn of the serving loop, on the engine thread.
// Declarations and contract: chapters/09_server/serving_loop.h. Lesson: docs/09_server.md,
// "Task 4". Grade: ctest -R ch09_task_4, or scripts/grade.sh 09. Built with
// -DLIO_EXERCISES=09, lio-server's engine thread turns this function.
#include "lio/error.h"
#include "serving_loop.h"

namespace lio::server {

std::vector<RequestOutput> serve_step(StepSource& engine, ServingState& state) {
  // TODO(Task 4): one turn of the serving loop: one engine step, its outputs to the jobs, as
  //   serving_loop.h's contract lists. Must hold: no output is lost or reordered; a cancelled
  //   request's blocks are free after this turn's step; finished requests leave the books; an
  //   engine failure reaches every waiting job instead of escaping the thread; HTTP threads can
  //   submit while the engine steps (mind what you hold across step()).
  //   Lesson: docs/09_server.md, "The serving loop" and "Task 4".
  (void)engine, (void)state;
  throw NotImplemented(
      "Task 4 (exercises/09_server/serving_loop.cpp): serve_step — "
      "see docs/09_server.md, Task 4");
}

}  // namespace lio::server
