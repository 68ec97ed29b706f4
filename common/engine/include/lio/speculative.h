// speculative.h — speculative decoding in the batched engine (chapter 06): who drafts.
//
// Each step a decoding sequence may run 1 + k rows instead of one: its last token plus k
// drafted tokens, in the same ForwardBatch as every other sequence's prefill and decode rows.
// The target's k + 1 logits rows verify the drafts and the sequence's KV cache is rolled back
// (chapter 06's round, lio/spec_round.h, Task 5, with Task 4's rule from lio/spec_decode.h).
// This header holds the drafters (vLLM v1 `vllm/v1/spec_decode/`: the n-gram proposer and the
// draft-model proposer; LayerSkip's early exit, Elhoushi et al. 2024) behind one interface; the
// Engine schedules the rows and runs the round.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lio/block_manager.h"
#include "lio/model_runner.h"
#include "lio/sequence.h"

namespace lio {

/// Where drafts come from (`--spec-method`).
enum class SpecMethod {
  None,       ///< no speculation: one row per decoding sequence
  Draft,      ///< a smaller model with the target's tokenizer (--draft-model)
  Ngram,      ///< prompt lookup: the sequence's own earlier tokens (--ngram-min/--ngram-max)
  EarlyExit,  ///< the target's first L layers + final norm + LM head (--draft-layers)
  Medusa,     ///< Medusa-1 heads on the target's last hidden state, a draft tree (--medusa-heads)
  Eagle,      ///< an EAGLE drafter: one decoder layer at the feature level, a draft tree (--eagle-drafter)
};
/// The method's name, as --spec-method takes it (lio/cli_parse.h parse_spec_method).
const char* spec_method_name(SpecMethod method);

/// How drafts are accepted (`--spec-acceptance`).
enum class SpecAcceptance {
  /// Exact: chapter 06's rules (Task 4 for a chain, Task 6b's SpecInfer rule for a tree); the
  /// output is distributed as the target's own sampling (vLLM's rejection_sampler).
  Rejection,
  /// LOSSY: Medusa's typical acceptance (lio/typical_acceptance.h; vLLM v0's
  /// typical_acceptance_sampler). Greedy output is unchanged; sampled output is not the target's
  /// distribution.
  Typical,
};

/// Speculation settings (vLLM's `--speculative-config` fields, spelled as flags).
struct SpeculativeConfig {
  SpecMethod method = SpecMethod::None;  ///< --spec-method
  int64_t num_speculative_tokens = 4;    ///< --num-speculative-tokens: k drafts per step, [1, 16]
  int64_t draft_layers = 0;              ///< --draft-layers: early exit's L, [1, n_layers)
  /// --ngram-min: shortest suffix matched (vLLM's prompt_lookup_min). 2, not 1: one repeated
  /// token is weak evidence; on chapter 06's copy prompt min 1 drafts more and gets a smaller
  /// share accepted (compare `lio generate --spec-method ngram --ngram-min 1` and `2`).
  int64_t ngram_min = 2;
  int64_t ngram_max = 4;                 ///< --ngram-max: longest suffix matched (vLLM prompt_lookup_max)
  /// --medusa-heads: the heads file (scripts/make_medusa.sh writes models/MODEL.medusa.safetensors,
  /// MODEL the model file's stem).
  std::string medusa_heads;
  /// --medusa-top-k: candidates each Medusa head offers a tree node; 1 = a chain of argmaxes.
  int64_t medusa_top_k = 4;
  /// --eagle-drafter: the EAGLE drafter file (scripts/make_eagle.sh writes
  /// models/MODEL.eagle.safetensors).
  std::string eagle_drafter;
  /// --eagle-top-k: nodes expanded per tree level and children per expanded node (EAGLE-2's
  /// top-k); 1 = a chain of the drafter's argmaxes, num_speculative_tokens long.
  int64_t eagle_top_k = 4;
  /// --eagle-depth: levels of the tree at most (with eagle_top_k > 1; EAGLE-2's depth); one
  /// drafter pass per level after the first.
  int64_t eagle_depth = 5;
  /// --spec-acceptance: rejection (exact, the default) or typical (Medusa's, lossy).
  SpecAcceptance acceptance = SpecAcceptance::Rejection;
  /// --typical-posterior-threshold: typical acceptance's epsilon, in (0, 1] (Medusa's and vLLM's
  /// default 0.09): the most a draft's target probability must exceed.
  double typical_posterior_threshold = 0.09;
  /// --typical-posterior-alpha: typical acceptance's delta, >= 0 (default 0.3): the threshold is
  /// min(epsilon, delta * exp(-entropy)), lower where the target's row is flat.
  double typical_posterior_alpha = 0.3;
  /// Throws InvalidArgument naming the flag for k outside [1, 16], L outside [1, n_layers)
  /// with early exit, ngram_min < 1 or ngram_max < ngram_min with n-gram lookup, a Medusa
  /// method without a heads file or with medusa_top_k < 1, an EAGLE method without a drafter
  /// file or with eagle_top_k or eagle_depth < 1, typical acceptance with its threshold outside
  /// (0, 1] or its alpha negative. k may be up to 63 with Medusa and EAGLE (a
  /// tree's nodes; the tree mask holds 64 rows).
  /// `target_layers`: the target's decoder layers.
  void validate(int64_t target_layers) const;
};

/// One sequence's drafts for one step.
struct DraftProposal {
  std::vector<int32_t> tokens;  ///< (k') drafted ids, k' <= the k asked for (may be 0)
  /// (k', vocab) row-major: the distribution q_i each draft was drawn from, or empty when the
  /// drafts are deterministic (greedy drafting, n-gram lookup): q_i one-hot at tokens[i].
  std::vector<float> probs;
  /// A draft tree (Medusa): (k' + 1) parent indices, parents[0] = -1 for the root (the
  /// sequence's last token), parents[i + 1] in [0, i + 1) the node tokens[i] follows (a parent
  /// before its children). Empty: a chain, tokens[i] follows tokens[i - 1]. A tree's drafts are
  /// deterministic (probs empty) and verified with Task 6's rule; a tree that is a chain
  /// (parents[i] = i - 1 throughout) is verified as a chain (Task 5's round).
  std::vector<int32_t> parents;
};

/// A drafter. Not thread-safe (the Engine's thread).
class Proposer {
 public:
  virtual ~Proposer() = default;
  /// True when drafts need no forward pass (n-gram lookup): the engine drafts before it
  /// schedules, and reserves exactly that many lookahead slots.
  virtual bool drafts_before_schedule() const { return false; }
  /// Drafts up to ks[i] tokens after each seqs[i], a decoding sequence (its last token's K/V
  /// not yet computed: num_computed_tokens == n_tokens - 1) whose block table already holds
  /// slots for positions up to n_tokens - 1 + ks[i]. Returns one proposal per sequence.
  /// Throws what the draft runner throws.
  virtual std::vector<DraftProposal> propose(std::span<Sequence* const> seqs, std::span<const int64_t> ks) = 0;
  /// After verification: `seq` holds its new tokens and num_computed_tokens counts only
  /// verified positions; the drafter rolls its own state back to match.
  virtual void on_verified(const Sequence& seq) { (void)seq; }
  /// `seq` finished, was aborted or preempted: its drafter state (the draft model's KV blocks)
  /// is freed.
  virtual void release(const Sequence& seq) { (void)seq; }
  /// True when the drafter reads the target's final hidden states (Medusa, EAGLE): every pass
  /// then returns them (ForwardBatch::return_hidden) and on_hidden gets each sampled sequence's
  /// rows.
  virtual bool wants_hidden() const { return false; }
  /// `hidden` ((m, d_model) row-major): the target's final hidden states (after the output norm)
  /// at the rows whose logits gave `seq`'s m new tokens this pass, oldest first: one row after a
  /// prefill or a plain decode step, the root and the accepted drafts' rows after a verification
  /// (so the last row gave the last token, at position n_tokens - 2 once the tokens are
  /// appended). Called after every pass that sampled for `seq`.
  virtual void on_hidden(const Sequence& seq, std::span<const float> hidden) {
    (void)seq;
    (void)hidden;
  }
};

/// Prompt lookup (Saxena 2023; vLLM `NgramProposer`; llama.cpp `examples/lookup`): drafts are the
/// tokens that followed the most recent earlier occurrence of the sequence's last n tokens
/// (ngram_propose, chapter 06 Task 3). Deterministic: q is one-hot.
class NgramProposer final : public Proposer {
 public:
  /// Throws InvalidArgument if n_min < 1 or n_max < n_min.
  NgramProposer(int64_t n_min, int64_t n_max);
  bool drafts_before_schedule() const override { return true; }
  std::vector<DraftProposal> propose(std::span<Sequence* const> seqs, std::span<const int64_t> ks) override;

