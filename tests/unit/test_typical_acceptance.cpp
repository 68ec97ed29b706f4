// test_typical_acceptance.cpp — Medusa's typical acceptance (lio/typical_acceptance.h): the
// threshold min(epsilon, alpha * exp(-H)) worked by hand on small rows, the deepest accepted path
// and its likelihood tie-break, the bonus token and the uniforms it spends, greedy rows giving the
// argmax path, and every rejected input. The engine's use of the rule (greedy output unchanged,
// seeded replays) is in test_speculative.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "lio/error.h"
#include "lio/typical_acceptance.h"

namespace lio {
namespace {

constexpr double kEps = 0.09;   // Medusa's posterior_threshold
constexpr double kAlpha = 0.3;  // Medusa's posterior_alpha

/// Uniforms from a list, counting how many were taken.
struct Draws {
  std::vector<double> u;
  size_t taken = 0;
  std::function<double()> fn() {
    return [this] { return u.at(taken++); };
  }
};

/// (n, vocab) rows, one per node.
std::vector<float> rows(const std::vector<std::vector<float>>& r) {
  std::vector<float> out;
  for (const auto& x : r) out.insert(out.end(), x.begin(), x.end());
  return out;
}

TEST(TypicalAcceptance, TheThresholdFollowsTheRowsEntropy) {
  // A flat row over 4 tokens: H = ln 4, alpha * exp(-H) = 0.3 / 4 = 0.075 < epsilon, so a draft
  // at p = 0.25 passes (the exact rule would reject it 3 times in 4).
  const std::vector<float> flat = {0.25f, 0.25f, 0.25f, 0.25f};
  // A peaked row {0.9, 0.1}: H = 0.325, alpha * exp(-H) = 0.217 > epsilon = 0.09: p = 0.1 passes,
  // by 0.01; with epsilon 0.11 it does not.
  const std::vector<float> peaked = {0.9f, 0.1f, 0.0f, 0.0f};
  const std::vector<int32_t> chain = {-1, 0};
  Draws d{{0.0}};
  TreeVerifyResult r = verify_tree_typical(rows({flat, flat}), chain, {{0, 3}}, 4, kEps, kAlpha, d.fn());
  EXPECT_EQ(r.path, std::vector<int32_t>({1}));
  Draws d2{{0.99}};
  r = verify_tree_typical(rows({peaked, flat}), chain, {{0, 1}}, 4, kEps, kAlpha, d2.fn());
  EXPECT_EQ(r.path, std::vector<int32_t>({1}));
  EXPECT_EQ(r.tokens, std::vector<int32_t>({1, 3}));  // the bonus: u = 0.99 in the flat row
  Draws d3{{0.5}};
  r = verify_tree_typical(rows({peaked, flat}), chain, {{0, 1}}, 4, 0.11, kAlpha, d3.fn());
  EXPECT_TRUE(r.path.empty());
  EXPECT_EQ(r.tokens, std::vector<int32_t>({0}));  // u = 0.5 < 0.9: the root row's token 0
  // Alpha 0 makes the threshold 0: any token with p > 0 passes, a token with p = 0 never.
  Draws d4{{0.0, 0.0}};
  r = verify_tree_typical(rows({peaked, flat}), chain, {{0, 2}}, 4, kEps, 0.0, d4.fn());
  EXPECT_TRUE(r.path.empty());
}

TEST(TypicalAcceptance, TheDeepestPathWinsAndLikelihoodBreaksTies) {
  // Root 0 with children 1 (token 1) and 2 (token 2); node 3 (token 0) under node 2.
  // Every row is {0.5, 0.3, 0.2, 0}: threshold min(0.09, 0.3 * exp(-1.03)) = 0.09; all pass.
  const std::vector<float> row = {0.5f, 0.3f, 0.2f, 0.0f};
  const std::vector<int32_t> parents = {-1, 0, 0, 2};
  Draws d{{0.1}};
  TreeVerifyResult r = verify_tree_typical(rows({row, row, row, row}), parents, {{1, 1, 2, 0}}, 4, kEps,
                                           kAlpha, d.fn());
  EXPECT_EQ(r.path, std::vector<int32_t>({2, 3}));  // depth 2 beats node 1's more likely depth 1
  EXPECT_EQ(r.tokens, std::vector<int32_t>({2, 0, 0}));
  EXPECT_EQ(d.taken, 1u);  // one draw: the bonus token from a row that is not one-hot
  // Two leaves at depth 1: the more likely one (token 1, p 0.3 against 0.2) wins, whatever
  // their order.
  for (const bool swapped : {false, true}) {
    Draws d2{{0.0}};
    const std::vector<int32_t> tokens = swapped ? std::vector<int32_t>{0, 2, 1} : std::vector<int32_t>{0, 1, 2};
    r = verify_tree_typical(rows({row, row, row}), {{-1, 0, 0}}, tokens, 4, kEps, kAlpha, d2.fn());
    EXPECT_EQ(r.path, std::vector<int32_t>({swapped ? 2 : 1}));
    EXPECT_EQ(r.tokens.front(), 1);
  }
}

TEST(TypicalAcceptance, AFailedParentCutsItsSubtree) {
  // Node 1 fails (p = 0.05 < 0.09); its child node 2 would pass but is never reached; node 3,
  // the root's other child, passes.
  const std::vector<float> root = {0.05f, 0.15f, 0.8f, 0.0f};
  const std::vector<float> any = {0.25f, 0.25f, 0.25f, 0.25f};
  Draws d{{0.0}};
  const TreeVerifyResult r =
      verify_tree_typical(rows({root, any, any, any}), {{-1, 0, 1, 0}}, {{3, 0, 1, 1}}, 4, kEps, kAlpha, d.fn());
  EXPECT_EQ(r.path, std::vector<int32_t>({3}));
}

TEST(TypicalAcceptance, GreedyRowsAcceptTheArgmaxPathAndSpendNoUniform) {
  // One-hot rows: H = 0, threshold = min(epsilon, alpha) = 0.09; only the argmax (p = 1) passes.
  auto hot = [](int t) {
    std::vector<float> r(5, 0.0f);
    r[static_cast<size_t>(t)] = 1.0f;
    return r;
  };
  // Root argmax 3; node 1 drafts 2 (wrong), node 2 drafts 3 (right) with child node 3 drafting
  // 4 where node 2's argmax is 4 (right), node 3's argmax 1: the bonus.
  Draws d;  // no uniforms at all
  const TreeVerifyResult r =
      verify_tree_typical(rows({hot(3), hot(0), hot(4), hot(1)}), {{-1, 0, 0, 2}}, {{0, 2, 3, 4}}, 5, kEps, kAlpha,
                          d.fn());
  EXPECT_EQ(r.path, std::vector<int32_t>({2, 3}));
  EXPECT_EQ(r.tokens, std::vector<int32_t>({3, 4, 1}));
  EXPECT_EQ(d.taken, 0u);
}

TEST(TypicalAcceptance, BadInputIsRefusedBeforeAnyDraw) {
  const std::vector<float> row = {0.5f, 0.5f};
  Draws d;
  auto call = [&](std::vector<float> p, std::vector<int32_t> parents, std::vector<int32_t> tokens, int64_t vocab,
                  double eps, double alpha) {
    return verify_tree_typical(p, parents, tokens, vocab, eps, alpha, d.fn());
  };
  EXPECT_THROW(call({}, {}, {}, 2, kEps, kAlpha), InvalidArgument);                          // no node
  EXPECT_THROW(call(rows({row, row}), {-1, 0}, {0}, 2, kEps, kAlpha), InvalidArgument);      // tokens short
  EXPECT_THROW(call(row, {-1, 0}, {0, 1}, 2, kEps, kAlpha), InvalidArgument);                // probs short
  EXPECT_THROW(call(rows({row, row}), {0, 0}, {0, 1}, 2, kEps, kAlpha), InvalidArgument);    // root's parent
  EXPECT_THROW(call(rows({row, row}), {-1, 1}, {0, 1}, 2, kEps, kAlpha), InvalidArgument);   // not before
  EXPECT_THROW(call(rows({row, row}), {-1, 0}, {0, 2}, 2, kEps, kAlpha), InvalidArgument);   // token >= vocab
  EXPECT_THROW(call(rows({row, row}), {-1, 0}, {0, 1}, 0, kEps, kAlpha), InvalidArgument);   // vocab 0
  EXPECT_THROW(call(rows({row, row}), {-1, 0}, {0, 1}, 2, 0.0, kAlpha), InvalidArgument);    // epsilon 0
  EXPECT_THROW(call(rows({row, row}), {-1, 0}, {0, 1}, 2, 1.5, kAlpha), InvalidArgument);    // epsilon > 1
  EXPECT_THROW(call(rows({row, row}), {-1, 0}, {0, 1}, 2, kEps, -0.1), InvalidArgument);     // alpha < 0
  EXPECT_THROW(call(rows({row, row}), {-1, 0}, {0, 1}, 2, kEps, NAN), InvalidArgument);      // alpha NaN
  std::vector<int32_t> too_many(65, 0);
  too_many[0] = -1;
  EXPECT_THROW(call(std::vector<float>(65 * 2, 0.5f), too_many, std::vector<int32_t>(65, 0), 2, kEps, kAlpha),
               InvalidArgument);
  EXPECT_EQ(d.taken, 0u);
}

}  // namespace
}  // namespace lio
