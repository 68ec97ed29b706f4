// test_sampler.cpp — the sampling chain of lio/sampler.h: greedy, determinism, each filter on
// its own, the distribution it draws from (chi-square goodness of fit), the repetition
// penalty, and every rejected input.
//
// Statistical tests use a fixed seed, so they are deterministic; the chi-square bound is the
// 99.9% critical value, i.e. a correct sampler with a fresh seed would fail 1 run in 1000.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "lio/error.h"
#include "lio/sampler.h"

namespace lio {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// 99.9% critical values of the chi-square distribution.
constexpr double kChiSquare999Dof1 = 10.83;
constexpr double kChiSquare999Dof2 = 13.82;

// Logits drawn from N(0, scale^2) with a fixed seed (never all zeros).
std::vector<float> random_logits(size_t vocab, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(vocab);
  for (float& l : logits) l = normal(rng);
  return logits;
}

std::vector<float> log_probs(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (const double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// softmax(logits / temperature) in double.
std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  const double l_max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> probs;
  for (const float l : logits) probs.push_back(std::exp((l - l_max) / temperature));
  const double total = std::accumulate(probs.begin(), probs.end(), 0.0);
  for (double& p : probs) p /= total;
  return probs;
}

// One draw from a fresh copy of `logits` (sample() modifies them in place).
int32_t sample_copy(Sampler& sampler, const std::vector<float>& logits,
                    std::span<const int32_t> history = {}) {
  std::vector<float> row = logits;
  return sampler.sample(row, history);
}

std::vector<int64_t> draw_counts(const SamplerConfig& config, const std::vector<float>& logits,
                                 int n_draws) {
  Sampler sampler(config);
  std::vector<int64_t> counts(logits.size(), 0);
  for (int i = 0; i < n_draws; ++i) ++counts[static_cast<size_t>(sample_copy(sampler, logits))];
  return counts;
}

// Pearson's statistic sum (observed - expected)^2 / expected over tokens with expected > 0.
// A token with expected probability 0 that was drawn anyway makes the statistic infinite.
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& expected_probs) {
  const double n = static_cast<double>(std::accumulate(counts.begin(), counts.end(), int64_t{0}));
  double stat = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double expected = n * expected_probs[i];
    if (expected == 0.0) {
      if (counts[i] != 0) return std::numeric_limits<double>::infinity();
      continue;
    }
    const double diff = static_cast<double>(counts[i]) - expected;
    stat += diff * diff / expected;
  }
  return stat;
}

// ==== greedy ===================================================================================

TEST(Sampler, GreedyPicksArgmax) {
  Sampler sampler(SamplerConfig{});  // temperature 0 by default
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const std::vector<float> logits = random_logits(1000, seed);
    const auto expected = std::max_element(logits.begin(), logits.end()) - logits.begin();
    EXPECT_EQ(sample_copy(sampler, logits), expected) << "seed " << seed;
  }
}

TEST(Sampler, GreedyFirstOnTies) {
  Sampler sampler(SamplerConfig{});
  EXPECT_EQ(sample_copy(sampler, {0.5f, 2.0f, -1.0f, 2.0f, 2.0f}), 1);
  EXPECT_EQ(argmax(std::vector<float>{3.0f, 3.0f}), 0);
}

TEST(Sampler, ArgmaxSkipsNaN) {
  EXPECT_EQ(argmax(std::vector<float>{kNaN, -5.0f, 1.0f}), 2);
  EXPECT_EQ(argmax(std::vector<float>{-5.0f, kNaN, -6.0f}), 0);
}

TEST(Sampler, EmptyInputThrows) {
  Sampler sampler(SamplerConfig{});
  std::vector<float> empty;
  EXPECT_THROW(sampler.sample(empty, {}), InvalidArgument);
  EXPECT_THROW(argmax(empty), InvalidArgument);
}

// ==== determinism ==============================================================================

TEST(Sampler, SameSeedSameSequence) {
  SamplerConfig config;
  config.temperature = 1.0f;
  config.seed = 1234;
  const std::vector<float> logits = random_logits(50, 7, 1.0f);
  Sampler a(config);
  Sampler b(config);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(sample_copy(a, logits), sample_copy(b, logits)) << i;
}

