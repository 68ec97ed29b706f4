// Chapter 03, Task 5: AWQ's scale search (exercises/03_quantization/awq.cpp), graded against
// the closed form — the scales s = max(mean|x|^alpha, 1e-4) / sqrt(max * min) and the best
// of the grid of exponents, found here by brute force — and on what it is for: on a layer
// whose inputs have loud channels, a lower output error than round-to-nearest.
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <vector>

#include "gptq_awq_helpers.h"
#include "lio/error.h"
#include "lio/quantization.h"

namespace {
using ch03::MatD;

/// The scales the contract defines for `alpha`.
std::vector<float> expected_scales(const std::vector<float>& mean_abs, double alpha) {
  std::vector<float> s;
  for (float m : mean_abs) s.push_back(std::max(static_cast<float>(std::pow(static_cast<double>(m), alpha)), 1e-4f));
  const float lo = *std::min_element(s.begin(), s.end()), hi = *std::max_element(s.begin(), s.end());
  for (float& v : s) v /= std::sqrt(lo * hi);
  return s;
}

/// AWQ's loss on layer L: W diag(s) rounded by RTN (per-row INT4), diag(s)^-1 folded back.
double awq_loss(const ch03::Layer& L, std::span<const float> s) {
  MatD ws = L.w;
  for (int c = 0; c < ws.cols(); ++c) ws.col(c) *= s[static_cast<size_t>(c)];
  std::vector<double> scales;
  for (int r = 0; r < ws.rows(); ++r) scales.push_back(ch03::row_scale(ws, r));
  MatD q = ch03::rtn(ws, scales);
  for (int c = 0; c < q.cols(); ++c) q.col(c) /= s[static_cast<size_t>(c)];
  return ch03::output_error(L.w, q, L.h);
}

std::vector<float> mean_abs_of(const MatD& x) {
  std::vector<float> m;
  for (int c = 0; c < x.cols(); ++c) m.push_back(static_cast<float>(x.col(c).cwiseAbs().mean()));
  return m;
}

TEST(Ch03Task5, PicksTheBestExponentOfTheGrid) {
  const ch03::Layer L = ch03::make_layer(16, 64, 400, 21);
  const std::vector<float> mean_abs = mean_abs_of(L.x);
  const int n_grid = 20;
  int best_i = 0;
  double best = 1e300;
  for (int i = 0; i < n_grid; ++i) {
    const double l = awq_loss(L, expected_scales(mean_abs, static_cast<double>(i) / n_grid));
    if (l < best) {
      best = l;
      best_i = i;
    }
  }
  const lio::AwqSearch got =
      lio::awq_search_scales(mean_abs, n_grid, [&](std::span<const float> s) { return awq_loss(L, s); });
  EXPECT_NEAR(got.alpha, static_cast<double>(best_i) / n_grid, 1e-9);
  EXPECT_NEAR(got.loss, best, 1e-6 * best);
  const std::vector<float> want = expected_scales(mean_abs, got.alpha);
  ASSERT_EQ(got.scales.size(), want.size());
  for (size_t c = 0; c < want.size(); ++c) EXPECT_NEAR(got.scales[c], want[c], 1e-4f * want[c]) << "channel " << c;
}

TEST(Ch03Task5, ProtectingLoudChannelsBeatsRoundToNearest) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    const ch03::Layer L = ch03::make_layer(16, 64, 400, seed, {2, 9, 33, 50});
    const std::vector<float> ones(64, 1.0f);
    const double e_rtn = awq_loss(L, ones);
    const lio::AwqSearch got =
        lio::awq_search_scales(mean_abs_of(L.x), 20, [&](std::span<const float> s) { return awq_loss(L, s); });
    EXPECT_GT(got.alpha, 0.0) << "seed " << seed;
    EXPECT_LT(got.loss, 0.9 * e_rtn) << "seed " << seed << ": AWQ " << got.loss << ", RTN " << e_rtn;
  }
}

TEST(Ch03Task5, EveryCandidateIsNormalizedAndTried) {
  const std::vector<float> mean_abs = {0.5f, 2.0f, 8.0f, 0.0f};
  int calls = 0;
  const lio::AwqSearch got = lio::awq_search_scales(mean_abs, 10, [&](std::span<const float> s) {
    EXPECT_EQ(s.size(), 4u);
    const float lo = *std::min_element(s.begin(), s.end()), hi = *std::max_element(s.begin(), s.end());
    EXPECT_NEAR(lo * hi, 1.0f, 1e-4f) << "s /= sqrt(max(s) * min(s))";
    ++calls;
    return 1.0;  // a tie everywhere: the first exponent wins
  });
  EXPECT_EQ(calls, 10);
  EXPECT_EQ(got.alpha, 0.0);
  for (float v : got.scales) EXPECT_NEAR(v, 1.0f, 1e-6f);  // alpha = 0: plain RTN
}

TEST(Ch03Task5, BadArgumentsAreRejected) {
  const auto loss = [](std::span<const float>) { return 0.0; };
  const std::vector<float> m = {1.0f};
  EXPECT_THROW(lio::awq_search_scales(m, 0, loss), lio::InvalidArgument);
  EXPECT_THROW(lio::awq_search_scales({}, 20, loss), lio::InvalidArgument);
}

}  // namespace
