// Chapter 05, Task 1 — YOUR implementation: the scheduling step, with every decision in it.
// Declaration and contract: common/engine/include/lio/scheduler_policy.h (schedule_step,
// SchedulerOps) and common/engine/include/lio/scheduler.h (SchedulerQueues, ScheduledSequence).
// Lesson: docs/05_continuous_batching.md, sections 1-5 and "Task 1".
// Grade: ctest -R ch05_task_1
#include <algorithm>
#include <vector>

#include "lio/error.h"
#include "lio/scheduler_policy.h"

namespace lio {

// ---- Task 1 -----------------------------------------------------------------------------------

std::vector<ScheduledSequence> schedule_step(const SchedulerConfig& config, SchedulerQueues& queues,
                                             SchedulerOps& ops) {
  // TODO(Task 1): one engine step's batch, as {sequence, rows} in batch order: running
  //   sequences, then swapped ones resumed, then waiting ones admitted, under one budget of
  //   config.max_num_batched_tokens rows. The decisions are yours: how many rows each sequence
  //   runs (section 4), who may join (seats, rows, blocks), whom to preempt when the pool runs
  //   out and where a recomputed one goes back (section 5), and when static batching admits
  //   (section 1). `ops` does the block work (slots, preemption, swap-in, the prefix cache,
  //   giving up on a sequence). Helpers of your own may sit in an anonymous namespace here.
  //   Invariants the tests check (lio/scheduler_policy.h lists them all): rows <= the budget;
  //   <= max_num_seqs running; FCFS (nobody overtakes an earlier arrival that cannot join); a
  //   sequence already in this step's batch is never preempted; nobody new joins in a step
  //   with a preemption or while any is swapped.
  (void)config, (void)queues, (void)ops;
  throw NotImplemented(
      "Task 1 (exercises/05_continuous_batching/schedule_step.cpp): schedule_step — "
      "see docs/05_continuous_batching.md, Task 1");
}

}  // namespace lio
