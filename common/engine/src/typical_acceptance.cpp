// Medusa's typical acceptance (lio/typical_acceptance.h): the lossy tree rule beside chapter 06's
// exact ones. Not an exercise: it is an option a serving engineer turns on, not a core algorithm
// the chapter asks the learner to build.
#include "lio/typical_acceptance.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "lio/error.h"

namespace lio {
namespace {

/// min(epsilon, alpha * exp(-H(p))) over one probability row.
double typical_threshold(std::span<const float> p, double epsilon, double alpha) {
  double h = 0.0;
  for (const float v : p)
    if (v > 0.0f) h -= static_cast<double>(v) * std::log(static_cast<double>(v));
  return std::min(epsilon, alpha * std::exp(-h));
}

}  // namespace

TreeVerifyResult verify_tree_typical(std::span<const float> target_probs, std::span<const int32_t> parents,
                                     std::span<const int32_t> tokens, int64_t vocab, double posterior_threshold,
                                     double posterior_alpha, const std::function<double()>& uniform) {
  const auto n = static_cast<int64_t>(parents.size());
  if (n < 1 || n > 64)
    throw InvalidArgument("verify_tree_typical: a tree holds 1 to 64 nodes, got " + std::to_string(n));
  if (vocab < 1) throw InvalidArgument("verify_tree_typical: vocab must be >= 1, got " + std::to_string(vocab));
  if (static_cast<int64_t>(tokens.size()) != n)
    throw InvalidArgument("verify_tree_typical: tokens must hold one id per node (" + std::to_string(n) + "), got " +
                          std::to_string(tokens.size()));
  if (static_cast<int64_t>(target_probs.size()) != n * vocab)
    throw InvalidArgument("verify_tree_typical: target_probs must hold n * vocab = " + std::to_string(n * vocab) +
                          " floats, got " + std::to_string(target_probs.size()));
  if (!(posterior_threshold > 0.0 && posterior_threshold <= 1.0))
    throw InvalidArgument("--typical-posterior-threshold must be in (0, 1], got " + std::to_string(posterior_threshold));
  if (!(posterior_alpha >= 0.0) || !std::isfinite(posterior_alpha))
    throw InvalidArgument("--typical-posterior-alpha must be finite and >= 0, got " + std::to_string(posterior_alpha));
  if (parents[0] != -1)
    throw InvalidArgument("verify_tree_typical: parents[0] must be -1 (the root), got " + std::to_string(parents[0]));
  for (int64_t i = 1; i < n; ++i) {
    const int32_t a = parents[static_cast<size_t>(i)];
    if (a < 0 || a >= i)
      throw InvalidArgument("verify_tree_typical: parents[" + std::to_string(i) + "] must be in [0, " +
                            std::to_string(i) + "), got " + std::to_string(a));
  }
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = tokens[static_cast<size_t>(i)];
    if (t < 0 || t >= vocab)
      throw InvalidArgument("verify_tree_typical: tokens[" + std::to_string(i) + "] must be in [0, vocab = " +
                            std::to_string(vocab) + "), got " + std::to_string(t));
  }
  const auto row = [&](int64_t i) {
    return target_probs.subspan(static_cast<size_t>(i * vocab), static_cast<size_t>(vocab));
  };
  // Parents come before their children, so one pass in index order settles every node.
  std::vector<double> threshold(static_cast<size_t>(n), -1.0);
  std::vector<int64_t> depth(static_cast<size_t>(n), 0);
  std::vector<double> loglik(static_cast<size_t>(n), 0.0);
  std::vector<bool> accepted(static_cast<size_t>(n), false);
  accepted[0] = true;
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    const auto a = static_cast<size_t>(parents[static_cast<size_t>(i)]);
    if (!accepted[a]) continue;
    if (threshold[a] < 0.0) threshold[a] = typical_threshold(row(static_cast<int64_t>(a)), posterior_threshold, posterior_alpha);
    const double p = row(static_cast<int64_t>(a))[static_cast<size_t>(tokens[static_cast<size_t>(i)])];
    if (!(p > threshold[a])) continue;
    const auto ii = static_cast<size_t>(i);
    accepted[ii] = true;
    depth[ii] = depth[a] + 1;
    loglik[ii] = loglik[a] + std::log(p);
    const auto b = static_cast<size_t>(best);
    if (depth[ii] > depth[b] || (depth[ii] == depth[b] && loglik[ii] > loglik[b])) best = i;
  }
  TreeVerifyResult result;
  for (int64_t j = best; j > 0; j = parents[static_cast<size_t>(j)]) result.path.push_back(static_cast<int32_t>(j));
  std::reverse(result.path.begin(), result.path.end());
  for (const int32_t node : result.path) result.tokens.push_back(tokens[static_cast<size_t>(node)]);
  const std::span<const float> last = row(best);
  int64_t n_nonzero = 0, only = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    if (last[static_cast<size_t>(v)] > 0.0f) {
      ++n_nonzero;
      only = v;
    }
  }
  result.tokens.push_back(n_nonzero == 1 ? static_cast<int32_t>(only) : sample_from_probs(last, uniform()));
  return result;
}

}  // namespace lio
