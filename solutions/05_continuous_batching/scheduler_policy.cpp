// Chapter 05, Tasks 1-4 — reference solution: the scheduler's decisions.
// Declarations and contracts: common/engine/include/lio/scheduler_policy.h.
#include <algorithm>

#include "lio/scheduler_policy.h"

namespace lio {

// ---- Task 1 -----------------------------------------------------------------------------------

int64_t prefill_chunk(int64_t remaining, int64_t budget, bool chunked_prefill) {
  if (remaining <= 0 || budget <= 0) return 0;
  if (chunked_prefill) return std::min(remaining, budget);  // split a long prompt over steps
  return remaining <= budget ? remaining : 0;                // whole, or wait
}

// ---- Task 2 -----------------------------------------------------------------------------------

bool can_admit(const AdmissionRequest& r) {
  const auto& [n_running, max_num_seqs, chunk_tokens, blocks_needed, blocks_available] = r;
  return n_running < max_num_seqs             // a seat
         && chunk_tokens > 0                  // rows this step (an unchunked prompt fits whole)
         && blocks_needed <= blocks_available;  // the blocks for them
}

// ---- Task 3 -----------------------------------------------------------------------------------

Sequence* choose_victim(std::span<Sequence* const> candidates) {
  Sequence* victim = nullptr;
  for (Sequence* s : candidates) {
    if (victim == nullptr || s->arrival_time > victim->arrival_time ||
        (s->arrival_time == victim->arrival_time && s->id() > victim->id())) {
      victim = s;  // the latest arrival has the lowest priority: it loses its blocks
    }
  }
  return victim;
}

void requeue_for_recompute(Sequence& victim, std::deque<Sequence*>& waiting) {
  victim.num_computed_tokens = 0;  // its K/V are gone: prefill it all again later
  victim.status = SequenceStatus::Waiting;
  victim.n_preemptions += 1;
  waiting.push_front(&victim);  // ahead of everything that arrived after it
}

// ---- Task 4 -----------------------------------------------------------------------------------

bool static_may_admit(int64_t n_running_at_step_start, int64_t n_admitted_this_step, int64_t max_num_seqs) {
  return n_running_at_step_start == 0 && n_admitted_this_step < max_num_seqs;
}

}  // namespace lio