TEST(Sampler, DifferentSeedDiffers) {
  SamplerConfig config;
  config.temperature = 1.0f;
  config.seed = 1234;
  const std::vector<float> logits = random_logits(50, 7, 1.0f);
  Sampler a(config);
  config.seed = 1235;
  Sampler b(config);
  int n_different = 0;
  for (int i = 0; i < 200; ++i) n_different += sample_copy(a, logits) != sample_copy(b, logits);
  // Flat-ish distribution over 50 tokens: independent streams agree ~5% of the time.
  EXPECT_GT(n_different, 100);
}

// ==== filters that reduce to greedy ============================================================

TEST(Sampler, TopK1EqualsGreedyAtAnyTemperature) {
  for (const float temperature : {0.1f, 1.0f, 5.0f, 100.0f}) {
    SamplerConfig config;
    config.temperature = temperature;
    config.top_k = 1;
    Sampler sampler(config);
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      const std::vector<float> logits = random_logits(500, seed);
      EXPECT_EQ(sample_copy(sampler, logits), argmax(logits))
          << "temperature " << temperature << " seed " << seed;
    }
  }
}

TEST(Sampler, TopK1BreaksTiesLikeGreedy) {
  SamplerConfig config;
  config.temperature = 1.0f;
  config.top_k = 1;
  Sampler sampler(config);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sample_copy(sampler, {1.0f, 4.0f, 4.0f, 0.0f}), 1);
}

TEST(Sampler, TinyTopPPicksArgmax) {
  SamplerConfig config;
  config.temperature = 1.5f;
  config.top_p = 1e-6f;
  Sampler sampler(config);
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const std::vector<float> logits = random_logits(2000, seed);
    EXPECT_EQ(sample_copy(sampler, logits), argmax(logits)) << "seed " << seed;
  }
}

TEST(Sampler, MinP1PicksArgmax) {
  SamplerConfig config;
  config.temperature = 1.5f;
  config.min_p = 1.0f;
  Sampler sampler(config);
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const std::vector<float> logits = random_logits(2000, seed);
    EXPECT_EQ(sample_copy(sampler, logits), argmax(logits)) << "seed " << seed;
  }
}

// ==== the drawn distribution ===================================================================

TEST(Sampler, Temperature1MatchesSoftmax) {
  SamplerConfig config;
  config.temperature = 1.0f;
  config.seed = 2024;
  const std::vector<double> expected = {0.5, 0.3, 0.2};
  const auto counts = draw_counts(config, log_probs(expected), 20000);
  EXPECT_LT(chi_square(counts, expected), kChiSquare999Dof2)
      << counts[0] << " " << counts[1] << " " << counts[2];
}

TEST(Sampler, Temperature2Flattens) {
  SamplerConfig config;
  config.temperature = 2.0f;
  config.seed = 2025;
  const std::vector<float> logits = log_probs({0.5, 0.3, 0.2});
  const std::vector<double> expected = softmax(logits, 2.0);  // ~ (0.419, 0.325, 0.265)
  ASSERT_LT(expected[0], 0.45);
  const auto counts = draw_counts(config, logits, 20000);
  EXPECT_LT(chi_square(counts, expected), kChiSquare999Dof2)
      << counts[0] << " " << counts[1] << " " << counts[2];
  // And it is not the T = 1 distribution: token 0 drawn clearly less than half the time.
  EXPECT_LT(counts[0], 0.46 * 20000);
}

TEST(Sampler, TopK2DropsThirdAndRenormalizes) {
  SamplerConfig config;
  config.temperature = 1.0f;
  config.top_k = 2;
  config.seed = 99;
  const auto counts = draw_counts(config, log_probs({0.5, 0.3, 0.2}), 20000);
  EXPECT_EQ(counts[2], 0);
  EXPECT_LT(chi_square(counts, {0.625, 0.375, 0.0}), kChiSquare999Dof1)
      << counts[0] << " " << counts[1];
}

TEST(Sampler, TopP07KeepsExactlyFirstTwo) {
  // Cumulative mass 0.5 < 0.7 <= 0.8: the nucleus is {0, 1}.
  SamplerConfig config;
  config.temperature = 1.0f;
  config.top_p = 0.7f;
  config.seed = 5;
  // Token order scrambled so the filter has to sort.
  const auto counts = draw_counts(config, log_probs({0.2, 0.5, 0.3}), 20000);
  EXPECT_EQ(counts[0], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[2], 0);
  EXPECT_LT(chi_square(counts, {0.0, 0.625, 0.375}), kChiSquare999Dof1)
      << counts[1] << " " << counts[2];
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  // p_max = 0.5, so min_p = 0.5 keeps p >= 0.25: tokens 0 and 1.
  SamplerConfig config;
  config.temperature = 1.0f;
  config.min_p = 0.5f;
  config.seed = 6;
  const auto counts = draw_counts(config, log_probs({0.5, 0.3, 0.2}), 20000);
  EXPECT_EQ(counts[2], 0);
  EXPECT_LT(chi_square(counts, {0.625, 0.375, 0.0}), kChiSquare999Dof1);
}

