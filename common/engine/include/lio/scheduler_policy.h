// scheduler_policy.h — the decisions inside Scheduler::schedule(), one function each.
//
// Chapter 05 exercise points (solutions|exercises/05_continuous_batching/scheduler_policy.cpp).
// The Scheduler owns the queues, the block manager and the bookkeeping; these functions decide:
// how many tokens a sequence runs this step (Task 1), whether a waiting sequence may join the
// running batch (Task 2), whom to preempt when the pool runs out and how the victim goes back
// to the queue (Task 3), and when static batching lets requests in (Task 4). Sources: Yu et al.
// 2022 (Orca: iteration-level scheduling), Agrawal et al. 2024 (Sarathi-Serve: chunked prefill),
// Kwon et al. 2023 sec. 4.5 (vLLM: FCFS, preempt the latest arrival, recompute), vLLM v1
// `vllm/v1/core/sched/scheduler.py`.
#pragma once

#include <cstdint>
#include <deque>
#include <span>

#include "lio/sequence.h"

namespace lio {

/// Task 1. Tokens a sequence with `remaining` uncomputed tokens runs this step, given the
/// token budget left (`budget`, rows). A decoding sequence has remaining == 1. With chunked
/// prefill, a long prompt is split: as many tokens as the budget allows. Without it, a prompt
/// runs whole or not at all (0 when it does not fit). Never more than remaining or budget;
/// 0 when either is <= 0.
int64_t prefill_chunk(int64_t remaining, int64_t budget, bool chunked_prefill);

/// What admitting one waiting sequence would take (Task 2's input).
struct AdmissionRequest {
  int64_t n_running = 0;         ///< sequences already running this step
  int64_t max_num_seqs = 0;      ///< the limit on running sequences
  int64_t chunk_tokens = 0;      ///< tokens it would run this step (Task 1)
  int64_t blocks_needed = 0;     ///< new KV blocks those tokens need
  int64_t blocks_available = 0;  ///< blocks the pool can hand out now
};

/// Task 2. Whether a waiting sequence joins the batch this step (continuous batching): a seat
/// is free (n_running < max_num_seqs), it has tokens to run (chunk_tokens > 0) and its blocks
/// fit (blocks_needed <= blocks_available).
bool can_admit(const AdmissionRequest& r);

/// Task 3a. Which running sequence to preempt when the pool has no block for another: the one
/// that arrived last (latest arrival_time; ties: the larger id) among `candidates` — the
/// running sequences not yet scheduled this step. FCFS keeps the oldest requests going (Kwon et
/// al. 2023, sec. 4.5). Returns nullptr if there is no candidate.
Sequence* choose_victim(std::span<Sequence* const> candidates);

/// Task 3b. Puts a preempted victim (its blocks already freed) back for recomputation: its K/V
/// are gone, so num_computed_tokens = 0; its tokens (prompt and generated) stay; status
/// Waiting; n_preemptions += 1; and it goes to the FRONT of `waiting`, ahead of later arrivals,
/// so it cannot starve.
void requeue_for_recompute(Sequence& victim, std::deque<Sequence*>& waiting);

/// Task 4. Static batching (HF generate-style): a batch is admitted together and no request
/// joins until every sequence of it has finished. True if a waiting request may be admitted
/// now: nothing was running when this step began (n_running_at_step_start == 0) and the new
/// batch has a free seat (n_admitted_this_step < max_num_seqs).
bool static_may_admit(int64_t n_running_at_step_start, int64_t n_admitted_this_step, int64_t max_num_seqs);

}  // namespace lio
