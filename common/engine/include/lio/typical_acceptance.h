// typical_acceptance.h — Medusa's typical acceptance: a LOSSY verification rule for draft trees.
//
// Chapter 06's rules (Task 4 for a chain, Task 6b for a tree) are exact: the output is
// distributed as the target's own sampling would give it, which makes sampled drafts pay a
// rejection whenever the target's distribution is flat. Medusa (Cai et al. 2024, sec. 2.3.1,
// "typical acceptance") trades that exactness for longer accepted runs: a draft is kept when the
// target gives it a probability above an entropy-dependent threshold, whatever the draft's own
// distribution was. Greedy decoding is unchanged (a one-hot row accepts only its argmax); at a
// temperature above 0 the output is NOT the target's distribution. vLLM v0 served the same rule
// as `--spec-decoding-acceptance-method typical_acceptance_sampler`.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "lio/spec_decode.h"

namespace lio {

/// Medusa's typical acceptance over a draft tree (Cai et al. 2024, sec. 2.3.1; the reference
/// code's `evaluate_posterior` with sampling = "typical"). Node i > 0 (token t_i, parent
/// a = parents[i]) passes when
///     p_a(t_i) > min(posterior_threshold, posterior_alpha * exp(-H(p_a))),
/// H(p) = -sum_v p(v) ln p(v) in nats (0 ln 0 = 0). A node is accepted when it and every
/// ancestor pass; the accepted path ends at the deepest accepted node (ties: the larger sum of
/// ln p_a(t_i) along the path, then the lower node index). One bonus token follows, drawn from
/// the last accepted node's row (the root's when none passed) with sample_from_probs, or taken
/// without a draw when one token holds all the mass. A greedy target (one-hot rows) therefore
/// accepts exactly what Task 6b accepts and ends with the same argmax: greedy output equals
/// plain greedy decoding. With a temperature the result is lossy (not the target's
/// distribution): a flat row accepts any draft above the threshold.
/// target_probs: (n, vocab) row-major, row i = the target's sampling distribution after node i
///   (as Task 6b: the sampler's temperature, top-k/p and penalties already applied).
/// parents: (n) parents[0] = -1, parents[i] in [0, i), 1 <= n <= 64. tokens: (n) node tokens,
///   tokens[0] (the root's) not tested. A chain (parents[i] = i - 1) is a valid tree.
/// posterior_threshold: epsilon, in (0, 1] (Medusa's default 0.09). posterior_alpha: delta,
///   >= 0 (Medusa's default 0.3, about sqrt(epsilon)).
/// uniform: U[0, 1) draws; at most one is spent (the bonus token's, when its row is not one-hot).
/// Returns the path and tokens as Task 6b's TreeVerifyResult (tokens.size() == path.size() + 1).
/// Throws InvalidArgument if the shapes disagree (target_probs.size() != n * vocab,
/// tokens.size() != n), vocab < 1, n is 0 or above 64, a parent index is out of range, a token
/// is outside [0, vocab), or a threshold is out of range; all before the draw.
TreeVerifyResult verify_tree_typical(std::span<const float> target_probs, std::span<const int32_t> parents,
                                     std::span<const int32_t> tokens, int64_t vocab, double posterior_threshold,
                                     double posterior_alpha, const std::function<double()>& uniform);

}  // namespace lio