TEST(Sampler, NegInfNeverPicked) {
  SamplerConfig config;
  config.temperature = 1.0f;
  config.seed = 11;
  Sampler sampler(config);
  const std::vector<float> logits = {kNegInf, 0.3f, kNegInf, -0.2f, kNegInf};
  for (int i = 0; i < 2000; ++i) {
    const int32_t token = sample_copy(sampler, logits);
    ASSERT_TRUE(token == 1 || token == 3) << token;
  }
}

TEST(Sampler, InfiniteTemperatureIsUniform) {
  SamplerConfig config;
  config.temperature = std::numeric_limits<float>::infinity();
  config.seed = 12;
  const auto counts = draw_counts(config, {4.0f, -3.0f, 0.5f}, 20000);
  EXPECT_LT(chi_square(counts, {1.0 / 3, 1.0 / 3, 1.0 / 3}), kChiSquare999Dof2);
}

// Reference for the whole chain on a large vocabulary: full sort by (logit desc, id asc),
// top-k and top-p as prefixes of it, then the same float arithmetic and the same draw as
// sampler.cpp (over the survivors in token-id order). Token ids must match exactly.
int32_t reference_sample(std::vector<float> logits, const SamplerConfig& config,
                         std::mt19937_64& rng) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  if (config.top_k > 0 && static_cast<size_t>(config.top_k) < ids.size()) ids.resize(config.top_k);
  const float l_max = logits[ids[0]];
  std::vector<float> probs;
  double total = 0.0;
  for (const int32_t id : ids) {
    probs.push_back(std::exp((logits[id] - l_max) / config.temperature));
    total += probs.back();
  }
  double mass = 0.0;
  size_t kept = ids.size();
  for (size_t i = 0; i < ids.size() && config.top_p < 1.0f; ++i) {
    mass += probs[i];
    if (mass >= static_cast<double>(config.top_p) * total) {
      kept = i + 1;
      break;
    }
  }
  ids.resize(kept);
  std::erase_if(ids, [&](int32_t id) {
    return std::exp((logits[id] - l_max) / config.temperature) < config.min_p;
  });
  // The sampler walks the survivors in token-id order.
  std::sort(ids.begin(), ids.end());
  probs.clear();
  for (const int32_t id : ids) probs.push_back(std::exp((logits[id] - l_max) / config.temperature));
  double kept_mass = 0.0;
  for (const float p : probs) kept_mass += p;
  const double threshold = static_cast<double>(rng() >> 11) * 0x1.0p-53 * kept_mass;
  double cumulative = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    cumulative += probs[i];
    if (threshold < cumulative) return ids[i];
  }
  return ids[kept - 1];
}

TEST(Sampler, LargeVocabMatchesFullSortReference) {
  // Peaked (the top-p pre-filter leaves few candidates), medium and flat (nucleus of
  // thousands: the bisection runs), top-k + top-p, top-k alone, and min-p on top.
  struct Case {
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    float logit_scale;
  };
  for (const Case c : {Case{0.5f, 0, 0.9f, 0.0f, 6.0f}, Case{0.8f, 0, 0.9f, 0.0f, 3.0f},
                       Case{1.0f, 0, 0.95f, 0.0f, 0.5f}, Case{1.2f, 40, 0.8f, 0.0f, 2.0f},
                       Case{1.0f, 5000, 1.0f, 0.0f, 1.0f}, Case{1.0f, 0, 0.95f, 0.05f, 3.0f}}) {
    SamplerConfig config;
    config.temperature = c.temperature;
    config.top_k = c.top_k;
    config.top_p = c.top_p;
    config.min_p = c.min_p;
    config.seed = 77;
    Sampler sampler(config);
    std::mt19937_64 reference_rng(config.seed);
    for (uint64_t step = 0; step < 10; ++step) {
      const std::vector<float> logits = random_logits(49152, 1000 + step, c.logit_scale);
      ASSERT_EQ(sample_copy(sampler, logits), reference_sample(logits, config, reference_rng))
          << "temperature " << c.temperature << " top_k " << c.top_k << " top_p " << c.top_p
          << " min_p " << c.min_p << " step " << step;
    }
  }
}

