// scheduler_policy.h — Scheduler::schedule()'s step and the decisions inside it.
//
// Chapter 05 exercise points (solutions|exercises/05_continuous_batching/): scheduler_policy.cpp
// holds the decisions: how many tokens a sequence runs this step (Task 1), whether a waiting
// sequence may join the running batch (Task 2), whom to preempt when the pool runs out and how
// the victim goes back to the queue (Task 3), and when static batching lets requests in
// (Task 4). schedule_step.cpp holds the loop that asks them, once per engine step (Task 5).
// The Scheduler owns the queues, the block manager and the bookkeeping, and lends the step a
// narrow view of them (SchedulerQueues, SchedulerOps). Sources: Yu et al. 2022 (Orca:
// iteration-level scheduling), Agrawal et al. 2024 (Sarathi-Serve: chunked prefill), Kwon et
// al. 2023 sec. 4.5 (vLLM: FCFS, preempt the latest arrival, recompute or swap), vLLM v1
// `vllm/v1/core/sched/scheduler.py`, nano-vllm `nanovllm/engine/scheduler.py`.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "lio/scheduler.h"
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

// ---- Task 5: the scheduling step --------------------------------------------------------------

/// What the step may do to KV blocks: chapter 04's BlockManager, the host swap space and the
/// prefix cache, behind the Scheduler. Each operation records the copies it decides (swap-out,
/// swap-in, copy-on-write) for the engine to make before the forward pass. The Scheduler
/// implements it for its queues; a test may fake it. Units: tokens are rows (one token of one
/// sequence), blocks are the pool's blocks of block_size tokens.
class SchedulerOps {
 public:
  virtual ~SchedulerOps() = default;

  // -- asking ------------------------------------------------------------------------------
  /// Blocks the pool can hand out now (free, or held only by the prefix cache).
  virtual int64_t n_available_blocks() const = 0;
  /// New blocks `seq` needs to hold num_computed_tokens + n_new tokens (0 if its table already
  /// does).
  virtual int64_t blocks_needed(const Sequence& seq, int64_t n_new) const = 0;
  /// True if `seq`'s table could grow to `n_tokens` tokens with the blocks available now.
  virtual bool can_allocate(const Sequence& seq, int64_t n_tokens) const = 0;

  // -- doing (none of these moves a sequence between queues, except as said) --------------
  /// Slots for `seq`'s rows [num_computed_tokens, num_computed_tokens + n_new): blocks
  /// appended, copy-on-write copies recorded (static batching's padding rows give their blocks
  /// up first if needed). All or nothing: false, and nothing changed, if the pool is short.
  virtual bool append_slots(Sequence& seq, int64_t n_new) = 0;
  /// Preempts a running `seq`: takes it out of `running`; in swap mode with room in the swap
  /// space, copies its K/V out and appends it to `swapped` (status Swapped); otherwise frees its
  /// blocks and hands it to requeue_for_recompute (Task 3b), which puts it at the front of
  /// `waiting`. Either way its n_preemptions grows by 1 and the step's output lists it.
  virtual void preempt(Sequence& seq) = 0;
  /// Device blocks for a swapped `seq`'s num_computed_tokens + n_new tokens, its K/V copied
  /// back into them, its host blocks freed. False, and nothing changed, if they do not fit.
  /// Does not move it between queues or set its status.
  virtual bool swap_in(Sequence& seq, int64_t n_new) = 0;
  /// Prefix caching (chapter 04): a waiting `seq` with nothing computed and no blocks takes the
  /// longest cached prefix of its tokens (its blocks; num_computed_tokens = tokens hit).
  /// Returns whether it looked (false without a cache, or for a sequence with blocks).
  virtual bool match_cached_prefix(Sequence& seq) = 0;
  /// Undoes match_cached_prefix for a sequence that is not admitted after all: its blocks
  /// back, num_computed_tokens = 0. It looks again when next at the front.
  virtual void unmatch_cached_prefix(Sequence& seq) = 0;
  /// Gives up on `seq`, which can never run in this pool or budget: takes it out of whichever
  /// queue holds it and frees its blocks; the engine finishes it with FinishReason::Length.
  virtual void drop_unfittable(Sequence& seq) = 0;
};

/// Task 5. One iteration-level scheduling step (Yu et al. 2022, Orca; vLLM's
/// `Scheduler.schedule()`, nano-vllm's `Scheduler.schedule()`): which sequences run in the
/// next forward pass, and how many tokens (rows) each. Called by Scheduler::schedule() once
/// per engine step, with its queues (SchedulerQueues, lio/scheduler.h) and its block operations. Phases, in this order, sharing one token budget of
/// config.max_num_batched_tokens rows:
///   1. `running`, in queue order: each gets prefill_chunk() of what it has left (1 row when
///      decoding; a decoding sequence with num_lookahead_slots > 0 also gets up to that many
///      draft rows as the budget allows, chapter 06), and ops.append_slots() for them. When the
///      pool is short, choose_victim() among the running sequences not scheduled this step
///      (itself excluded) loses its blocks (ops.preempt) until the slots fit; with no victim
///      left, the sequence itself is preempted, or dropped as unfittable if nothing else is
///      scheduled. A sequence granted 0 rows is skipped.
///   2. only if nobody was preempted: `swapped`, oldest first, while a seat (running.size() <
///      max_num_seqs), budget and blocks (ops.swap_in) last; a resumed sequence (its remainder
///      chunked, whatever the setting) joins `running`, status Running.
///   3. only if nobody was preempted and nothing is left in `swapped`: `waiting`, first come
///      first served; the first that cannot join stops the phase (nobody overtakes it).
///      Without chunking a prompt longer than the whole budget is unfittable. After
///      ops.match_cached_prefix, its chunk is prefill_chunk(), and can_admit() decides (Task 2);
///      admitted, its slots are appended and it joins `running`, status Running. Under
///      SchedulingPolicy::Static, static_may_admit() (Task 4; counting running + swapped at the
///      step's start) must also allow it, and a batch member with no budget left joins with 0
///      rows. Refused: its cache match is undone; if nothing runs, nothing was scheduled and
///      the pool could not hold its chunk (at least 1 token), it is unfittable, else the phase
///      ends.
/// Returns the batch in that order, each entry with n_new_tokens > 0 and their sum <=
/// max_num_batched_tokens; at most max_num_seqs sequences are running afterwards. Throws
/// nothing of its own (the ops and Tasks 1-4 may throw). Static batching's padding rows are the
/// Scheduler's, added after this batch.
std::vector<ScheduledSequence> schedule_step(const SchedulerConfig& config, SchedulerQueues& queues,
                                             SchedulerOps& ops);

}  // namespace lio
