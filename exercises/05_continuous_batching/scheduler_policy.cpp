// Chapter 05, Tasks 1-4 — YOUR implementation: the scheduler's decisions.
// Declarations and contracts: common/engine/include/lio/scheduler_policy.h.
// Grade: ctest -R ch05_task_K (K = 1..4)
#include <algorithm>

#include "lio/error.h"
#include "lio/scheduler_policy.h"

namespace lio {

// ---- Task 1 -----------------------------------------------------------------------------------

int64_t prefill_chunk(int64_t remaining, int64_t budget, bool chunked_prefill) {
  // TODO(Task 1): how many of a sequence's `remaining` tokens this step runs, given the
  //   step's token `budget` left and whether prompts may be split across steps (chunked
  //   prefill; Sarathi-Serve). Must hold: a decode (remaining 1) runs whenever a row is left;
  //   nothing overruns the budget; without chunking a prompt is never split. 0 when either
  //   count is <= 0. Contract: lio/scheduler_policy.h. Lesson: docs/05_continuous_batching.md,
  //   section 4 and "Task 1".
  (void)remaining, (void)budget, (void)chunked_prefill;
  throw NotImplemented("Task 1 (exercises/05_continuous_batching/scheduler_policy.cpp): prefill_chunk — "
                       "see docs/05_continuous_batching.md, Task 1");
}

// ---- Task 2 -----------------------------------------------------------------------------------

bool can_admit(const AdmissionRequest& r) {
  // TODO(Task 2): whether this waiting sequence joins the running batch now. Every resource
  //   the request names must allow it; the lesson's "Task 2" says what each one guards.
  //   Must hold (through your Task 5): the running count never passes max_num_seqs, nobody
  //   joins without rows to run, and the pool never hands out a block it does not have.
  (void)r;
  throw NotImplemented("Task 2 (exercises/05_continuous_batching/scheduler_policy.cpp): can_admit — "
                       "see docs/05_continuous_batching.md, Task 2");
}

// ---- Task 3 -----------------------------------------------------------------------------------

Sequence* choose_victim(std::span<Sequence* const> candidates) {
  // TODO(Task 3): the running sequence that gives up its blocks under vLLM's FCFS policy
  //   (Kwon et al. 2023, sec. 4.5; the lesson's section 5 argues which one and why), one answer
  //   for any order of the candidates (lio/scheduler_policy.h); nullptr when there is none.
  (void)candidates;
  throw NotImplemented("Task 3 (exercises/05_continuous_batching/scheduler_policy.cpp): choose_victim — "
                       "see docs/05_continuous_batching.md, Task 3");
}

void requeue_for_recompute(Sequence& victim, std::deque<Sequence*>& waiting) {
  // TODO(Task 3): the victim's state after preemption by recompute (its blocks are already
  //   freed), and its place in `waiting`. Must hold: its next prefill recomputes everything it
  //   had, its tokens are kept, the preemption is counted, and no later arrival is served
  //   before it (lio/scheduler_policy.h; lesson, "Task 3").
  (void)victim, (void)waiting;
  throw NotImplemented("Task 3 (exercises/05_continuous_batching/scheduler_policy.cpp): requeue_for_recompute — "
                       "see docs/05_continuous_batching.md, Task 3");
}

// ---- Task 4 -----------------------------------------------------------------------------------

bool static_may_admit(int64_t n_running_at_step_start, int64_t n_admitted_this_step, int64_t max_num_seqs) {
  // TODO(Task 4): static batching's admission rule (Hugging Face generate-style; the lesson's
  //   "Task 4"): a batch is admitted together, nobody joins it while it runs, and it has at most
  //   max_num_seqs members.
  (void)n_running_at_step_start, (void)n_admitted_this_step, (void)max_num_seqs;
  throw NotImplemented("Task 4 (exercises/05_continuous_batching/scheduler_policy.cpp): static_may_admit — "
                       "see docs/05_continuous_batching.md, Task 4");
}

}  // namespace lio
