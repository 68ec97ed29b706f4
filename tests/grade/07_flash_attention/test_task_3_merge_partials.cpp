// Chapter 07, Task 3: merging two partial results (Flash-Decoding's reduction)
// (exercises/07_flash_attention/flash_attention.cpp, merge_partials).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "flash_attention.h"
#include "lio/error.h"

namespace {
using lio::cpu::AttentionPartial;
using lio::cpu::merge_partials;

/// The partial over keys s (v rows of d), computed directly in double then stored as float.
struct Part {
  std::vector<float> acc;
  AttentionPartial p;
  Part(const std::vector<double>& s, const std::vector<double>& v, int64_t d) : acc(static_cast<size_t>(d), 0.0f) {
    double m = -INFINITY, l = 0;
    for (double x : s) m = std::max(m, x);
    std::vector<double> a(static_cast<size_t>(d), 0.0);
    for (size_t j = 0; j < s.size(); ++j) {
      const double e = std::exp(s[j] - m);
      l += e;
      for (int64_t c = 0; c < d; ++c) a[c] += e * v[j * d + c];
    }
    for (int64_t c = 0; c < d; ++c) acc[c] = static_cast<float>(a[c]);
    p = AttentionPartial{s.empty() ? -INFINITY : static_cast<float>(m), static_cast<float>(l), acc};
  }
};

TEST(Ch07Task3, MergingSplitsEqualsOnePassOverAllKeys) {
  std::mt19937 rng(4);
  std::normal_distribution<double> n(0.0, 4.0);
  const int64_t d = 8;
  std::vector<double> s(300), v(300 * d);
  for (double& x : s) x = n(rng);
  for (double& x : v) x = n(rng);
  const Part all(s, v, d);
  // Three splits of unequal size, merged left to right.
  const std::vector<size_t> cuts = {0, 37, 200, 300};
  std::vector<float> acc(static_cast<size_t>(d), 0.0f);
  AttentionPartial merged{-INFINITY, 0.0f, acc};
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const Part part(std::vector<double>(s.begin() + cuts[c], s.begin() + cuts[c + 1]),
                    std::vector<double>(v.begin() + cuts[c] * d, v.begin() + cuts[c + 1] * d), d);
    merge_partials(merged, part.p);
  }
  EXPECT_NEAR(merged.m, all.p.m, 1e-6);
  EXPECT_NEAR(merged.l, all.p.l, 1e-5 * all.p.l);
  for (int64_t c = 0; c < d; ++c) EXPECT_NEAR(acc[c] / merged.l, all.acc[c] / all.p.l, 1e-5);
}

TEST(Ch07Task3, TheSplitWithTheSmallerMaxIsTheOneRescaled) {
  const Part a({0.0, 1.0}, {1, 1}, 1), b({50.0}, {7}, 1);
  Part into = a;
  into.p.acc = into.acc;
  merge_partials(into.p, b.p);
  EXPECT_FLOAT_EQ(into.p.m, 50.0f);
  EXPECT_NEAR(into.acc[0] / into.p.l, 7.0f, 1e-5f);
  // The other order gives the same.
  Part into2 = b;
  into2.p.acc = into2.acc;
  merge_partials(into2.p, a.p);
  EXPECT_NEAR(into2.acc[0] / into2.p.l, 7.0f, 1e-5f);
  EXPECT_NEAR(into2.p.l, into.p.l, 1e-6f);
}

TEST(Ch07Task3, EmptyPartialsAreNeutral) {
  Part x({0.5, -1.0, 2.0}, {1, 2, 3}, 1);
  x.p.acc = x.acc;
  const float m = x.p.m, l = x.p.l, a = x.acc[0];
  std::vector<float> none_acc = {0.0f};
  const AttentionPartial none{-INFINITY, 0.0f, none_acc};
  merge_partials(x.p, none);  // nothing added
  EXPECT_EQ(x.p.m, m);
  EXPECT_EQ(x.p.l, l);
  EXPECT_EQ(x.acc[0], a);
  std::vector<float> into_acc = {0.0f};
  AttentionPartial into{-INFINITY, 0.0f, into_acc};
  merge_partials(into, x.p);  // copied
  EXPECT_EQ(into.m, m);
  EXPECT_EQ(into.l, l);
  EXPECT_EQ(into_acc[0], a);
  std::vector<float> e2 = {0.0f};
  AttentionPartial empty2{-INFINITY, 0.0f, e2};
  merge_partials(empty2, none);  // both empty: still empty, no NaN
  EXPECT_EQ(empty2.l, 0.0f);
  EXPECT_FALSE(std::isnan(e2[0]));
}

TEST(Ch07Task3, RejectsDifferentHeadDims) {
  std::vector<float> a(4, 0.0f), b(5, 0.0f);
  AttentionPartial pa{0.0f, 1.0f, a};
  const AttentionPartial pb{0.0f, 1.0f, b};
  EXPECT_THROW(merge_partials(pa, pb), lio::InvalidArgument);
}

}  // namespace
