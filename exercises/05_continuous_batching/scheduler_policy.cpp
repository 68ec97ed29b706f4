// Chapter 05, Tasks 1-4 — YOUR implementation: the scheduler's decisions.
// Declarations and contracts: common/engine/include/lio/scheduler_policy.h.
// Grade: ctest -R ch05_task_K (K = 1..4)
#include <algorithm>

#include "lio/error.h"
#include "lio/scheduler_policy.h"

namespace lio {

// ---- Task 1 -----------------------------------------------------------------------------------

int64_t prefill_chunk(int64_t remaining, int64_t budget, bool chunked_prefill) {
  // TODO(Task 1): how many of a prompt's `remaining` tokens this step prefills, given the
  //   step's token `budget` left and whether prompts may be split across steps (chunked
  //   prefill; Sarathi-Serve). Must hold: a decode (remaining 1) runs whenever a row is left;
  //   nothing overruns the budget; without chunking a prompt is never split. 0 when either
  //   count is <= 0. Lesson: docs/05_continuous_batching.md, "Task 1".
  (void)remaining, (void)budget, (void)chunked_prefill;
  throw NotImplemented("Task 1 (exercises/05_continuous_batching/scheduler_policy.cpp): prefill_chunk — "
                       "this step's share of the prompt under the token budget (docs/05_continuous_batching.md, Task 1)");
}

// ---- Task 2 -----------------------------------------------------------------------------------

bool can_admit(const AdmissionRequest& r) {
  // TODO(Task 2): whether this waiting sequence joins the running batch now. Every resource
  //   the request names must allow it; the lesson's "Task 2" says which each one guards.
  //   Must hold (through your Task 5): the running count never passes max_num_seqs and the
  //   pool never hands out a block it does not have.
  (void)r;
  throw NotImplemented("Task 2 (exercises/05_continuous_batching/scheduler_policy.cpp): can_admit — "
                       "seat, tokens and blocks");
}

// ---- Task 3 -----------------------------------------------------------------------------------

Sequence* choose_victim(std::span<Sequence* const> candidates) {
  // TODO(Task 3): the running sequence that gives up its blocks under vLLM's FCFS policy
  //   (Kwon et al. 2023, sec. 4.5; the lesson's "Task 3" argues which one and why), one answer
  //   on ties (lio/scheduler_policy.h); nullptr when there is no candidate.
  (void)candidates;
  throw NotImplemented("Task 3 (exercises/05_continuous_batching/scheduler_policy.cpp): choose_victim — "
                       "the latest arrival loses its blocks");
}

void requeue_for_recompute(Sequence& victim, std::deque<Sequence*>& waiting) {
  // TODO(Task 3): the victim's state after preemption by recompute (its blocks are already
  //   freed), and its place in `waiting`. Must hold: its next prefill recomputes everything it
  //   had, its tokens are kept, the preemption is counted, and no later arrival is served
  //   before it (lio/scheduler_policy.h; lesson, "Task 3").
  (void)victim, (void)waiting;
  throw NotImplemented("Task 3 (exercises/05_continuous_batching/scheduler_policy.cpp): requeue_for_recompute — "
                       "reset, count, front of the queue");
}

// ---- Task 4 -----------------------------------------------------------------------------------

bool static_may_admit(int64_t n_running_at_step_start, int64_t n_admitted_this_step, int64_t max_num_seqs) {
  // TODO(Task 4): static batching's admission rule (Hugging Face generate-style; the lesson's
  //   "Task 4"): a batch is admitted together, nobody joins it while it runs, and it has at most
  //   max_num_seqs members.
  (void)n_running_at_step_start, (void)n_admitted_this_step, (void)max_num_seqs;
  throw NotImplemented("Task 4 (exercises/05_continuous_batching/scheduler_policy.cpp): static_may_admit — "
                       "only between batches, up to max_num_seqs");
}

}  // namespace lio
