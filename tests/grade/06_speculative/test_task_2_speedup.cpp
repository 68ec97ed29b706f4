// Chapter 06, Task 2: what speculation buys and how many drafts pay
// (exercises/06_speculative/spec_decode.cpp, speculative_speedup and best_num_speculative_tokens).
#include <gtest/gtest.h>

#include <limits>

#include "lio/error.h"
#include "lio/spec_decode.h"

namespace {
using namespace lio;

TEST(Ch06Task2, FourDraftsAtATenthOfTheTargetCost) {
  // The lecture's table (K = 4, a drafter at c = 0.1 of the target's step time), to 0.01: one
  // round costs 4 * 0.1 + 1 = 1.4 target steps.
  EXPECT_NEAR(speculative_speedup(0.5, 4, 0.1), 1.38, 0.005);
  EXPECT_NEAR(speculative_speedup(0.8, 4, 0.1), 2.40, 0.005);
  EXPECT_NEAR(speculative_speedup(0.95, 4, 0.1), 3.23, 0.005);
}

TEST(Ch06Task2, NoDraftsIsPlainDecodingAndFreeDraftsGiveTheTokenCount) {
  for (const double a : {0.0, 0.5, 1.0}) {
    for (const double c : {0.0, 0.1, 2.0}) {
      EXPECT_DOUBLE_EQ(speculative_speedup(a, 0, c), 1.0) << "a " << a << " c " << c;
    }
  }
  // c = 0: the speedup is the tokens per pass, 1 + a + ... + a^k.
  EXPECT_NEAR(speculative_speedup(0.5, 3, 0.0), 1.875, 1e-12);
  EXPECT_DOUBLE_EQ(speculative_speedup(1.0, 7, 0.0), 8.0);
  // A drafter as slow as the target never pays: every draft is kept and still (k+1)/(k+1).
  EXPECT_NEAR(speculative_speedup(1.0, 5, 1.0), 1.0, 1e-12);
  // Low acceptance with a costly drafter is a slowdown: 1.1 tokens for 1.5 steps.
  EXPECT_NEAR(speculative_speedup(0.1, 1, 0.5), 1.1 / 1.5, 1e-12);
}

TEST(Ch06Task2, BestKGrowsWithAcceptanceAndShrinksWithCost) {
  // A good drafter (a = 0.95) that costs 1% of the target: many drafts pay. The speedup
  // peaks at k = 40 (12.54x); with k_max = 16 the best allowed is the largest.
  EXPECT_EQ(best_num_speculative_tokens(0.95, 0.01, 64), 40);
  EXPECT_EQ(best_num_speculative_tokens(0.95, 0.01, 16), 16);
  EXPECT_EQ(best_num_speculative_tokens(0.9, 0.05, 64), 13);
  EXPECT_EQ(best_num_speculative_tokens(0.8, 0.1, 64), 6);
  EXPECT_EQ(best_num_speculative_tokens(0.5, 0.1, 64), 2);
  // A poor drafter that costs half a target step: speculation does not pay.
  EXPECT_EQ(best_num_speculative_tokens(0.1, 0.5, 16), 0);
  EXPECT_EQ(best_num_speculative_tokens(0.7, 0.3, 0), 0);  // k_max = 0: nothing to choose
}

TEST(Ch06Task2, TiesGoToTheSmallestK) {
  // a = 1, c = 1: (k + 1) / (k + 1) = 1 for every k. a = 0, c = 0: 1 token per pass, free.
  EXPECT_EQ(best_num_speculative_tokens(1.0, 1.0, 8), 0);
  EXPECT_EQ(best_num_speculative_tokens(0.0, 0.0, 8), 0);
}

TEST(Ch06Task2, BestKIsTheArgmaxOfTheSpeedup) {
  // Brute force over a grid: the first k with the largest speculative_speedup.
  for (const double a : {0.0, 0.2, 0.5, 0.6, 0.75, 0.9, 0.97, 1.0}) {
    for (const double c : {0.0, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0}) {
      for (const int64_t k_max : {0, 1, 3, 8, 32}) {
        int64_t best_k = 0;
        for (int64_t k = 1; k <= k_max; ++k) {
          if (speculative_speedup(a, k, c) > speculative_speedup(a, best_k, c)) best_k = k;
        }
        EXPECT_EQ(best_num_speculative_tokens(a, c, k_max), best_k)
            << "a " << a << " c " << c << " k_max " << k_max;
      }
    }
  }
}

TEST(Ch06Task2, BadArgumentsThrow) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_THROW(speculative_speedup(1.5, 4, 0.1), InvalidArgument);
  EXPECT_THROW(speculative_speedup(0.5, -1, 0.1), InvalidArgument);
  EXPECT_THROW(speculative_speedup(0.5, 4, -0.1), InvalidArgument);
  EXPECT_THROW(speculative_speedup(0.5, 4, nan), InvalidArgument);
  EXPECT_THROW(speculative_speedup(0.5, 4, inf), InvalidArgument);
  EXPECT_THROW(best_num_speculative_tokens(nan, 0.1, 8), InvalidArgument);
  EXPECT_THROW(best_num_speculative_tokens(0.5, -1.0, 8), InvalidArgument);
  EXPECT_THROW(best_num_speculative_tokens(0.5, 0.1, -1), InvalidArgument);
}

}  // namespace
