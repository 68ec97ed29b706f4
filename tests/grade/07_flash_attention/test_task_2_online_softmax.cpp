// Chapter 07, Task 2: the online-softmax update of one tile
// (exercises/07_flash_attention/flash_attention.cpp, online_softmax_update).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "flash_attention.h"
#include "lio/error.h"

namespace {
using lio::cpu::AttentionPartial;
using lio::cpu::online_softmax_update;

/// softmax(s) . V over all keys at once, in double: the answer the tiles must reach.
std::vector<double> full_softmax(const std::vector<float>& s, const std::vector<float>& v, int64_t d, double* lse) {
  double m = -INFINITY, l = 0;
  for (float x : s) m = std::max(m, double(x));
  std::vector<double> o(static_cast<size_t>(d), 0.0);
  for (size_t j = 0; j < s.size(); ++j) {
    const double p = std::exp(double(s[j]) - m);
    l += p;
    for (int64_t e = 0; e < d; ++e) o[e] += p * v[j * d + e];
  }
  for (double& x : o) x /= l;
  *lse = m + std::log(l);
  return o;
}

/// Folds keys [0, n) in tiles of `tile` and returns acc / l; `lse` gets m + log l.
std::vector<float> tiled(const std::vector<float>& s, const std::vector<float>& v, int64_t d, size_t tile, float* lse) {
  std::vector<float> acc(static_cast<size_t>(d), 0.0f), scratch;
  AttentionPartial row{-INFINITY, 0.0f, acc};
  for (size_t j0 = 0; j0 < s.size(); j0 += tile) {
    const size_t n = std::min(tile, s.size() - j0);
    scratch.assign(s.begin() + j0, s.begin() + j0 + n);
    online_softmax_update(row, scratch, v.data() + j0 * d, d);
  }
  *lse = row.m + std::log(row.l);
  for (float& x : acc) x /= row.l;
  return acc;
}

TEST(Ch07Task2, TheLessonsWorkedExample) {
  // docs/07_flash_attention.md: two tiles of two keys, head_dim 2.
  const std::vector<float> s = {1.0f, 3.0f, 2.0f, 5.0f};
  const std::vector<float> v = {1, 0, 0, 1, 1, 1, 2, 0};
  float lse = 0;
  const std::vector<float> o = tiled(s, v, 2, 2, &lse);
  double want_lse = 0;
  const std::vector<double> want = full_softmax(s, v, 2, &want_lse);
  EXPECT_NEAR(o[0], want[0], 1e-6);
  EXPECT_NEAR(o[1], want[1], 1e-6);
  EXPECT_NEAR(lse, want_lse, 1e-6);
}

TEST(Ch07Task2, AfterEveryTileTheRowIsTheSoftmaxOverTheKeysSoFar) {
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0.0f, 3.0f);
  const int64_t d = 16;
  for (size_t len : {1u, 5u, 64u, 200u}) {
    for (size_t tile : {1u, 3u, 64u}) {
      std::vector<float> s(len), v(len * d);
      for (float& x : s) x = n(rng);
      for (float& x : v) x = n(rng);
      float lse = 0;
      const std::vector<float> o = tiled(s, v, d, tile, &lse);
      double want_lse = 0;
      const std::vector<double> want = full_softmax(s, v, d, &want_lse);
      for (int64_t e = 0; e < d; ++e) EXPECT_NEAR(o[e], want[e], 2e-5 * (1 + std::fabs(want[e]))) << len << " " << tile;
      EXPECT_NEAR(lse, want_lse, 1e-5 * (1 + std::fabs(want_lse)));
    }
  }
}

TEST(Ch07Task2, ALaterLargerMaxRescalesWhatCameBefore) {
  // First tile small scores, second one huge: without the rescale, the first tile's terms
  // would keep weight exp(s - m_old) instead of exp(s - m_new) ~ 0.
  const std::vector<float> s = {0.0f, 0.0f, 60.0f};
  const std::vector<float> v = {1, 1, 5};
  float lse = 0;
  const std::vector<float> o = tiled(s, v, 1, 2, &lse);
  EXPECT_NEAR(o[0], 5.0f, 1e-5f);
  EXPECT_NEAR(lse, 60.0f, 1e-5f);
  // And a later smaller max keeps the old one.
  const std::vector<float> s2 = {80.0f, -80.0f, -70.0f};
  EXPECT_NEAR(tiled(s2, v, 1, 1, &lse)[0], 1.0f, 1e-5f);
  EXPECT_NEAR(lse, 80.0f, 1e-4f);
}

TEST(Ch07Task2, StateAfterOneTileFromEmpty) {
  std::vector<float> acc = {0.0f, 0.0f};
  AttentionPartial row{-INFINITY, 0.0f, acc};
  std::vector<float> s = {std::log(1.0f), std::log(3.0f)};
  const std::vector<float> v = {4, 0, 0, 4};
  online_softmax_update(row, s, v.data(), 2);
  EXPECT_NEAR(row.m, std::log(3.0f), 1e-6);
  EXPECT_NEAR(row.l, 1.0f / 3 + 1.0f, 1e-6);       // exp(s - m) summed
  EXPECT_NEAR(acc[0], 4.0f / 3, 1e-5);              // not yet divided by l
  EXPECT_NEAR(acc[1], 4.0f, 1e-5);
}

TEST(Ch07Task2, RejectsAnEmptyTileAndAShortStride) {
  std::vector<float> acc(4, 0.0f), none, one = {1.0f}, v(8, 1.0f);
  AttentionPartial row{-INFINITY, 0.0f, acc};
  EXPECT_THROW(online_softmax_update(row, none, v.data(), 4), lio::InvalidArgument);
  EXPECT_THROW(online_softmax_update(row, one, v.data(), 3), lio::InvalidArgument);
}

}  // namespace
