// spec_decode.h — the arithmetic and the two algorithms of speculative decoding.
//
// Chapter 06 exercise points (solutions|exercises/06_speculative/spec_decode.cpp). A cheap
// drafter proposes k tokens; the target model scores all of them in one forward pass (k + 1
// logits rows); an acceptance rule keeps a prefix of the drafts and adds one token of its own,
// so the output is distributed exactly as the target's own sampling would be.
// Sources: Leviathan, Kalman, Matias 2023, "Fast Inference from Transformers via Speculative
// Decoding" (Algorithm 1; eq. 1, sec. 3.1, for E[tokens]; Theorem 3.8, sec. 3.3, for the
// speedup with cost ratio c; Appendix A.1 for the proof that the output follows the target),
// Chen et al. 2023, "Accelerating Large Language Model Decoding with Speculative Sampling"
// (Algorithm 2), vLLM `vllm/v1/sample/rejection_sampler.py` and `vllm/v1/spec_decode/ngram_proposer.py`,
// Saxena 2023 (prompt lookup decoding), llama.cpp `examples/lookup`.
//
// Task 1 and 2: how many tokens one target pass yields and what that buys (the chapter program
// prints the formula next to the measurement). Task 3: the n-gram proposer (what
// `--spec-method ngram` drafts with). Task 4: the acceptance rule (what chapter 06's round,
// lio/spec_round.h's Task 5, verifies every draft with, for every proposer and every sampling
// setting). Task 6: the draft tree (Medusa and EAGLE draft a tree of candidates, verified
// in one pass with a tree attention mask).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace lio {

/// Task 1. Expected tokens one target forward pass produces when each of the k drafts passes
/// its test independently with probability `a` (the acceptance rate), only an unbroken prefix
/// of drafts is kept, and the pass always adds one token of its own (the correction at the
/// first rejection, or a bonus token when all k are accepted). Derived in
/// docs/06_speculative.md, section 5 (Leviathan et al. 2023, eq. 1). Units: tokens per target
/// pass, in [1, k + 1]: 1 at a = 0 or k = 0, k + 1 at a = 1; rises with a and with k.
/// Throws InvalidArgument if a is outside [0, 1] (or NaN) or k < 0.
double expected_tokens_per_pass(double a, int64_t k);

/// Task 2a. Walltime speedup of speculative decoding over plain decoding (Leviathan et al.
/// 2023, Theorem 3.8): one round costs k draft steps of c target-steps each plus one target
/// pass (verification of k + 1 rows costs about one decode step while decode is memory-bound),
/// and yields expected_tokens_per_pass(a, k) tokens, where plain decoding makes one token per
/// target step (docs/06_speculative.md, section 5). c = draft step time / target step time.
/// k = 0 is plain decoding (speedup 1). Throws InvalidArgument as Task 1, or if c is negative
/// or not finite (NaN, inf).
double speculative_speedup(double a, int64_t k, double c);

/// Task 2b. The k in [0, k_max] with the largest speculative_speedup(a, k, c); the smallest such
/// k on ties. 0 means speculation does not pay at this (a, c). Throws InvalidArgument as
/// Task 2a, or if k_max < 0.
int64_t best_num_speculative_tokens(double a, double c, int64_t k_max);

/// Task 3. Prompt-lookup (n-gram) drafting: no second model, the sequence is its own draft.
/// Returns the up to k tokens that followed an earlier occurrence of the sequence's last n
/// tokens (an occurrence that ends before the last token; it may overlap the suffix), for the
/// largest n in [n_min, n_max] that has one, and of that n's occurrences the most recent;
/// fewer than k when the sequence ends first, empty when no n has one.
/// tokens: (n_tokens) prompt + generated ids (docs/06_speculative.md, section 6 and "Task 3").
/// Throws InvalidArgument if n_min < 1, n_max < n_min or k < 1.
std::vector<int32_t> ngram_propose(std::span<const int32_t> tokens, int64_t n_min, int64_t n_max, int64_t k);

/// What the acceptance rule decided for one sequence's k drafts.
struct SpecVerifyResult {
  /// The tokens to append, in order: the accepted drafts (a prefix of `drafts`), then exactly
  /// one token drawn by the rule (the correction from the residual at the first rejection, or
  /// the bonus token from the last target row when every draft was accepted). Size
  /// n_accepted + 1.
  std::vector<int32_t> tokens;
  int64_t n_accepted = 0;  ///< drafts accepted, in [0, k]
};

/// Inverse-CDF draw from a probability row: the first token id t (in id order) with
/// u * sum(probs) < probs[0] + ... + probs[t] (sums in double); the last token with nonzero
/// probability if rounding leaves none. The row need not be normalized. probs: (vocab) >= 0,
/// not all zero; u in [0, 1). Not an exercise (common/engine/src/spec_decode_common.cpp).
/// Throws InvalidArgument if probs is empty, holds a negative or non-finite entry, or sums to
/// 0, or if u is outside [0, 1) (or NaN).
int32_t sample_from_probs(std::span<const float> probs, double u);

