// Chapter 06, Tasks 1-4 and 6 — reference solution: the arithmetic and the algorithms of
// speculative decoding, for a chain of drafts and for a tree. Declarations and contracts:
// common/engine/include/lio/spec_decode.h.
// Sources: Leviathan, Kalman, Matias 2023 (Algorithm 1, eq. 1, Theorem 3.8, Appendix A.1); Chen et al. 2023
// (Algorithm 2); Saxena 2023 and vLLM's ngram_proposer.py (prompt lookup); Miao et al. 2024
// (SpecInfer: tree-based parallel decoding, sec. 4; multi-step speculative sampling, Algorithm 2)
// and Cai et al. 2024 (Medusa: tree attention, sec. 2.1.2).
#include "lio/spec_decode.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "lio/error.h"

namespace lio {

// ---- Task 1 -----------------------------------------------------------------------------------

double expected_tokens_per_pass(double a, int64_t k) {
  if (!(a >= 0.0 && a <= 1.0)) {  // written so that NaN fails too
    throw InvalidArgument("expected_tokens_per_pass: a must be in [0, 1], got " +
                          std::to_string(a));
  }
  if (k < 0)
    throw InvalidArgument("expected_tokens_per_pass: k must be >= 0, got " + std::to_string(k));
  // Draft i (0-based) is kept only if drafts 0..i all are: probability a^(i+1). The pass adds
  // one token of its own whatever happens, so
  //   E = 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)   (geometric series, a < 1)
  // and every draft plus the bonus at a = 1. Not k * a: that counts drafts accepted
  // independently of each other and forgets the token the pass adds.
  if (a == 1.0) return static_cast<double>(k + 1);
  return (1.0 - std::pow(a, static_cast<double>(k + 1))) / (1.0 - a);
}

// ---- Task 2 -----------------------------------------------------------------------------------

double speculative_speedup(double a, int64_t k, double c) {
  if (!(a >= 0.0 && a <= 1.0)) {
    throw InvalidArgument("speculative_speedup: a must be in [0, 1], got " + std::to_string(a));
  }
  if (k < 0) throw InvalidArgument("speculative_speedup: k must be >= 0, got " + std::to_string(k));
  if (!(c >= 0.0) || !std::isfinite(c)) {
    throw InvalidArgument("speculative_speedup: c must be finite and >= 0, got " +
                          std::to_string(c));
  }
  // In units of one target step: a round costs k draft steps (c each) plus one target pass
  // that scores all k + 1 rows (about one decode step while decode is memory-bound), and it
  // yields E tokens; plain decoding yields 1 token per unit. Speedup = E / (k c + 1).
  return expected_tokens_per_pass(a, k) / (static_cast<double>(k) * c + 1.0);
}

int64_t best_num_speculative_tokens(double a, double c, int64_t k_max) {
  if (!(a >= 0.0 && a <= 1.0)) {
    throw InvalidArgument("best_num_speculative_tokens: a must be in [0, 1], got " +
                          std::to_string(a));
  }
  if (!(c >= 0.0) || !std::isfinite(c)) {
    throw InvalidArgument("best_num_speculative_tokens: c must be finite and >= 0, got " +
                          std::to_string(c));
  }
  if (k_max < 0) {
    throw InvalidArgument("best_num_speculative_tokens: k_max must be >= 0, got " +
                          std::to_string(k_max));
  }
  // Try every k: E grows by a^k per extra draft while the cost grows by c, so the curve rises
  // then falls, and its peak moves right as a rises or c falls. A strict > keeps the smallest
  // k on ties (fewer drafts do the same work for less).
  int64_t best_k = 0;
  double best_speedup = speculative_speedup(a, 0, c);  // 1: plain decoding
  for (int64_t k = 1; k <= k_max; ++k) {
    const double s = speculative_speedup(a, k, c);
    if (s > best_speedup) {
      best_speedup = s;
      best_k = k;
    }
  }
  return best_k;
}

// ---- Task 3 -----------------------------------------------------------------------------------

std::vector<int32_t> ngram_propose(std::span<const int32_t> tokens, int64_t n_min, int64_t n_max,
                                   int64_t k) {
  if (n_min < 1)
    throw InvalidArgument("ngram_propose: n_min must be >= 1, got " + std::to_string(n_min));
  if (n_max < n_min) {
    throw InvalidArgument("ngram_propose: n_max must be >= n_min = " + std::to_string(n_min) +
                          ", got " + std::to_string(n_max));
  }
  if (k < 1) throw InvalidArgument("ngram_propose: k must be >= 1, got " + std::to_string(k));
  const int64_t n_tokens = static_cast<int64_t>(tokens.size());
  // Longest n first: a longer matching context predicts the continuation better.
  for (int64_t n = n_max; n >= n_min; --n) {
    // The pattern is the last n tokens, tokens[n_tokens - n, n_tokens). An earlier occurrence
    // starting at `start` must end before the last token (start + n <= n_tokens - 1), so at
    // least one token follows it; the suffix itself (start = n_tokens - n) is not one.
    const int64_t last_start = n_tokens - 1 - n;
    const std::span<const int32_t> pattern =
        last_start >= 0 ? tokens.last(static_cast<size_t>(n)) : std::span<const int32_t>{};
    for (int64_t start = last_start; start >= 0; --start) {  // most recent first
      const auto candidate = tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(n));
      if (!std::equal(candidate.begin(), candidate.end(), pattern.begin())) continue;
      // Propose what followed it, up to k tokens (fewer when the sequence ends first).
      const int64_t from = start + n;
      const int64_t to = std::min(from + k, n_tokens);
      return {tokens.begin() + from, tokens.begin() + to};
    }
  }
  return {};  // no n in [n_min, n_max] matched: nothing to propose this step
}

