// Chapter 06, Task 1: expected tokens one target pass yields
// (exercises/06_speculative/spec_decode.cpp, expected_tokens_per_pass).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "lio/error.h"
#include "lio/spec_decode.h"

namespace {
using namespace lio;

TEST(Ch06Task1, HighAcceptanceFiveDraftsGivesAboutFivePointThree) {
  // A lecture exercise reckons 5 * 0.95 = 4.75 tokens per pass: that counts each draft as if
  // it were kept independently and forgets the token the pass adds. Leviathan et al. 2023
  // (eq. 1): 1 + 0.95 + ... + 0.95^5 = 5.298.
  const double e = expected_tokens_per_pass(0.95, 5);
  EXPECT_NEAR(e, 5.30, 0.005);
  EXPECT_GT(e, 4.75 + 0.5);
}

TEST(Ch06Task1, FourDraftsAcrossAcceptanceRates) {
  // The lecture's table for K = 4 (to 0.01).
  EXPECT_NEAR(expected_tokens_per_pass(0.5, 4), 1.94, 0.005);
  EXPECT_NEAR(expected_tokens_per_pass(0.6, 4), 2.31, 0.005);
  EXPECT_NEAR(expected_tokens_per_pass(0.7, 4), 2.77, 0.005);
  EXPECT_NEAR(expected_tokens_per_pass(0.8, 4), 3.36, 0.005);
  EXPECT_NEAR(expected_tokens_per_pass(0.9, 4), 4.10, 0.005);
  EXPECT_NEAR(expected_tokens_per_pass(0.95, 4), 4.52, 0.005);
}

TEST(Ch06Task1, EqualsTheSumOfSurvivalProbabilities) {
  // The pass's token i (0-based) exists when drafts 0 .. i-1 were all kept: probability a^i.
  for (const double a : {0.0, 0.05, 0.3, 0.5, 0.77, 0.99, 0.999}) {
    for (const int64_t k : {0, 1, 2, 3, 7, 16, 64}) {
      double sum = 0.0, term = 1.0;
      for (int64_t i = 0; i <= k; ++i, term *= a) sum += term;
      EXPECT_NEAR(expected_tokens_per_pass(a, k), sum, 1e-9 * sum) << "a " << a << " k " << k;
    }
  }
}

TEST(Ch06Task1, EndpointsOneAndKPlusOne) {
  for (const int64_t k : {0, 1, 4, 10}) {
    EXPECT_DOUBLE_EQ(expected_tokens_per_pass(1.0, k), static_cast<double>(k + 1))
        << "a = 1, k " << k;
    EXPECT_DOUBLE_EQ(expected_tokens_per_pass(0.0, k), 1.0) << "a = 0, k " << k;
  }
  for (const double a : {0.0, 0.4, 0.9, 1.0}) {
    EXPECT_DOUBLE_EQ(expected_tokens_per_pass(a, 0), 1.0) << "k = 0, a " << a;
  }
  // Continuous at a = 1: no division by zero just below it.
  EXPECT_NEAR(expected_tokens_per_pass(1.0 - 1e-9, 4), 5.0, 1e-6);
}

TEST(Ch06Task1, BadArgumentsThrow) {
  EXPECT_THROW(expected_tokens_per_pass(-0.1, 4), InvalidArgument);
  EXPECT_THROW(expected_tokens_per_pass(1.1, 4), InvalidArgument);
  EXPECT_THROW(expected_tokens_per_pass(std::numeric_limits<double>::quiet_NaN(), 4),
               InvalidArgument);
  EXPECT_THROW(expected_tokens_per_pass(0.5, -1), InvalidArgument);
}

}  // namespace
