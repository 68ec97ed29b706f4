// Chapter 06, Task 4: speculative sampling's acceptance rule
// (exercises/06_speculative/spec_decode.cpp, verify_drafts).
//
// The rule must keep the target's distribution exactly, so the central check is statistical:
// 200k seeded draws per setting, the token at each position compared with the target row by a
// chi-square test whose threshold is computed below for a stated false-alarm rate. The seeds
// are fixed, so a run is deterministic; the rate says how unlucky a correct rule would have to
// be to fail with some other seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "lio/error.h"
#include "lio/spec_decode.h"

namespace {
using namespace lio;
using Ids = std::vector<int32_t>;
using Rows = std::vector<std::vector<float>>;

// ---- helpers ----------------------------------------------------------------------------------

// U[0, 1) from the top 53 bits of one 64-bit draw (as lio's Sampler builds it), counting calls.
struct SeededUniform {
  std::mt19937_64 rng;
  int64_t n_calls = 0;
  explicit SeededUniform(uint64_t seed) : rng(seed) {}
  std::function<double()> fn() {
    return [this] {
      ++n_calls;
      return static_cast<double>(rng() >> 11) * 0x1.0p-53;
    };
  }
};

std::vector<float> flatten(const Rows& rows) {
  std::vector<float> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

std::vector<float> one_hot(int32_t t, int64_t vocab) {
  std::vector<float> row(static_cast<size_t>(vocab), 0.0f);
  row[static_cast<size_t>(t)] = 1.0f;
  return row;
}

// P(X >= x) for X ~ chi-square with an even number df of degrees of freedom:
// exp(-x/2) * sum_{j < df/2} (x/2)^j / j! (the Poisson-tail identity).
double chi_square_survival_even_df(double x, int df) {
  double term = 1.0, sum = 0.0;
  for (int j = 0; j < df / 2; ++j) {
    sum += term;
    term *= (x / 2.0) / (j + 1);
  }
  return std::exp(-x / 2.0) * sum;
}

// The x with P(X >= x) = false_alarm (bisection; the survival function falls with x).
double chi_square_threshold(int df, double false_alarm) {
  double lo = 0.0, hi = 1000.0;
  for (int it = 0; it < 200; ++it) {
    const double mid = 0.5 * (lo + hi);
    (chi_square_survival_even_df(mid, df) > false_alarm ? lo : hi) = mid;
  }
  return hi;
}

// The z with P(|Z| >= z) = false_alarm for a standard normal Z.
double normal_two_sided_threshold(double false_alarm) {
  double lo = 0.0, hi = 40.0;
  for (int it = 0; it < 200; ++it) {
    const double mid = 0.5 * (lo + hi);
    (std::erfc(mid / std::sqrt(2.0)) > false_alarm ? lo : hi) = mid;
  }
  return hi;
}

// Each statistical check below may fail a correct rule with probability 1e-6 for a random
// seed; this file makes fewer than 20 of them (family-wise < 2e-5).
constexpr double kFalseAlarm = 1e-6;
constexpr int64_t kDraws = 200000;

// Pearson's chi-square of `counts` against `probs` (every row below has 5 tokens of nonzero
// probability, so df = 4). A token of probability 0 must never appear. Returns "" when the
// counts fit, else a description.
std::string chi_square_mismatch(const std::vector<int64_t>& counts,
                                const std::vector<float>& probs) {
  int64_t n = 0;
  for (const int64_t c : counts) n += c;
  double chi2 = 0.0;
  int n_cells = 0;
  std::ostringstream what;
  for (size_t t = 0; t < probs.size(); ++t) {
    const double expected = static_cast<double>(n) * probs[t];
    if (probs[t] == 0.0f) {
      if (counts[t] != 0)
        what << "token " << t << " has probability 0 but was emitted " << counts[t] << " times; ";
      continue;
    }
    chi2 += (static_cast<double>(counts[t]) - expected) *
            (static_cast<double>(counts[t]) - expected) / expected;
    ++n_cells;
  }
  if ((n_cells - 1) % 2 != 0)
    return "the closed-form threshold needs an even df: give the row 5 or 3 nonzero tokens";
  const double threshold = chi_square_threshold(n_cells - 1, kFalseAlarm);
  if (chi2 > threshold)
    what << "chi-square " << chi2 << " > " << threshold << " (df " << n_cells - 1 << ")";
  if (what.str().empty()) return "";
  what << " over " << n << " draws; counts:";
  for (size_t t = 0; t < probs.size(); ++t)
    what << " " << counts[t] << " (expected " << n * probs[t] << ")";
  return what.str();
}

// A target (p_0 .. p_3) and a drafter (q_0 .. q_2) over 6 tokens that disagree on purpose:
// each p row has one token of probability 0 that the drafter likes (its drafts must always be
// rejected), and each q row misses a token the target likes (only the correction can emit it).
const Rows kTarget = {
    {0.30f, 0.25f, 0.20f, 0.15f, 0.10f, 0.00f},
    {0.05f, 0.00f, 0.35f, 0.10f, 0.20f, 0.30f},
    {0.20f, 0.20f, 0.00f, 0.25f, 0.05f, 0.30f},
    {0.10f, 0.30f, 0.15f, 0.00f, 0.25f, 0.20f},
};
const Rows kDrafter = {
    {0.10f, 0.40f, 0.00f, 0.25f, 0.05f, 0.20f},
    {0.30f, 0.25f, 0.15f, 0.10f, 0.20f, 0.00f},
    {0.05f, 0.10f, 0.30f, 0.30f, 0.15f, 0.10f},
};
constexpr int64_t kVocab = 6;

// The acceptance rate at position i: sum_x q(x) min(1, p(x)/q(x)) = sum_x min(p(x), q(x)).
double acceptance_rate(const std::vector<float>& p, const std::vector<float>& q) {
  double a = 0.0;
  for (size_t t = 0; t < p.size(); ++t) a += std::min(p[t], q[t]);
  return a;
}

// "" when `hits` successes in `n` trials fit rate `a`, else a description.
std::string rate_mismatch(int64_t hits, int64_t n, double a) {
  const double sd = std::sqrt(static_cast<double>(n) * a * (1.0 - a));
  const double z = (static_cast<double>(hits) - static_cast<double>(n) * a) / sd;
  if (std::abs(z) <= normal_two_sided_threshold(kFalseAlarm)) return "";
  std::ostringstream what;
  what << hits << " of " << n << " accepted, expected rate " << a << " (z = " << z << ")";
  return what.str();
}

// Checks the invariants every result must satisfy; "" when it does.
std::string shape_mismatch(const SpecVerifyResult& r, const Ids& drafts) {
  const int64_t k = static_cast<int64_t>(drafts.size());
  std::ostringstream what;
  if (r.n_accepted < 0 || r.n_accepted > k)
    what << "n_accepted " << r.n_accepted << " outside [0, " << k << "]";
  else if (static_cast<int64_t>(r.tokens.size()) != r.n_accepted + 1)
    what << r.tokens.size() << " tokens for n_accepted " << r.n_accepted
         << " (want n_accepted + 1)";
  else if (!std::equal(drafts.begin(), drafts.begin() + r.n_accepted, r.tokens.begin()))
    what << "the accepted tokens are not a prefix of the drafts";
  return what.str();
}

// ---- (a) greedy: one-hot target rows -----------------------------------------------------------

TEST(Ch06Task4, GreedyTargetKeepsDraftsWhileTheyEqualTheArgmax) {
  constexpr int64_t vocab = 5;
  const Ids argmax = {2, 0, 4, 1};  // the target's choice at positions 0..3
  Rows target_rows;
  for (const int32_t t : argmax) target_rows.push_back(one_hot(t, vocab));
  const std::vector<float> target = flatten(target_rows);
  // A greedy drafter (empty q: one-hot at its drafts) and a sampling drafter whose rows give
  // every token some mass: the outcome is the same and does not depend on the uniforms.
  const std::vector<float> soft_q = flatten({{0.2f, 0.2f, 0.2f, 0.2f, 0.2f},
                                             {0.1f, 0.3f, 0.3f, 0.2f, 0.1f},
                                             {0.4f, 0.1f, 0.1f, 0.1f, 0.3f}});
  struct Case {
    Ids drafts;
    Ids want;
  };
  const std::vector<Case> cases = {
      {{2, 0, 4}, {2, 0, 4, 1}},  // all equal the argmax: 3 accepted + the bonus argmax(p_3)
      {{2, 3, 4}, {2, 0}},        // first mismatch at 1: 1 accepted, corrected to argmax(p_1)
      {{1, 0, 4}, {2}},           // mismatch at 0
      {{2, 0, 3}, {2, 0, 4}},     // mismatch at the last draft
  };
  for (const bool soft : {false, true}) {
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      for (const Case& c : cases) {
        SeededUniform u(seed);
        const SpecVerifyResult r =
            verify_drafts(target, soft ? std::span<const float>(soft_q) : std::span<const float>{},
                          c.drafts, vocab, u.fn());
        EXPECT_EQ(r.tokens, c.want) << (soft ? "soft q" : "greedy drafter") << ", seed " << seed;
        EXPECT_EQ(r.n_accepted, static_cast<int64_t>(c.want.size()) - 1);
      }
    }
  }
}

TEST(Ch06Task4, NoDraftsDrawsOneTokenFromTheTarget) {
  SeededUniform u(7);
  const std::vector<float> target = one_hot(3, 5);
  const SpecVerifyResult r = verify_drafts(target, {}, {}, 5, u.fn());
  EXPECT_EQ(r.tokens, (Ids{3}));
  EXPECT_EQ(r.n_accepted, 0);
}

// ---- (b) a deterministic drafter (n-gram lookup): q is one-hot at the draft ---------------------

TEST(Ch06Task4, DeterministicDraftIsAcceptedWithTheTargetsProbability) {
  // Draft 2 then 4 every time, as a lookup table would: draft 0 is kept with probability
  // p_0(2) = 0.2, and whatever happens, position 0 must follow p_0 and position 1 p_1.
  const Ids drafts = {2, 4};
  const std::vector<float> target = flatten({kTarget[0], kTarget[1], kTarget[2]});
  SeededUniform u(2023);
  std::vector<int64_t> first(kVocab, 0), second(kVocab, 0);
  int64_t n_first_accepted = 0;
  std::string bad_shape;
  for (int64_t n = 0; n < kDraws; ++n) {
    const SpecVerifyResult r = verify_drafts(target, {}, drafts, kVocab, u.fn());
    if (const std::string s = shape_mismatch(r, drafts); !s.empty()) bad_shape = s;
    if (bad_shape.empty()) {
      first[static_cast<size_t>(r.tokens[0])] += 1;
      if (r.n_accepted >= 1) {
        n_first_accepted += 1;
        second[static_cast<size_t>(r.tokens[1])] += 1;
      }
    }
  }
  ASSERT_EQ(bad_shape, "");
  EXPECT_EQ(rate_mismatch(n_first_accepted, kDraws, kTarget[0][2]), "");
  EXPECT_EQ(chi_square_mismatch(first, kTarget[0]), "") << "position 0 must follow p_0";
  EXPECT_EQ(chi_square_mismatch(second, kTarget[1]), "")
      << "position 1, once reached, must follow p_1";
}

TEST(Ch06Task4, DeterministicDraftTheTargetRulesOutIsAlwaysRejected) {
  // p_0(5) = 0: the draft is never kept, and the correction is never 5 either.
  const std::vector<float> target = flatten({kTarget[0], kTarget[1]});
  SeededUniform u(5);
  for (int n = 0; n < 2000; ++n) {
    const SpecVerifyResult r = verify_drafts(target, {}, Ids{5}, kVocab, u.fn());
    ASSERT_EQ(r.n_accepted, 0);
    ASSERT_EQ(r.tokens.size(), 1u);
    ASSERT_NE(r.tokens[0], 5);
  }
}

// ---- (c) a sampling drafter: the output follows the target --------------------------------------

TEST(Ch06Task4, EmittedTokensFollowTheTargetDistribution) {
  for (int64_t k = 1; k <= 3; ++k) {
    const std::vector<float> target =
        flatten(Rows(kTarget.begin(), kTarget.begin() + k + 1));  // (k + 1, vocab)
    const std::vector<float> draft =
        flatten(Rows(kDrafter.begin(), kDrafter.begin() + k));     // (k, vocab)
    std::mt19937_64 drafter_rng(1000 + static_cast<uint64_t>(k));  // the drafter samples q_i
    SeededUniform u(2000 + static_cast<uint64_t>(k));              // the rule's uniforms
    // counts[j][t]: how often token t was emitted at position j (among results reaching j).
    std::vector<std::vector<int64_t>> counts(static_cast<size_t>(k + 1),
                                             std::vector<int64_t>(kVocab, 0));
    int64_t n_first_accepted = 0;
    std::string bad_shape;
    std::vector<std::discrete_distribution<int32_t>> q;  // q_0 .. q_{k-1}
    for (int64_t i = 0; i < k; ++i)
      q.emplace_back(kDrafter[static_cast<size_t>(i)].begin(),
                     kDrafter[static_cast<size_t>(i)].end());
    Ids drafts(static_cast<size_t>(k));
    for (int64_t n = 0; n < kDraws; ++n) {
      for (int64_t i = 0; i < k; ++i)
        drafts[static_cast<size_t>(i)] = q[static_cast<size_t>(i)](drafter_rng);
      const SpecVerifyResult r = verify_drafts(target, draft, drafts, kVocab, u.fn());
      if (const std::string s = shape_mismatch(r, drafts); !s.empty()) bad_shape = s;
      if (!bad_shape.empty()) continue;
      if (r.n_accepted >= 1) n_first_accepted += 1;
      for (size_t j = 0; j < r.tokens.size(); ++j) counts[j][static_cast<size_t>(r.tokens[j])] += 1;
    }
    ASSERT_EQ(bad_shape, "") << "k " << k;
    // Task 1's a, at position 0: sum_x min(p_0(x), q_0(x)) = 0.55.
    EXPECT_EQ(rate_mismatch(n_first_accepted, kDraws, acceptance_rate(kTarget[0], kDrafter[0])), "")
        << "k " << k;
    for (int64_t j = 0; j <= k; ++j) {
      EXPECT_EQ(
          chi_square_mismatch(counts[static_cast<size_t>(j)], kTarget[static_cast<size_t>(j)]), "")
          << "k " << k << ": position " << j << ", once reached, must follow p_" << j;
    }
  }
}

// ---- (d) the RNG-call contract ------------------------------------------------------------------

TEST(Ch06Task4, CertainAcceptancesSpendNoUniform) {
  // q = p: every ratio is 1, so every draft is kept without a draw; one uniform for the bonus.
  const std::vector<float> target = flatten({kTarget[0], kTarget[1], kTarget[2]});
  const std::vector<float> draft = flatten({kTarget[0], kTarget[1]});
  SeededUniform u(11);
  const SpecVerifyResult r = verify_drafts(target, draft, Ids{3, 4}, kVocab, u.fn());
  EXPECT_EQ(r.tokens.size(), 3u);
  EXPECT_EQ(r.n_accepted, 2);
  EXPECT_EQ(u.n_calls, 1) << "one uniform for the bonus token, none for ratios >= 1";
  // Greedy target and greedy drafter that agree: again only the bonus draw.
  SeededUniform v(12);
  const std::vector<float> greedy = flatten({one_hot(1, 4), one_hot(2, 4), one_hot(0, 4)});
  EXPECT_EQ(verify_drafts(greedy, {}, Ids{1, 2}, 4, v.fn()).tokens, (Ids{1, 2, 0}));
  EXPECT_EQ(v.n_calls, 1);
}

TEST(Ch06Task4, OneUniformPerUncertainTestAndPerDrawnToken) {
  // Draft 0: p = q, kept without a draw. Draft 1: p_1(1) = 0 < q_1(1), one draw for the test
  // (which must reject), one for the correction; draft 2 is never examined.
  const std::vector<float> target = flatten({kTarget[0], kTarget[1], kTarget[2], kTarget[3]});
  const std::vector<float> draft = flatten({kTarget[0], kDrafter[1], kDrafter[2]});
  SeededUniform u(13);
  const SpecVerifyResult r = verify_drafts(target, draft, Ids{0, 1, 3}, kVocab, u.fn());
  EXPECT_EQ(r.n_accepted, 1);
  EXPECT_EQ(u.n_calls, 2);
  // Random rows: calls = (examined drafts with p(x) < q(x)) + 1.
  std::mt19937_64 rng(14);
  std::uniform_real_distribution<float> mass(0.0f, 1.0f);
  for (int trial = 0; trial < 500; ++trial) {
    const int64_t k = 1 + trial % 4;
    std::vector<float> p(static_cast<size_t>((k + 1) * kVocab)), q(static_cast<size_t>(k * kVocab));
    for (float& x : p) x = mass(rng);
    for (float& x : q) x = 0.05f + mass(rng);  // > 0, so any draft is legal
    Ids drafts(static_cast<size_t>(k));
    for (int32_t& d : drafts) d = static_cast<int32_t>(rng() % kVocab);
    SeededUniform w(100 + static_cast<uint64_t>(trial));
    const SpecVerifyResult res = verify_drafts(p, q, drafts, kVocab, w.fn());
    ASSERT_EQ(shape_mismatch(res, drafts), "") << "trial " << trial;
    const int64_t n_examined = std::min(res.n_accepted + 1, k);
    int64_t n_uncertain = 0;
    for (int64_t i = 0; i < n_examined; ++i) {
      const size_t x = static_cast<size_t>(i * kVocab + drafts[static_cast<size_t>(i)]);
      if (p[x] < q[x]) n_uncertain += 1;
    }
    EXPECT_EQ(w.n_calls, n_uncertain + 1)
        << "trial " << trial << ", k " << k << ", n_accepted " << res.n_accepted;
  }
}

// ---- (e) bad shapes and drafts ------------------------------------------------------------------

TEST(Ch06Task4, ShapeAndDraftErrorsThrowBeforeAnyDraw) {
  const std::vector<float> target = flatten({kTarget[0], kTarget[1], kTarget[2]});  // k = 2
  const std::vector<float> draft = flatten({kDrafter[0], kDrafter[1]});
  SeededUniform u(17);
  const std::vector<float> short_target(target.begin(), target.end() - 1);
  EXPECT_THROW(verify_drafts(short_target, draft, Ids{0, 1}, kVocab, u.fn()), InvalidArgument);
  EXPECT_THROW(verify_drafts(target, draft, Ids{0}, kVocab, u.fn()),
               InvalidArgument);  // k = 1 needs 2 rows
  const std::vector<float> short_draft(draft.begin(), draft.end() - 1);
  EXPECT_THROW(verify_drafts(target, short_draft, Ids{0, 1}, kVocab, u.fn()), InvalidArgument);
  EXPECT_THROW(verify_drafts(target, target, Ids{0, 1}, kVocab, u.fn()),
               InvalidArgument);                                        // k + 1 rows of q
  EXPECT_THROW(verify_drafts({}, {}, {}, 0, u.fn()), InvalidArgument);  // vocab 0
  EXPECT_THROW(verify_drafts(target, draft, Ids{0, -1}, kVocab, u.fn()), InvalidArgument);
  EXPECT_THROW(verify_drafts(target, {}, Ids{6, 0}, kVocab, u.fn()),
               InvalidArgument);  // id == vocab
  // q_1(5) = 0: the drafter cannot have drawn 5. Draft 0 (p_0(5) = 0) is always rejected, so
  // only a check made before the first draw sees draft 1.
  EXPECT_THROW(verify_drafts(target, draft, Ids{5, 5}, kVocab, u.fn()), InvalidArgument);
  EXPECT_EQ(u.n_calls, 0) << "a bad input must throw before any uniform is drawn";
}

}  // namespace