// ---- Task 4 -----------------------------------------------------------------------------------

SpecVerifyResult verify_drafts(std::span<const float> target_probs,
                               std::span<const float> draft_probs, std::span<const int32_t> drafts,
                               int64_t vocab, const std::function<double()>& uniform) {
  const int64_t k = static_cast<int64_t>(drafts.size());
  if (vocab < 1)
    throw InvalidArgument("verify_drafts: vocab must be >= 1, got " + std::to_string(vocab));
  if (static_cast<int64_t>(target_probs.size()) != (k + 1) * vocab) {
    throw InvalidArgument("verify_drafts: target_probs must hold (k + 1) * vocab = " +
                          std::to_string((k + 1) * vocab) + " values (k = " + std::to_string(k) +
                          "), got " + std::to_string(target_probs.size()));
  }
  const bool deterministic_drafter = draft_probs.empty();
  if (!deterministic_drafter && static_cast<int64_t>(draft_probs.size()) != k * vocab) {
    throw InvalidArgument("verify_drafts: draft_probs must be empty or hold k * vocab = " +
                          std::to_string(k * vocab) + " values, got " +
                          std::to_string(draft_probs.size()));
  }
  // Row i of a (rows, vocab) row-major matrix: (vocab).
  auto row = [vocab](std::span<const float> matrix, int64_t i) {
    return matrix.subspan(static_cast<size_t>(i * vocab), static_cast<size_t>(vocab));
  };
  // q_i(x) for x = drafts[i]: the drafter's probability of its own draft (1 when deterministic).
  auto draft_prob = [&](int64_t i) {
    if (deterministic_drafter) return 1.0f;
    return row(draft_probs, i)[static_cast<size_t>(drafts[static_cast<size_t>(i)])];
  };
  // Every draft before the first draw, so a bad input throws whatever the uniforms say.
  for (int64_t i = 0; i < k; ++i) {
    const int32_t x = drafts[static_cast<size_t>(i)];
    const std::string name = "drafts[" + std::to_string(i) + "]";
    if (x < 0 || x >= vocab) {
      throw InvalidArgument("verify_drafts: " + name + " must be in [0, vocab = " +
                            std::to_string(vocab) + "), got " + std::to_string(x));
    }
    if (!(draft_prob(i) > 0.0f)) {
      throw InvalidArgument("verify_drafts: q_" + std::to_string(i) + "(" + name + " = " +
                            std::to_string(x) +
                            ") must be > 0 (the drafter proposed a token it cannot draw), got " +
                            std::to_string(draft_prob(i)));
    }
  }

  SpecVerifyResult result;
  result.tokens.reserve(static_cast<size_t>(k + 1));
  for (int64_t i = 0; i < k; ++i) {
    const int32_t x = drafts[static_cast<size_t>(i)];
    const std::span<const float> p = row(target_probs, i);
    const float p_x = p[static_cast<size_t>(x)];
    const float q_x = draft_prob(i);
    // Accept x with probability min(1, p_i(x) / q_i(x)). When p(x) >= q(x) the target likes x
    // at least as much as the drafter did: accept without spending a uniform.
    bool accepted = true;
    if (p_x < q_x) accepted = uniform() < static_cast<double>(p_x) / static_cast<double>(q_x);
    if (accepted) {
      result.tokens.push_back(x);
      continue;
    }
    // Rejected: draw the correction from the residual max(0, p_i - q_i) (sample_from_probs
    // normalizes it). Accepting with min(1, p/q) gives token y probability min(p(y), q(y)); the
    // residual supplies the rest, p(y) - min(p(y), q(y)) = max(0, p(y) - q(y)), so the token
    // emitted at position i is distributed exactly as p (Leviathan et al. 2023, Appendix A.1).
    std::vector<float> residual(p.begin(), p.end());
    if (deterministic_drafter) {
      residual[static_cast<size_t>(x)] = 0.0f;  // q is one-hot at x: max(0, p(x) - 1) = 0
    } else {
      const std::span<const float> q = row(draft_probs, i);
      for (size_t t = 0; t < residual.size(); ++t) residual[t] = std::max(0.0f, p[t] - q[t]);
    }
    double residual_mass = 0.0;
    for (const float r : residual) residual_mass += r;
    // p(x) < q(x) leaves mass q(x) - p(x) > 0 in exact arithmetic; only rounding (or rows that
    // do not sum to 1) can empty it, and then the target row itself is the right law.
    const int32_t correction =
        sample_from_probs(residual_mass > 0.0 ? std::span<const float>(residual) : p, uniform());
    result.tokens.push_back(correction);
    result.n_accepted = i;
    return result;
  }
  // Every draft accepted: the pass already scored row k, so one more token is free.
  result.tokens.push_back(sample_from_probs(row(target_probs, k), uniform()));
  result.n_accepted = k;
  return result;
}

