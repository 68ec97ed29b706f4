// scheduler_policy.h — Scheduler::schedule()'s step: who runs in the next forward pass.
//
// Chapter 05's exercise point (solutions|exercises/05_continuous_batching/schedule_step.cpp,
// Task 1): schedule_step, the whole scheduling step with every decision in it — how many rows
// each sequence runs under the token budget, who joins under the seats and the pool, who is
// preempted when the pool runs out and where it goes back, and when static batching admits.
// The Scheduler owns the queues, the block manager and the bookkeeping, and lends the step a
// narrow view of them (SchedulerQueues, SchedulerOps). Sources: Yu et al. 2022 (Orca:
// iteration-level scheduling), Agrawal et al. 2024 (Sarathi-Serve: chunked prefill), Kwon et
// al. 2023 sec. 4.5 (vLLM: FCFS, preemption by recompute or swap), vLLM v1
// `vllm/v1/core/sched/scheduler.py`, nano-vllm `nanovllm/engine/scheduler.py`.
#pragma once

#include <cstdint>
#include <vector>

#include "lio/scheduler.h"
#include "lio/sequence.h"

namespace lio {

// ---- Task 1: the scheduling step --------------------------------------------------------------

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
  /// Preempts a running `seq`: takes it out of `running`, counts the preemption (its
  /// n_preemptions; the step's output lists it). In swap mode with room in the swap space it
  /// copies its K/V out, appends it to `swapped` (status Swapped) and returns true. Otherwise
  /// it frees its blocks (its K/V are gone: num_computed_tokens = 0, its tokens kept) and
  /// returns false: the sequence is then in no queue, and the step puts it back in `waiting`.
  virtual bool preempt(Sequence& seq) = 0;
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

/// Task 1. One iteration-level scheduling step (Yu et al. 2022, Orca; vLLM's and nano-vllm's
/// `Scheduler.schedule()`; docs/05_continuous_batching.md, sections 1-5 and "Task 1"): which
/// sequences run in the next forward pass, and how many tokens (rows) each. Called by
/// Scheduler::schedule() once per engine step, with its queues (SchedulerQueues,
/// lio/scheduler.h) and its block operations.
/// Returns the batch: running sequences first (queue order), then swapped ones resumed, then
/// waiting ones admitted, each entry with n_new_tokens > 0 and its slots appended. Afterwards:
///   - budget and seats: the rows sum to at most config.max_num_batched_tokens, at most
///     config.max_num_seqs sequences are running, and a sequence moved to `running` has status
///     Running; running sequences get their rows before anyone else, and a decoding sequence
///     with num_lookahead_slots > 0 also gets draft rows (chapter 06) as far as the budget goes;
///   - rows (section 4): no sequence gets more rows than it has uncomputed tokens; with
///     config.enable_chunked_prefill a prompt may be split over steps, and a step leaves no
///     budget unused that a scheduled or admitted prompt could have taken; without it a
///     waiting prompt runs whole in one step or waits;
///   - admission: a waiting sequence joins only with a seat, at least one row this step and the
///     pool's blocks for its rows; no waiting sequence is admitted ahead of an earlier one that
///     cannot join (FCFS);
///   - preemption (section 5): only when the pool cannot hold a running sequence's rows, and
///     never of a sequence already in this step's batch; the victim is the one FCFS protects
///     least (ranked by (arrival_time, id)) among the running sequences not yet scheduled, and
///     the sequence itself goes when none is left; one preempted by recompute (ops.preempt
///     returned false) is back in `waiting`, status Waiting, and no waiting sequence that
///     arrived after it can be admitted before it;
///   - order: nobody is admitted or resumed from swap in a step that preempted, and nobody is
///     admitted while a sequence is swapped out; a resumed sequence's remainder may be chunked
///     whatever config.enable_chunked_prefill says;
///   - static batching (SchedulingPolicy::Static, section 1): a batch of at most max_num_seqs
///     is admitted together, only when no sequence ran or was swapped out at the step's start;
///     a member admitted with no rows left this step still joins `running` (it runs with its
///     batch next step);
///   - the prefix cache: a waiting sequence looks up its cached prefix (ops.match_cached_prefix)
///     before its rows are counted, and gives it back (ops.unmatch_cached_prefix) if refused;
///   - unfittable sequences are dropped (ops.drop_unfittable), never waited on: one that could
///     not fit in the pool with nothing else scheduled, an unchunked prompt longer than the
///     whole budget, and a waiting one refused while nothing runs or is scheduled and the pool
///     could not hold its chunk (at least 1 token).
/// Throws nothing of its own (the ops may throw). Static batching's padding rows are the
/// Scheduler's, added after this batch.
std::vector<ScheduledSequence> schedule_step(const SchedulerConfig& config, SchedulerQueues& queues,
                                             SchedulerOps& ops);

}  // namespace lio
