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
  //   prefill). Never more than remaining or budget; 0 when either is <= 0. Without chunking a
  //   prompt is prefilled in one step or waits. Lesson: docs/05_continuous_batching.md, "Task 1".
  (void)remaining, (void)budget, (void)chunked_prefill;
  throw NotImplemented("Task 1 (exercises/05_continuous_batching/scheduler_policy.cpp): prefill_chunk — "
                       "this step's share of the prompt under the token budget (docs/05_continuous_batching.md, Task 1)");
}

// ---- Task 2 -----------------------------------------------------------------------------------

bool can_admit(const AdmissionRequest& r) {
  // TODO(Task 2): a free seat (n_running < max_num_seqs), something to run (chunk_tokens > 0),
  //   and its blocks fit (blocks_needed <= blocks_available).
  (void)r;
  throw NotImplemented("Task 2 (exercises/05_continuous_batching/scheduler_policy.cpp): can_admit — "
                       "seat, tokens and blocks");
}

// ---- Task 3 -----------------------------------------------------------------------------------

Sequence* choose_victim(std::span<Sequence* const> candidates) {
  // TODO(Task 3): the candidate with the latest arrival_time (ties: the larger id()); nullptr
  //   when there is none.
  (void)candidates;
  throw NotImplemented("Task 3 (exercises/05_continuous_batching/scheduler_policy.cpp): choose_victim — "
                       "the latest arrival loses its blocks");
}

void requeue_for_recompute(Sequence& victim, std::deque<Sequence*>& waiting) {
  // TODO(Task 3): num_computed_tokens = 0 (its K/V are gone), status Waiting,
  //   n_preemptions += 1, and push it to the FRONT of waiting (it must not starve).
  (void)victim, (void)waiting;
  throw NotImplemented("Task 3 (exercises/05_continuous_batching/scheduler_policy.cpp): requeue_for_recompute — "
                       "reset, count, front of the queue");
}

// ---- Task 4 -----------------------------------------------------------------------------------

bool static_may_admit(int64_t n_running_at_step_start, int64_t n_admitted_this_step, int64_t max_num_seqs) {
  // TODO(Task 4): static batching admits a whole batch at once and nobody joins it: true only
  //   if nothing was running when the step began and the new batch still has a seat.
  (void)n_running_at_step_start, (void)n_admitted_this_step, (void)max_num_seqs;
  throw NotImplemented("Task 4 (exercises/05_continuous_batching/scheduler_policy.cpp): static_may_admit — "
                       "only between batches, up to max_num_seqs");
}

}  // namespace lio