// ---- Task 6 -----------------------------------------------------------------------------------

namespace {

// Throws InvalidArgument unless `parents` describes a draft tree Task 6a accepts (1 to 64
// nodes, root first, each parent before its children); `who` names the caller.
void check_draft_tree(std::span<const int32_t> parents, const std::string& who) {
  const int64_t n = static_cast<int64_t>(parents.size());
  if (n < 1 || n > 64) {
    throw InvalidArgument(who + ": a draft tree has 1 to 64 nodes (one uint64 mask bit each), got " +
                          std::to_string(n));
  }
  if (parents[0] != -1)
    throw InvalidArgument(who + ": parents[0] (the root) must be -1, got " + std::to_string(parents[0]));
  for (int64_t i = 1; i < n; ++i) {
    const int32_t parent = parents[static_cast<size_t>(i)];
    if (parent < 0 || parent >= i) {
      throw InvalidArgument(who + ": parents[" + std::to_string(i) + "] must be in [0, " +
                            std::to_string(i) + ") (a parent comes before its children), got " +
                            std::to_string(parent));
    }
  }
}

// Sum of a row of probabilities, in double (as sample_from_probs sums).
double row_mass(std::span<const float> probs) {
  double mass = 0.0;
  for (const float x : probs) mass += x;
  return mass;
}

// One token from `probs` (>= 0, not normalized): the only token with mass when there is one (a
// greedy row, or what is left of it: nothing to draw, so no uniform is spent), else
// sample_from_probs with one uniform (which also rejects a row with no mass).
int32_t draw_token(std::span<const float> probs, const std::function<double()>& uniform) {
  int64_t only = -1;
  for (size_t t = 0; t < probs.size(); ++t) {
    if (probs[t] == 0.0f) continue;
    if (only >= 0 || !(probs[t] > 0.0f)) return sample_from_probs(probs, uniform());
    only = static_cast<int64_t>(t);
  }
  if (only >= 0) return static_cast<int32_t>(only);
  return sample_from_probs(probs, uniform());
}

}  // namespace

std::vector<uint64_t> tree_attention_masks(std::span<const int32_t> parents) {
  check_draft_tree(parents, "tree_attention_masks");
  // Row i sees node j iff j is on the path root .. i. Parents come before their children, so
  // when row i is built its parent's row is final: the parent's path, plus node i itself.
  // The prefix is not in the mask: every row sees all of it (the attention kernel adds it).
  std::vector<uint64_t> mask(parents.size());
  mask[0] = 1;  // the root: itself only
  for (size_t i = 1; i < parents.size(); ++i)
    mask[i] = mask[static_cast<size_t>(parents[i])] | (uint64_t{1} << i);
  return mask;
}