/// Task 4. Speculative sampling's acceptance rule (Leviathan et al. 2023, Algorithm 1; Chen et
/// al. 2023, Algorithm 2; docs/06_speculative.md, sections 2-4 and "Task 4"). Returns an
/// accepted prefix of `drafts` followed by exactly one token the rule draws, such that the token
/// emitted at each position i is distributed exactly as p_i given the tokens before it,
/// whatever the drafter's q_i was (the lesson's proof): a good drafter only makes the prefix
/// longer. When a rejection leaves rounding nothing to draw from, the token is drawn from p_i.
/// Greedy targets are the one-hot case (p_i one-hot at the argmax): drafts are kept while they
/// equal the target's argmax, and the first that does not is replaced by it.
/// target_probs: (k + 1, vocab) row-major, row i = p_i, the target's sampling distribution after
///   the prefix + drafts[0 .. i) (penalties, temperature, top-k/p, min-p already applied).
/// draft_probs: (k, vocab) row-major q_i, or empty when the drafter is deterministic (n-gram
///   lookup): then q_i is one-hot at drafts[i].
/// drafts: (k) token ids, k >= 0.
/// uniform: returns independent U[0, 1) draws, spent in this order so that a seeded run is
///   reproducible: one per draft test whose outcome is not certain (a test whose acceptance
///   probability P is below 1 accepts when u < P; a certain acceptance draws nothing), and one per
///   token drawn from a distribution (with sample_from_probs); never otherwise.
/// Throws InvalidArgument if the shapes disagree (target_probs.size() != (k + 1) * vocab,
/// draft_probs neither empty nor k * vocab), vocab < 1, a draft id is outside [0, vocab), or
/// q_i(drafts[i]) == 0 (the drafter proposed a token its own distribution cannot produce); all
/// k drafts are checked before the first draw, so the error does not depend on the uniforms.
SpecVerifyResult verify_drafts(std::span<const float> target_probs, std::span<const float> draft_probs,
                               std::span<const int32_t> drafts, int64_t vocab,
                               const std::function<double()>& uniform);

/// What tree verification decided for one sequence's draft tree (Task 6b).
struct TreeVerifyResult {
  /// The accepted nodes, root excluded, in depth order: path[d - 1] is the accepted node at
  /// depth d, a child of path[d - 2] (of the root for d = 1). Empty when no draft was accepted.
  std::vector<int32_t> path;
  /// The tokens to append, in order: the accepted nodes' tokens, then exactly one token drawn by
  /// the rule at the last accepted node (or the root). Size path.size() + 1.
  std::vector<int32_t> tokens;
};

/// Task 6a. The tree attention mask of a draft tree (SpecInfer, Miao et al. 2024, sec. 4
/// "tree-based parallel decoding"; Medusa, Cai et al. 2024, sec. 2.1.2 "tree attention";
/// docs/06_speculative.md, section 7 and "Task 6"). Node 0 is the root (the sequence's last
/// token); node i > 0 drafts a token after its parent parents[i]. The nodes run as n rows of
/// one pass, in index order, after the sequence's cached prefix; row i may attend to the prefix
/// and to itself and its ancestors only, never to a sibling's branch.
/// parents: (n) parent index of each node, parents[0] = -1, 0 <= parents[i] < i for i > 0 (a
/// parent comes before its children: topological order), 1 <= n <= 64.
/// Returns (n) masks: bit j of mask[i] is set iff node j is node i or one of its ancestors (so
/// popcount(mask[i]) - 1 is node i's depth, and mask[0] == 1). A chain (parents[i] = i - 1)
/// gives the causal mask: mask[i] = 2^(i+1) - 1.
/// Throws InvalidArgument if n is 0 or above 64, parents[0] != -1, or a parent index is not in
/// [0, i).
std::vector<uint64_t> tree_attention_masks(std::span<const int32_t> parents);

/// Task 6b. Verification of a draft tree in one target pass with SpecInfer's multi-draft rule for
/// deterministic drafts (Miao et al. 2024, Algorithm 2, "multi-step speculative sampling", with
/// every q one-hot at its node's token; docs/06_speculative.md, section 7 and "Task 6"): starting
/// at the root, the children of the current node are tried in index order; child c is accepted
/// with probability p(c's token) where p is the current node's target distribution with every
/// token of a child already rejected at this node set to 0 and renormalized (the residual
/// max(0, p - q) of Task 4 for a one-hot q); the first accepted child becomes the current node.
/// When every child is rejected (or the node is a leaf), one token is drawn from the current
/// residual (the bonus token at a leaf). The output at each depth is distributed exactly as the
/// target's sampling would give it. Greedy targets (p one-hot at the argmax) accept the one child
/// whose token is the argmax and end with the argmax: greedy output equals plain greedy decoding.
/// target_probs: (n, vocab) row-major, row i = the target's sampling distribution after the
///   prefix and the tokens of node i's path (node i's own token included; row 0 after the root).
/// parents: (n) as Task 6a. tokens: (n) each node's token id; tokens[0] (the root's) is not tested.
///   Siblings must hold distinct tokens.
/// uniform: U[0, 1) draws, spent in order: one per child test whose acceptance probability P is
///   strictly between 0 and 1 (u < P accepts; P = 0 or 1 is decided without a draw), one per
///   token drawn with sample_from_probs from a distribution with more than one token of nonzero
///   probability (when one token holds all the mass, as in a greedy row, it is taken without a
///   draw: a greedy tree spends no uniform); never otherwise.
/// Throws InvalidArgument if the shapes disagree (target_probs.size() != n * vocab,
/// tokens.size() != n), vocab < 1, a token is outside [0, vocab), two siblings hold the same
/// token, or as Task 6a for `parents`; all before the first draw.
TreeVerifyResult verify_tree(std::span<const float> target_probs, std::span<const int32_t> parents,
                             std::span<const int32_t> tokens, int64_t vocab, const std::function<double()>& uniform);

}  // namespace lio
