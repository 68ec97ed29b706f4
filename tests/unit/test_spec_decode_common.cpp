// test_spec_decode_common.cpp — sample_from_probs (lio/spec_decode.h), the inverse-CDF draw
// chapter 06's acceptance rule takes its correction and bonus tokens from: where each u lands,
// unnormalized rows, zero-probability tokens, and every rejected input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "lio/error.h"
#include "lio/spec_decode.h"

namespace lio {
namespace {

// Powers of two, so the cumulative sums are exact and the boundaries are where they look.
const std::vector<float> kQuarterQuarterHalf = {0.25f, 0.25f, 0.5f};

TEST(SampleFromProbs, EachUniformLandsInItsTokensInterval) {
  // Token t owns [cdf(t-1), cdf(t)): u = 0 -> 0, u on a boundary -> the next token.
  EXPECT_EQ(sample_from_probs(kQuarterQuarterHalf, 0.0), 0);
  EXPECT_EQ(sample_from_probs(kQuarterQuarterHalf, 0.2499), 0);
  EXPECT_EQ(sample_from_probs(kQuarterQuarterHalf, 0.25), 1);
  EXPECT_EQ(sample_from_probs(kQuarterQuarterHalf, 0.4999), 1);
  EXPECT_EQ(sample_from_probs(kQuarterQuarterHalf, 0.5), 2);
  EXPECT_EQ(sample_from_probs(kQuarterQuarterHalf, std::nextafter(1.0, 0.0)), 2);
}

TEST(SampleFromProbs, AGridOfUniformsReproducesTheRow) {
  // u = (i + 0.5) / n for i < n: token t gets n * p_t of them, to one either way.
  const std::vector<float> probs = {0.1f, 0.0f, 0.35f, 0.05f, 0.3f, 0.2f};
  constexpr int n = 20000;
  std::vector<int> counts(probs.size(), 0);
  for (int i = 0; i < n; ++i)
    counts[static_cast<size_t>(sample_from_probs(probs, (i + 0.5) / n))] += 1;
  for (size_t t = 0; t < probs.size(); ++t)
    EXPECT_NEAR(counts[t], n * probs[t], 1.0) << "token " << t;
}

TEST(SampleFromProbs, RowNeedNotBeNormalized) {
  // max(0, p - q) reaches it as it is: mass 4, token 0 owns u in [0, 0.25).
  const std::vector<float> probs = {1.0f, 3.0f};
  EXPECT_EQ(sample_from_probs(probs, 0.24), 0);
  EXPECT_EQ(sample_from_probs(probs, 0.25), 1);
  EXPECT_EQ(sample_from_probs(std::vector<float>{1e-30f, 0.0f}, 0.9), 0);  // tiny mass still draws
}

TEST(SampleFromProbs, ZeroProbabilityTokensAreNeverDrawn) {
  const std::vector<float> probs = {0.0f, 0.5f, 0.0f, 0.5f, 0.0f};
  for (const double u : {0.0, 0.1, 0.4999, 0.5, 0.75, std::nextafter(1.0, 0.0)}) {
    const int32_t t = sample_from_probs(probs, u);
    EXPECT_TRUE(t == 1 || t == 3) << "u " << u << " drew " << t;
  }
  EXPECT_EQ(sample_from_probs(std::vector<float>{0.0f, 0.0f, 1.0f}, 0.0),
            2);  // one-hot: the argmax
}

TEST(SampleFromProbs, RejectsBadRowsAndUniforms) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_THROW(sample_from_probs({}, 0.5), InvalidArgument);
  EXPECT_THROW(sample_from_probs(std::vector<float>{0.0f, 0.0f}, 0.5), InvalidArgument);
  EXPECT_THROW(sample_from_probs(std::vector<float>{0.5f, -0.1f, 0.6f}, 0.5), InvalidArgument);
  EXPECT_THROW(sample_from_probs(std::vector<float>{0.5f, nan}, 0.5), InvalidArgument);
  EXPECT_THROW(sample_from_probs(std::vector<float>{0.5f, inf}, 0.5), InvalidArgument);
  EXPECT_THROW(sample_from_probs(kQuarterQuarterHalf, -0.1), InvalidArgument);
  EXPECT_THROW(sample_from_probs(kQuarterQuarterHalf, 1.0), InvalidArgument);
  EXPECT_THROW(sample_from_probs(kQuarterQuarterHalf, std::numeric_limits<double>::quiet_NaN()),
               InvalidArgument);
}

}  // namespace
}  // namespace lio