 private:
  int64_t n_min_;
  int64_t n_max_;
};

/// A draft model run autoregressively k times per step, every speculating sequence in one
/// batch per draft position (Leviathan et al. 2023, Chen et al. 2023; llama.cpp
/// `examples/speculative`). Two kinds:
/// - a separate model (`--spec-method draft`): its own runner and KV pool with its own
///   BlockManager; each sequence's draft K/V catch up on the tokens the draft has not seen
///   (the prompt at first, then the accepted tokens) in the first pass, and roll back after
///   verification;
/// - early exit (`--spec-method early-exit`, Elhoushi et al. 2024, LayerSkip): the target's own
///   runner with ForwardBatch::n_layers = L. Its first L layers are the target's, so it reads the
///   target's cached K/V and writes its drafts' K/V for those layers into the target's blocks at
///   the draft positions (the slots the scheduler reserved), which verification overwrites: no
///   state of its own, nothing to roll back.
/// Drafts are drawn with the sequence's sampling settings (a draft sampler of its own, seeded
/// from the request's seed), so q is the distribution the acceptance rule needs.
class DraftModelProposer final : public Proposer {
 public:
  /// A separate draft model: `draft` (which must outlive this) runs whole over its own pool.
  explicit DraftModelProposer(ModelRunner& draft);
  /// Early exit: `target` (which must outlive this) runs its first `n_layers` layers. Throws
  /// InvalidArgument if n_layers is outside [1, target's layers).
  DraftModelProposer(ModelRunner& target, int64_t n_layers);

