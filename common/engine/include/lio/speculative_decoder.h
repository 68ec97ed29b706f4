// speculative_decoder.h — chapter 06's speculation as one object beside the Engine.
//
// Speculative decoding touches four phases of an engine step (lio/engine_step.h): before the
// schedule it plans how many lookahead slots each decoding sequence may take; after it, the
// drafter proposes; after the forward pass each speculating sequence's round verifies its drafts
// and rolls its KV cache back (Task 5); after the tokens are appended the round's statistics are
// counted and the drafter rolls its own state back. SpeculativeDecoder holds all of that — the
// drafter (lio/speculative.h), this step's draft distributions and the counters — so
// Engine::step stays a schedule, a pass and a post-process, and a new drafter is one Proposer.
// vLLM v1 splits the same work between `GPUModelRunner.propose_draft_token_ids`, the
// `RejectionSampler` and `Scheduler.update_from_output`.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "lio/engine_step.h"
#include "lio/kv_cache_coordinator.h"
#include "lio/model_runner.h"
#include "lio/scheduler.h"
#include "lio/sequence.h"
#include "lio/spec_decode.h"
#include "lio/speculative.h"

namespace lio {

/// Speculation's counters over an engine's life (vLLM's `spec_decode_num_drafts`,
/// `_num_draft_tokens`, `_num_accepted_tokens`, `_num_accepted_tokens_per_pos`).
struct SpecDecodeStats {
  int64_t num_drafts = 0;           ///< verification rounds with at least one draft
  int64_t num_draft_tokens = 0;     ///< drafts verified
  int64_t num_accepted_tokens = 0;  ///< drafts accepted
  /// accepted_per_position[i]: rounds whose (i + 1)-th draft was accepted (vLLM's
  /// num_accepted_tokens_per_pos); grows to the longest accepted run seen.
  std::vector<int64_t> accepted_per_position;
  /// Draft trees: accepted nodes whose K/V moved from their tree row's slot to their position's
  /// (those off the tree's first chain; ModelRunner::copy_slots).
  int64_t num_kv_slot_moves = 0;
};

/// Chapter 06 inside the engine: lookahead planning, drafting, verification with the KV cache's
/// rollback, and the round's bookkeeping, for one drafter. Not thread-safe (the engine's thread).
class SpeculativeDecoder {
 public:
  /// The drafter `config` asks for (make_proposer over `target` and `draft`), over the engine's
  /// KV cache groups `groups` (which must outlive this, as must the runners). Throws
  /// InvalidArgument as make_proposer, or if config.method is None (the engine then holds no
  /// decoder).
  SpeculativeDecoder(const SpeculativeConfig& config, ModelRunner& target, ModelRunner* draft,
                     KvCacheCoordinator& groups);

  /// Logits rows one sequence may run in a step: 1 + k.
  int64_t rows_per_sequence() const { return 1 + config_.num_speculative_tokens; }
  /// The drafter (read-only: a test's view of the draft model's blocks).
  const Proposer& proposer() const { return *proposer_; }
  /// Counters over the decoder's life.
  const SpecDecodeStats& stats() const { return stats_; }

  /// Before the schedule: every running sequence of `live` about to decode one token may
  /// speculate, k capped so that its drafts pass neither max_tokens nor the context; sequences
  /// that fork samples or report logprobs do not. Sets each sequence's num_lookahead_slots (and
  /// clears its drafts); a drafter that needs no forward pass (n-gram) drafts now and reserves
  /// exactly what it drafted. Throws what the drafter throws.
  void plan_lookahead(const std::map<int64_t, std::unique_ptr<Sequence>>& live);
  /// After the schedule (which gave a speculating sequence 1 + k' rows, k' <= its lookahead):
  /// the drafter proposes each such sequence's drafts (Sequence::spec_token_ids) and the
  /// sequence's rows are corrected to 1 + the drafts it got (sched.n_tokens follows); every
  /// sequence of `live` loses its lookahead. Throws what the drafter throws.
  void draft(SchedulerOutput& sched, const std::map<int64_t, std::unique_ptr<Sequence>>& live);
  /// A preempted sequence's drafts are void and the drafter's state for it goes.
  void on_preempted(Sequence& seq);
  /// A finished (or aborted) sequence: the drafter's state for it goes.
  void release(const Sequence& seq);

  /// The forward pass of `step` (a step with logits rows) and one result per step.sampling
  /// entry, in order. A sequence with drafts finishes its round over its 1 + k rows (with
  /// typical acceptance, config.acceptance, every round takes the tree's path and its rule): a chain with
  /// Task 5 (verification, then its KV cache rolled back to what stays valid), a tree with Task
  /// 6 (the batch's copy gets the tree's mask and positions, Task 6a; Task 6b verifies; the
  /// accepted nodes' K/V move to their positions' slots, ModelRunner::copy_slots, and the rest
  /// are released). Any other sequence samples its one row as ModelRunner::forward_sample
  /// would. A drafter that reads hidden states (Medusa) gets each sequence's row (on_hidden).
  /// Throws what the runner, Tasks 5 and 6 and the sampler throw.
  std::vector<SpecVerifyResult> run(const StepBatch& step);
  /// After `seq`'s round's tokens were appended (a stop inside them cuts the sequence short):
  /// the cache is cut back to the sequence's last token if it counts more, the round is counted
  /// (seq's and this decoder's counters, copied into `out`), the drafter rolls back and the
  /// drafts are cleared. Call only for a sequence that had drafts this step.
  void finish_round(Sequence& seq, const SpecVerifyResult& result, RequestOutput& out);

 private:
  /// Marks each tree's rows in `batch` (a copy of step.batch): ForwardBatch::set_tree.
  void mark_trees(const StepBatch& step, ForwardBatch& batch) const;
  /// Results from the pass's host logits and (Medusa) hidden rows ((n_logits, d_model) or empty).
  std::vector<SpecVerifyResult> verify(const StepBatch& step, std::span<const float> logits,
                                       std::span<const float> hidden);
  /// One tree's round over its rows ((n_nodes, vocab)): Task 6b, or typical acceptance when the
  /// config asks for it (which verifies a chain this way too, as a tree of one branch); `kept`
  /// is set to the verified path's nodes, the root (0) first: the rows whose logits gave the
  /// round's new tokens.
  SpecVerifyResult tree_round(Sequence& seq, std::span<const float> rows, std::vector<int64_t>& kept);

  SpeculativeConfig config_;
  ModelRunner& target_;
  KvCacheCoordinator& groups_;
  std::unique_ptr<Proposer> proposer_;
  std::map<int64_t, std::vector<float>> draft_probs_;  ///< this step's q rows, by sequence id
  SpecDecodeStats stats_;
};

}  // namespace lio
