// medusa.h — Medusa-1 draft heads (chapter 06, section 7): a tree of drafts from the target's own
// last hidden state, no second model.
//
// Cai et al. 2024, "Medusa: Simple LLM Inference Acceleration Framework with Multiple Decoding
// Heads" (sec. 2.1.1, eq. 1): head k is one residual block on the target's final hidden state
// h_t, z_k = h_t + SiLU(W_k h_t + b_k), read by the target's own frozen LM head; head k (k = 0 ..
// K - 1) predicts the token k + 2 positions ahead of h_t (the LM head itself predicts the next
// one). The heads are trained by self-distillation on this machine (scripts/make_medusa.sh ->
// scripts/train_medusa.py); LIO keeps only the LM head's rows of a reduced draft vocabulary (the
// training data's most frequent target tokens, EAGLE-3's trick, Li et al. 2025, sec. 3.3), so the
// heads cost a fraction of a decode step. The drafts form a tree (sec. 2.1.2), grown best-first by
// the product of the heads' probabilities, verified in one pass with a tree mask (Task 6).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lio/speculative.h"

namespace lio {

/// Medusa heads as trained by scripts/train_medusa.py, in f32 on the host.
struct MedusaHeads {
  int64_t n_heads = 0;          ///< K
  int64_t d_model = 0;          ///< d, the target's hidden size
  std::vector<int32_t> vocab;   ///< (V') the draft vocabulary: target token ids, distinct
  std::vector<float> lm_head;   ///< (V', d) row-major: the target's output matrix rows of `vocab`
  std::vector<float> weight;    ///< (K, d, d) row-major: W_k
  std::vector<float> bias;      ///< (K, d): b_k

  /// Reads a heads file: a safetensors file holding `medusa.vocab` (I32, (V')),
  /// `medusa.lm_head` (F32, (V', d)) and, for k in 0 .. K - 1, `medusa.{k}.weight` (F32, (d, d))
  /// and `medusa.{k}.bias` (F32, (d)). Throws InvalidArgument if the file is missing; FormatError
  /// naming the tensor if one is missing or has another dtype or shape, if K is 0, or a vocab id
  /// is outside [0, target_vocab) or repeated; InvalidArgument if d differs from
  /// `target_d_model` ("the heads were trained for another model").
  static MedusaHeads load(const std::string& path, int64_t target_d_model, int64_t target_vocab);
};

/// One head's most likely draft tokens for one hidden state.
struct MedusaCandidates {
  std::vector<int32_t> tokens;   ///< (top_k) target token ids, most likely first
  std::vector<float> log_probs;  ///< (top_k) their log-probabilities under the head's softmax over V'
};

/// The Medusa drafter: every pass returns the target's final hidden states (wants_hidden), the
/// engine hands each sampled sequence's row to on_hidden, and the next step's drafts are a tree
/// grown from it before the schedule (no forward pass). Deterministic drafts (q one-hot): exact
/// under sampling with Task 6's rule. Not thread-safe.
class MedusaProposer final : public Proposer {
 public:
  /// `top_k`: candidates each head offers a node (1 = a chain of each head's argmax). Throws
  /// InvalidArgument if top_k < 1.
  MedusaProposer(MedusaHeads heads, int64_t top_k);
  ~MedusaProposer() override;

  bool drafts_before_schedule() const override { return true; }
  bool wants_hidden() const override { return true; }
  void on_hidden(const Sequence& seq, std::span<const float> hidden) override;
  /// Up to ks[i] nodes after each seqs[i]'s last token, as a tree (DraftProposal::parents): the
  /// ks[i] best nodes of the tree whose depth-d nodes are head d - 1's top_k tokens, a node's
  /// score the sum of its path's log-probabilities (best-first, so a parent precedes its
  /// children). No drafts for a sequence without a hidden state yet (its first step after a
  /// prefill, a swap-in, or a preemption).
  std::vector<DraftProposal> propose(std::span<Sequence* const> seqs, std::span<const int64_t> ks) override;
  void release(const Sequence& seq) override;

  /// The K heads' candidates for hidden states `hidden` ((n, d) row-major): result[r][k] is head
  /// k's for row r. Throws InvalidArgument if hidden is not a multiple of d floats.
  std::vector<std::vector<MedusaCandidates>> candidates(std::span<const float> hidden);
  /// The heads.
  const MedusaHeads& heads() const { return heads_; }

 private:
  struct Packed;  ///< the heads packed for the CPU's matmul kernels
  MedusaHeads heads_;
  int64_t top_k_;
  std::unique_ptr<Packed> packed_;
  std::map<int64_t, std::vector<float>> hidden_;  ///< by sequence id: the row that gave its last token
};

/// The tree a drafter proposes from per-depth candidates (Medusa's heads; EAGLE-2's dynamic tree
/// is the same search over a drafter's conditional candidates): the n_nodes best nodes, best
/// first, where a node at depth d + 1 extends a depth-d node with one of depth_candidates[d]'s
/// tokens and its score is the sum of its path's log-probabilities (a lazy best-first search, a
/// priority queue of (parent, next candidate) pairs). Returns DraftProposal{tokens, {}, parents}
/// with parents[0] = -1 for the root and parents[i + 1] < i + 1 for tokens[i]. Fewer than n_nodes
/// when the candidates run out. Throws InvalidArgument if n_nodes < 0.
DraftProposal best_first_tree(std::span<const MedusaCandidates> depth_candidates, int64_t n_nodes);

}  // namespace lio