  std::vector<DraftProposal> propose(std::span<Sequence* const> seqs, std::span<const int64_t> ks) override;
  void on_verified(const Sequence& seq) override;
  void release(const Sequence& seq) override;
  /// Draft KV blocks free now (a separate model; 0 for early exit). All of them once every
  /// sequence is released.
  int64_t n_free_blocks() const { return blocks_ ? blocks_->n_free_blocks() : 0; }

 private:
  struct State {
    std::vector<int32_t> block_table;  ///< draft pool blocks (separate model only)
    int64_t num_computed = 0;          ///< positions whose draft K/V are in them
    std::unique_ptr<Sampler> sampler;  ///< the request's settings, its own seed
  };
  State& state_of(const Sequence& seq);

  ModelRunner& runner_;
  int64_t n_layers_ = 0;                    ///< 0 = the whole (draft) model
  std::unique_ptr<BlockManager> blocks_;    ///< separate model: its pool's block ids
  std::map<int64_t, State> states_;         ///< by sequence id
};

/// The drafter `config` asks for: nullptr for SpecMethod::None; an NgramProposer; a
/// DraftModelProposer over `draft` (SpecMethod::Draft) or over `target` (EarlyExit); a
/// MedusaProposer or an EagleProposer over the files `config` names (loaded and checked here).
/// Throws InvalidArgument if `config` is invalid for `target`, or Draft is asked for without a
/// draft runner, or the draft's vocabulary size differs from the target's; what the heads' or
/// drafter's loader throws; UnsupportedError for EAGLE on a grid of more than one process or
/// Medusa under pipeline parallelism.
std::unique_ptr<Proposer> make_proposer(const SpeculativeConfig& config, ModelRunner& target, ModelRunner* draft);

/// Throws InvalidArgument ("the draft model's tokenizer differs from the target's: ...") unless
/// `draft` has the same vocabulary as `target`: the same size and the same text for every token
/// id, and the same EOS. Speculation compares token ids, so a draft with another tokenizer
/// would propose meaningless ids.
void check_draft_tokenizer(const Tokenizer& target, const Tokenizer& draft);

}  // namespace lio
