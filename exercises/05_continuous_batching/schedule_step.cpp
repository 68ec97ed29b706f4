// Chapter 05, Task 5 — YOUR implementation: the scheduling step, the loop that asks Tasks 1-4.
// Declarations and contract: common/engine/include/lio/scheduler_policy.h (SchedulerOps) and
// common/engine/include/lio/scheduler.h (SchedulerQueues, ScheduledSequence).
// Lesson: docs/05_continuous_batching.md, sections 3-5 and 7 (Task 5).
// Grade: ctest -R ch05_task_5
#include <algorithm>
#include <vector>

#include "lio/error.h"
#include "lio/scheduler_policy.h"

namespace lio {

// ---- Task 5 -----------------------------------------------------------------------------------

std::vector<ScheduledSequence> schedule_step(const SchedulerConfig& config, SchedulerQueues& queues,
                                             SchedulerOps& ops) {
  // TODO(Task 5): one engine step's batch, as {sequence, rows} in batch order: running
  //   sequences, then swapped ones resumed, then waiting ones admitted, under one budget of
  //   config.max_num_batched_tokens rows. Your Tasks 1-4 decide how many rows, who joins, who
  //   is preempted and when static batching admits; `ops` does the block work (slots,
  //   preemption, swap-in, the prefix cache, giving up on a sequence).
  //   Invariants the tests check (lio/scheduler_policy.h lists them all): rows <= the budget;
  //   <= max_num_seqs running; FCFS (nobody overtakes an earlier arrival that cannot join); a
  //   sequence already in this step's batch is never preempted; nobody new joins in a step
  //   with a preemption or while any is swapped.
  //   Lesson: docs/05_continuous_batching.md, sections 3-5 and "Task 5".
  (void)config, (void)queues, (void)ops;
  throw NotImplemented(
      "Task 5 (exercises/05_continuous_batching/schedule_step.cpp): schedule_step — "
      "see docs/05_continuous_batching.md, Task 5");
}

}  // namespace lio
