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
// al. 2023 sec. 4.5 (vLLM: FCFS, preemption by recompute or swap), vLLM v1
// `vllm/v1/core/sched/scheduler.py`, nano-vllm `nanovllm/engine/scheduler.py`.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "lio/scheduler.h"
#include "lio/sequence.h"

namespace lio {

/// Task 1. How many of a sequence's `remaining` uncomputed tokens (1 while it decodes) it runs
/// this step, with `budget` rows left in the step's token budget. The answer never exceeds
/// `remaining` nor `budget`, and is 0 when either is <= 0. With `chunked_prefill` a prompt may
/// be split over steps (Sarathi-Serve), and the step runs as much of it as the budget holds;
/// without it a prompt is never split: it runs whole in one step or waits (0).
/// docs/05_continuous_batching.md, section 4 and "Task 1".
int64_t prefill_chunk(int64_t remaining, int64_t budget, bool chunked_prefill);

/// What admitting one waiting sequence would take (Task 2's input).
struct AdmissionRequest {
  int64_t n_running = 0;         ///< sequences already running this step
  int64_t max_num_seqs = 0;      ///< the limit on running sequences
  int64_t chunk_tokens = 0;      ///< tokens it would run this step (Task 1)
  int64_t blocks_needed = 0;     ///< new KV blocks those tokens need
  int64_t blocks_available = 0;  ///< blocks the pool can hand out now
};

/// Task 2. Whether a waiting sequence joins the batch this step (continuous batching): true
/// exactly when every limit `r` names allows it — with it admitted no more than max_num_seqs
/// sequences run, it has rows to run in this step, and the pool holds the blocks those rows
/// need. docs/05_continuous_batching.md, "Task 2".
bool can_admit(const AdmissionRequest& r);

/// Task 3a. The running sequence that gives up its blocks when the pool has none for another,
/// under vLLM's FCFS policy (Kwon et al. 2023, sec. 4.5): FCFS ranks sequences by
/// (arrival_time, id), and the victim is the one among `candidates` (the running sequences not
/// yet scheduled this step) that this ranking protects least. The same answer for any order of
/// `candidates`; nullptr when it is empty. docs/05_continuous_batching.md, section 5 and
/// "Task 3".
Sequence* choose_victim(std::span<Sequence* const> candidates);

/// Task 3b. Puts a preempted `victim` (its blocks already freed) back in `waiting` for
/// recomputation (vLLM v1's `_preempt_request`). Afterwards its next prefill recomputes every
/// token it holds, its tokens (prompt and generated) are unchanged, its status is Waiting, its
/// n_preemptions counts this preemption, and no sequence of `waiting` that arrived after it can
/// be admitted before it (it cannot starve). docs/05_continuous_batching.md, section 5 and
/// "Task 3".
void requeue_for_recompute(Sequence& victim, std::deque<Sequence*>& waiting);

/// Task 4. Static batching's admission rule (HF generate-style): a batch is admitted together,
/// no request joins it while any of its members runs, and it has at most max_num_seqs
/// members. True if a waiting request may be admitted now, given the sequences running (or
/// swapped out) when this step began and those this step has admitted so far.
/// docs/05_continuous_batching.md, section 1 and "Task 4".
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
  /// blocks and hands it to requeue_for_recompute (Task 3b), which returns it to `waiting`.
  /// Either way the preemption is counted and the step's output lists it.
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

/// Task 5. One iteration-level scheduling step (Yu et al. 2022, Orca; vLLM's and nano-vllm's
/// `Scheduler.schedule()`; docs/05_continuous_batching.md, sections 3-5 and "Task 5"): which
/// sequences run in the next forward pass, and how many tokens (rows) each. Called by
/// Scheduler::schedule() once per engine step, with its queues (SchedulerQueues,
/// lio/scheduler.h) and its block operations; Tasks 1-4 make the decisions they name.
/// Returns the batch: running sequences first (queue order), then swapped ones resumed, then
/// waiting ones admitted, each entry with n_new_tokens > 0 and its slots appended. Afterwards:
///   - budget and seats: the rows sum to at most config.max_num_batched_tokens, at most
///     config.max_num_seqs sequences are running, and a sequence moved to `running` has status
///     Running; running sequences get their rows before anyone else, and a decoding sequence
///     with num_lookahead_slots > 0 also gets draft rows (chapter 06) as far as the budget goes;
///   - preemption: only when the pool cannot hold a running sequence's rows, and never of a
///     sequence already in this step's batch; the victim is Task 3's, and the sequence itself
///     goes when no victim is left;
///   - order: no waiting sequence is admitted ahead of an earlier one that cannot join (FCFS);
///     nobody is admitted or resumed from swap in a step that preempted, and nobody is admitted
///     while a sequence is swapped out; a resumed sequence's remainder may be chunked whatever
///     config.enable_chunked_prefill says;
///   - static batching (SchedulingPolicy::Static): admission as Task 4 allows, counting running
///     and swapped sequences at the step's start; a member admitted with no rows left this step
///     still joins `running` (it runs with its batch next step);
///   - the prefix cache: a waiting sequence looks up its cached prefix (ops.match_cached_prefix)
///     before its rows are counted, and gives it back (ops.unmatch_cached_prefix) if refused;
///   - unfittable sequences are dropped (ops.drop_unfittable), never waited on: one that could
///     not fit in the pool with nothing else scheduled, an unchunked prompt longer than the
///     whole budget, and a waiting one refused while nothing runs or is scheduled and the pool
///     could not hold its chunk (at least 1 token).
/// Throws nothing of its own (the ops and Tasks 1-4 may throw). Static batching's padding rows
/// are the Scheduler's, added after this batch.
std::vector<ScheduledSequence> schedule_step(const SchedulerConfig& config, SchedulerQueues& queues,
                                             SchedulerOps& ops);

}  // namespace lio