// ==== repetition penalty =======================================================================

TEST(Sampler, RepeatPenaltyDividesPositiveMultipliesNegative) {
  SamplerConfig config;
  config.repeat_penalty = 2.0f;
  Sampler sampler(config);
  std::vector<float> logits = {3.0f, -1.5f, 1.0f, 0.25f};
  const std::vector<int32_t> history = {0, 1, 0, 0};  // token 0 three times: penalized once
  sampler.sample(logits, history);
  EXPECT_FLOAT_EQ(logits[0], 1.5f);
  EXPECT_FLOAT_EQ(logits[1], -3.0f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f);
  EXPECT_FLOAT_EQ(logits[3], 0.25f);
}

TEST(Sampler, RepeatPenaltyChangesGreedyChoice) {
  SamplerConfig config;
  config.repeat_penalty = 1.5f;
  Sampler sampler(config);
  const std::vector<float> logits = {2.0f, 1.8f};
  const std::vector<int32_t> history = {0};
  EXPECT_EQ(sample_copy(sampler, logits), 0);
  EXPECT_EQ(sample_copy(sampler, logits, history), 1);  // 2.0 / 1.5 = 1.33 < 1.8
}

TEST(Sampler, RepeatPenaltyOnlyWithinLastN) {
  SamplerConfig config;
  config.repeat_penalty = 2.0f;
  config.repeat_last_n = 2;
  Sampler sampler(config);
  std::vector<float> logits = {4.0f, 4.0f, 4.0f, -4.0f};
  const std::vector<int32_t> history = {0, 3, 1, 2};  // window: {1, 2}
  sampler.sample(logits, history);
  EXPECT_FLOAT_EQ(logits[0], 4.0f);
  EXPECT_FLOAT_EQ(logits[1], 2.0f);
  EXPECT_FLOAT_EQ(logits[2], 2.0f);
  EXPECT_FLOAT_EQ(logits[3], -4.0f);
}

TEST(Sampler, RepeatLastNZeroOrPenaltyOneIsOff) {
  const std::vector<float> original = random_logits(8, 3);
  const std::vector<int32_t> history = {0, 1, 2, 3, 4, 5, 6, 7};
  for (const auto& [penalty, last_n] : {std::pair{2.0f, 0}, std::pair{1.0f, 64}}) {
    SamplerConfig config;
    config.repeat_penalty = penalty;
    config.repeat_last_n = last_n;
    Sampler sampler(config);
    std::vector<float> logits = original;
    sampler.sample(logits, history);
    EXPECT_EQ(logits, original) << "penalty " << penalty << " last_n " << last_n;
  }
}

TEST(Sampler, HistoryTokenOutsideVocabThrows) {
  SamplerConfig config;
  config.repeat_penalty = 1.1f;
  Sampler sampler(config);
  std::vector<float> logits = {1.0f, 2.0f};
  const std::vector<int32_t> too_large = {5};
  const std::vector<int32_t> negative = {-1};
  EXPECT_THROW(sampler.sample(logits, too_large), InvalidArgument);
  EXPECT_THROW(sampler.sample(logits, negative), InvalidArgument);
}

// ==== rejected input ===========================================================================

// Expects validate() and the constructor to throw InvalidArgument whose message contains `text`.
void expect_invalid(const SamplerConfig& config, const std::string& text) {
  try {
    config.validate();
    ADD_FAILURE() << "validate() accepted a config that should fail with: " << text;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << text;
  }
  EXPECT_THROW(Sampler{config}, InvalidArgument) << text;
}