TreeVerifyResult verify_tree(std::span<const float> target_probs, std::span<const int32_t> parents,
                             std::span<const int32_t> tokens, int64_t vocab,
                             const std::function<double()>& uniform) {
  // Every check before the first draw, so a bad input throws whatever the uniforms say.
  check_draft_tree(parents, "verify_tree");
  const int64_t n = static_cast<int64_t>(parents.size());
  if (vocab < 1)
    throw InvalidArgument("verify_tree: vocab must be >= 1, got " + std::to_string(vocab));
  if (static_cast<int64_t>(tokens.size()) != n) {
    throw InvalidArgument("verify_tree: tokens must hold one id per node (" + std::to_string(n) +
                          "), got " + std::to_string(tokens.size()));
  }
  if (static_cast<int64_t>(target_probs.size()) != n * vocab) {
    throw InvalidArgument("verify_tree: target_probs must hold n * vocab = " +
                          std::to_string(n * vocab) + " values (n = " + std::to_string(n) +
                          "), got " + std::to_string(target_probs.size()));
  }
  // children[v]: v's children in index order, the order they are tried in.
  std::vector<std::vector<int32_t>> children(static_cast<size_t>(n));
  for (int64_t i = 1; i < n; ++i) {
    const int32_t x = tokens[static_cast<size_t>(i)];
    if (x < 0 || x >= vocab) {
      throw InvalidArgument("verify_tree: tokens[" + std::to_string(i) + "] must be in [0, vocab = " +
                            std::to_string(vocab) + "), got " + std::to_string(x));
    }
    auto& siblings = children[static_cast<size_t>(parents[static_cast<size_t>(i)])];
    for (const int32_t s : siblings) {
      // Two siblings with one token would be the same continuation twice: the second test would
      // meet a residual that no longer holds its token.
      if (tokens[static_cast<size_t>(s)] == x) {
        throw InvalidArgument("verify_tree: siblings " + std::to_string(s) + " and " +
                              std::to_string(i) + " both hold token " + std::to_string(x));
      }
    }
    siblings.push_back(static_cast<int32_t>(i));
  }
  auto row = [&](int32_t node) {
    return target_probs.subspan(static_cast<size_t>(node * vocab), static_cast<size_t>(vocab));
  };

  TreeVerifyResult result;
  int32_t node = 0;  // the root: its row scores the depth-1 children
  for (;;) {
    const std::span<const float> p = row(node);
    // The law the next token must follow is p. Each child is a draft with a one-hot q at its
    // token x, so Task 4's test is min(1, r(x) / 1) against what is left of p, r; a rejection
    // leaves max(0, r - q) = r with x removed, and the next sibling is tested against that
    // (SpecInfer, Algorithm 2: the residual of every earlier sibling's rejection).
    std::vector<float> residual(p.begin(), p.end());
    double mass = row_mass(residual);
    int32_t accepted_child = -1;
    for (const int32_t child : children[static_cast<size_t>(node)]) {
      const size_t x = static_cast<size_t>(tokens[static_cast<size_t>(child)]);
      // r(x) renormalized: P(child accepted | every earlier sibling rejected).
      const double accept = mass > 0.0 ? static_cast<double>(residual[x]) / mass : 0.0;
      bool accepted = accept >= 1.0;  // certain either way: no uniform
      if (accept > 0.0 && accept < 1.0) accepted = uniform() < accept;
      if (accepted) {
        accepted_child = child;
        break;
      }
      residual[x] = 0.0f;
      mass = row_mass(residual);  // summed afresh, so a last survivor's test is exactly 1
    }
    if (accepted_child < 0) {
      // No child accepted (or a leaf): one token from the residual, which gives every token that
      // is not a rejected child's the rest of p's mass, so the token is distributed as p (as in
      // Task 4, a sibling's token x came out with p(x) exactly and cannot come out again). A
      // residual with no mass happens only by rounding; then p itself is the law.
      result.tokens.push_back(draw_token(mass > 0.0 ? std::span<const float>(residual) : p, uniform));
      return result;
    }
    result.path.push_back(accepted_child);
    result.tokens.push_back(tokens[static_cast<size_t>(accepted_child)]);
    node = accepted_child;  // its row is the target given the path so far: the argument repeats
  }
}

}  // namespace lio
