// Chapter 06, Tasks 1-4 — reference solution: the arithmetic and the two algorithms of
// speculative decoding. Declarations and contracts: common/engine/include/lio/spec_decode.h.
// Sources: Leviathan, Kalman, Matias 2023 (Algorithm 1, eq. 1, Theorem 3.8, Appendix A.1); Chen et al. 2023
// (Algorithm 2); Saxena 2023 and vLLM's ngram_proposer.py (prompt lookup).
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

}  // namespace lio