TEST(Sampler, ValidateRejectsEachBadValue) {
  SamplerConfig c;
  c.temperature = -1.0f;
  expect_invalid(c, "--temperature must be >= 0, got -1");
  c.temperature = kNaN;
  expect_invalid(c, "--temperature");

  c = {};
  c.top_p = 1.5f;
  expect_invalid(c, "--top-p must be in (0, 1], got 1.5");
  c.top_p = 0.0f;
  expect_invalid(c, "--top-p must be in (0, 1]");
  c.top_p = kNaN;
  expect_invalid(c, "--top-p");

  c = {};
  c.top_k = -1;
  expect_invalid(c, "--top-k must be >= 0");

  c = {};
  c.min_p = -0.1f;
  expect_invalid(c, "--min-p must be in [0, 1]");
  c.min_p = 1.01f;
  expect_invalid(c, "--min-p must be in [0, 1]");
  c.min_p = kNaN;
  expect_invalid(c, "--min-p");

  c = {};
  c.repeat_penalty = 0.0f;
  expect_invalid(c, "--repeat-penalty must be > 0");
  c.repeat_penalty = -1.0f;
  expect_invalid(c, "--repeat-penalty must be > 0");
  c.repeat_penalty = kNaN;
  expect_invalid(c, "--repeat-penalty");
  c.repeat_penalty = std::numeric_limits<float>::infinity();
  expect_invalid(c, "--repeat-penalty");

  c = {};
  c.repeat_last_n = -1;
  expect_invalid(c, "--repeat-last-n must be >= 0");
}

TEST(Sampler, ValidateAcceptsDefaultsAndBoundaries) {
  SamplerConfig c;
  EXPECT_NO_THROW(c.validate());
  c.temperature = 0.0f;
  c.top_p = 1.0f;
  c.min_p = 1.0f;
  c.top_k = 0;
  c.repeat_last_n = 0;
  c.repeat_penalty = 1e-3f;
  EXPECT_NO_THROW(c.validate());
  c.min_p = 0.0f;
  c.top_p = 1e-9f;
  EXPECT_NO_THROW(c.validate());
}

TEST(Sampler, NaNLogitThrows) {
  for (const float temperature : {0.0f, 1.0f}) {
    SamplerConfig config;
    config.temperature = temperature;
    Sampler sampler(config);
    std::vector<float> logits = random_logits(100, 4);
    logits[37] = kNaN;
    try {
      sampler.sample(logits, {});
      ADD_FAILURE() << "NaN logit accepted at temperature " << temperature;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("37"), std::string::npos) << e.what();
    }
  }
}

TEST(Sampler, AllNegInfOrPosInfLogitsThrow) {
  for (const float temperature : {0.0f, 1.0f}) {
    SamplerConfig config;
    config.temperature = temperature;
    Sampler sampler(config);
    std::vector<float> all_masked(10, kNegInf);
    EXPECT_THROW(sampler.sample(all_masked, {}), InvalidArgument);
    std::vector<float> overflow = random_logits(10, 5);
    overflow[2] = std::numeric_limits<float>::infinity();
    EXPECT_THROW(sampler.sample(overflow, {}), InvalidArgument);
  }
}

// A finite logit the penalty overflows is rejected like an upstream +inf / all -inf row,
// rather than feeding inf - inf into the softmax.
TEST(Sampler, PenaltyOverflowIsRejected) {
  for (const float temperature : {0.0f, 1.0f}) {
    SamplerConfig config;
    config.temperature = temperature;
    config.repeat_penalty = 0.5f;  // divides positive logits by 0.5: 3e38 -> +inf
    Sampler sampler(config);
    std::vector<float> logits = random_logits(10, 6);
    logits[4] = 3e38f;
    const std::vector<int32_t> history{4};
    EXPECT_THROW(sampler.sample(logits, history), InvalidArgument);
    logits = random_logits(10, 6);
    logits[4] = 3e38f;
    EXPECT_NO_THROW(sampler.sample(logits, {}));  // the same row without the penalty is fine
  }
}

TEST(Sampler, RepeatPenaltyTokensAreTheDistinctWindow) {
  const std::vector<int32_t> history{9, 1, 7, 3, 7, 1, 7};
  EXPECT_EQ(repeat_penalty_tokens(history, 4, 10), (std::vector<int32_t>{1, 3, 7}));
  EXPECT_EQ(repeat_penalty_tokens(history, 100, 10), (std::vector<int32_t>{1, 3, 7, 9}));
  EXPECT_TRUE(repeat_penalty_tokens(history, 0, 10).empty());
  EXPECT_TRUE(repeat_penalty_tokens({}, 64, 10).empty());
  EXPECT_THROW(repeat_penalty_tokens(history, 100, 9), InvalidArgument);  // 9 is outside [0, 9)
  EXPECT_NO_THROW(repeat_penalty_tokens(history, 6, 9));                 // ... but outside the window
}

// ---- probabilities(): the distribution sample() draws from (chapter 06's p and q rows) ---------

TEST(SamplerProbabilities, GreedyIsOneHotAtThePenalizedArgmax) {
  SamplerConfig c;
  c.repeat_penalty = 2.0f;
  Sampler s(c);
  std::vector<float> logits = {1.0f, 3.0f, 2.5f, -1.0f}, probs(4);
  const std::vector<int32_t> history = {1};  // 3.0 / 2 = 1.5 < 2.5: token 2 wins
  s.probabilities(logits, history, {}, probs);
  EXPECT_EQ(probs, (std::vector<float>{0.0f, 0.0f, 1.0f, 0.0f}));
}

TEST(SamplerProbabilities, FollowTopKTemperatureTopPAndMinPAsDerived) {
  // Logits 0..5 (token t has logit t / 2), T = 0.5: relative masses e^(t - 5) for the top-k = 5
  // tokens 1..5; top-p 0.9 then keeps the smallest most-likely-first set reaching 90% of that
  // mass; min-p 0.1 drops tokens below a tenth of the most likely; the rest renormalized.
  SamplerConfig c;
  c.temperature = 0.5f;
  c.top_k = 5;
  c.top_p = 0.9f;
  c.min_p = 0.1f;
  Sampler s(c);
  std::vector<float> logits = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f}, probs(6);
  s.probabilities(logits, {}, {}, probs);
  std::vector<double> mass = {0, std::exp(-4.0), std::exp(-3.0), std::exp(-2.0), std::exp(-1.0), 1.0};
  const double total = mass[1] + mass[2] + mass[3] + mass[4] + mass[5];
  // Most likely first: 5, 4, 3 reach (1 + e^-1 + e^-2) / total = 0.9380 >= 0.9; 5 and 4 alone 0.8644.
  // min-p: e^-2 = 0.135 >= 0.1 survives.
  const double kept = mass[3] + mass[4] + mass[5];
  ASSERT_GT((mass[5] + mass[4] + mass[3]) / total, 0.9);
  ASSERT_LT((mass[5] + mass[4]) / total, 0.9);
  for (int t = 0; t < 6; ++t) EXPECT_NEAR(probs[t], t >= 3 ? mass[t] / kept : 0.0, 1e-6) << "token " << t;
}

TEST(SamplerProbabilities, AreWhatSampleDrawsFrom) {
  // 60,000 seeded draws of sample() land on each token as often as probabilities() says
  // (4.5 standard deviations of a binomial: a false alarm about once in 10^5 per token).
  SamplerConfig c;
  c.temperature = 0.8f;
  c.top_k = 6;
  c.repeat_penalty = 1.3f;
  c.presence_penalty = 0.5f;
  const std::vector<float> row = {0.2f, 1.1f, -0.3f, 0.9f, 1.4f, 0.0f, 0.7f, -2.0f, 1.0f, 0.5f};
  const std::vector<int32_t> history = {4, 8}, output = {8};
  std::vector<float> logits = row, probs(row.size());
  Sampler(c).probabilities(logits, history, output, probs);
  EXPECT_NEAR(std::accumulate(probs.begin(), probs.end(), 0.0), 1.0, 1e-6);
  constexpr int kDraws = 60000;
  Sampler s(c);
  std::vector<int> counts(row.size());
  for (int i = 0; i < kDraws; ++i) {
    std::vector<float> l = row;
    counts[static_cast<size_t>(s.sample(l, history, output))] += 1;
  }
  for (size_t t = 0; t < row.size(); ++t) {
    const double sd = std::sqrt(kDraws * probs[t] * (1 - probs[t]));
    EXPECT_NEAR(counts[t], kDraws * probs[t], 4.5 * sd + 1) << "token " << t;
  }
}

TEST(SamplerProbabilities, RejectsAWrongSizedRowAndLeavesTheRngAlone) {
  Sampler a(SamplerConfig{.temperature = 1.0f}), b(SamplerConfig{.temperature = 1.0f});
  std::vector<float> logits = {0.1f, 0.2f}, probs(3);
  EXPECT_THROW(a.probabilities(logits, {}, {}, probs), InvalidArgument);
  probs.resize(2);
  a.probabilities(logits, {}, {}, probs);
  EXPECT_EQ(a.uniform(), b.uniform()) << "probabilities() drew from the RNG";
}

}  // namespace
}  // namespace lio
