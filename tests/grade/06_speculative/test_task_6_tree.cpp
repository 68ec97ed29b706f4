// Chapter 06, Task 6: the draft tree (exercises/06_speculative/spec_decode.cpp).
// Part a, tree_attention_masks: the mask of a chain, a star, the lesson's example tree and random
// trees, and the errors. Part b, verify_tree: greedy trees (the argmax path, no uniform spent), a
// chain (Task 4's rule with one-hot drafts, uniform for uniform), scripted uniforms through a
// sibling's rejection, and the exactness of the output, measured: over 20,000 seeded rounds on a
// tree with siblings at two depths, the first emitted token and the first two follow the target,
// each cell within a tolerance set by the number of rounds; the same check is shown to catch a
// wrong rule (siblings tested without the residual).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "lio/error.h"
#include "lio/spec_decode.h"

namespace {
using namespace lio;
using Ids = std::vector<int32_t>;
using Masks = std::vector<uint64_t>;

// ---- helpers ----------------------------------------------------------------------------------

// Seeded U[0, 1) draws (the top 53 bits of a 64-bit word), and how many were taken.
class CountingUniform {
 public:
  explicit CountingUniform(uint64_t seed) : rng_(seed) {}
  std::function<double()> draws() {
    return [this] { return ++taken_, static_cast<double>(rng_() >> 11) * 0x1.0p-53; };
  }
  int64_t taken() const { return taken_; }

 private:
  std::mt19937_64 rng_;
  int64_t taken_ = 0;
};

// A fixed list of draws, in order; taking one more than the list holds is a test failure.
class ScriptedUniform {
 public:
  explicit ScriptedUniform(std::vector<double> script) : script_(std::move(script)) {}
  std::function<double()> draws() {
    return [this]() -> double {
      if (next_ >= script_.size()) {
        ADD_FAILURE() << "uniform() called " << next_ + 1 << " times; the script holds "
                      << script_.size();
        return 0.0;
      }
      return script_[next_++];
    };
  }
  size_t taken() const { return next_; }

 private:
  std::vector<double> script_;
  size_t next_ = 0;
};

std::vector<float> one_hot_row(int32_t t, int64_t vocab) {
  std::vector<float> row(static_cast<size_t>(vocab), 0.0f);
  row[static_cast<size_t>(t)] = 1.0f;
  return row;
}

// (n, vocab) row-major from n rows.
std::vector<float> stack_rows(const std::vector<std::vector<float>>& rows) {
  std::vector<float> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

// The parents array of a chain of n nodes: 0 <- 1 <- ... <- n - 1.
Ids chain_parents(int64_t n) {
  Ids parents(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) parents[static_cast<size_t>(i)] = static_cast<int32_t>(i - 1);
  return parents;
}

// The mask written out from its definition: the node and every ancestor, found by walking up.
Masks masks_by_walking_up(const Ids& parents) {
  Masks masks(parents.size(), 0);
  for (size_t i = 0; i < parents.size(); ++i)
    for (int32_t j = static_cast<int32_t>(i); j >= 0; j = parents[static_cast<size_t>(j)])
      masks[i] |= uint64_t{1} << j;
  return masks;
}

// ---- the lesson's example tree (docs/06_speculative.md, section 7) ------------------------------
//
//   The ─┬─ cat ─┬─ sat ── on          node  0    1    2    3    4   5    6
//        │       └─ is                 token The  cat  dog  sat  is  ran  on
//        └─ dog ─── ran                parent -1  0    0    1    1   2    3
enum Word : int32_t { kThe, kCat, kDog, kSat, kIs, kRan, kOn, kMat, kVocab };
const Ids kLessonParents = {-1, 0, 0, 1, 1, 2, 3};
const Ids kLessonTokens = {kThe, kCat, kDog, kSat, kIs, kRan, kOn};

// ---- part a: tree_attention_masks -------------------------------------------------------------

TEST(Ch06Task6, MaskOfAChainIsTheCausalMask) {
  for (int64_t n = 1; n <= 64; ++n) {
    const Masks masks = tree_attention_masks(chain_parents(n));
    ASSERT_EQ(masks.size(), static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      // Rows 0 .. i: the low i + 1 bits (all 64 for the last row of a 64-node chain).
      const uint64_t causal = i == 63 ? ~uint64_t{0} : (uint64_t{1} << (i + 1)) - 1;
      EXPECT_EQ(masks[static_cast<size_t>(i)], causal) << "chain of " << n << ", row " << i;
    }
  }
}

TEST(Ch06Task6, MaskOfAStarSeesTheRootAndItself) {
  // One root, 63 candidates for the next token (Medusa's first head's top 63): no child sees
  // another.
  Ids parents(64, 0);
  parents[0] = -1;
  const Masks masks = tree_attention_masks(parents);
  ASSERT_EQ(masks.size(), 64u);
  EXPECT_EQ(masks[0], 1u);
  for (size_t i = 1; i < 64; ++i) EXPECT_EQ(masks[i], 1u | (uint64_t{1} << i)) << "child " << i;
}

TEST(Ch06Task6, MaskOfTheLessonsExampleTree) {
  // Row i lists the columns it may read, the lesson's matrix read row by row (bit j = column j).
  const Masks want = {
      0b0000001,  // The: itself
      0b0000011,  // cat: The cat
      0b0000101,  // dog: The dog (not cat: a sibling)
      0b0001011,  // sat: The cat sat
      0b0010011,  // is:  The cat is (not sat)
      0b0100101,  // ran: The dog ran
      0b1001011,  // on:  The cat sat on
  };
  EXPECT_EQ(tree_attention_masks(kLessonParents), want);
}

TEST(Ch06Task6, MaskBitsAreTheAncestorsAndTheirCountIsTheDepth) {
  std::mt19937_64 rng(606);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 64);
    Ids parents(static_cast<size_t>(n));
    parents[0] = -1;
    for (int64_t i = 1; i < n; ++i)  // any earlier node; deep chains and wide stars both occur
      parents[static_cast<size_t>(i)] = static_cast<int32_t>(rng() % static_cast<uint64_t>(
                                                                  trial % 2 == 0 ? i : std::min<int64_t>(i, 3)));
    const Masks masks = tree_attention_masks(parents);
    ASSERT_EQ(masks, masks_by_walking_up(parents)) << "trial " << trial << ", n " << n;
    for (int64_t i = 0; i < n; ++i) {
      int depth = 0;
      for (int32_t j = parents[static_cast<size_t>(i)]; j >= 0; j = parents[static_cast<size_t>(j)])
        ++depth;
      EXPECT_EQ(std::popcount(masks[static_cast<size_t>(i)]) - 1, depth)
          << "trial " << trial << ", node " << i;
    }
  }
}

TEST(Ch06Task6, MaskRejectsWhatIsNotADraftTree) {
  EXPECT_THROW(tree_attention_masks(Ids{}), InvalidArgument);  // no root
  Ids too_many = chain_parents(65);
  EXPECT_THROW(tree_attention_masks(too_many), InvalidArgument);  // 65 nodes: no 65th bit
  EXPECT_THROW(tree_attention_masks(Ids{0}), InvalidArgument);    // the root has a parent
  EXPECT_THROW(tree_attention_masks(Ids{3, 0, 0}), InvalidArgument);
  EXPECT_THROW(tree_attention_masks(Ids{-1, 1}), InvalidArgument);     // its own parent
  EXPECT_THROW(tree_attention_masks(Ids{-1, 0, 3, 0}), InvalidArgument);  // parent after child
  EXPECT_THROW(tree_attention_masks(Ids{-1, 0, -1}), InvalidArgument);    // a second root
}

// ---- part b: verify_tree, exact cases ---------------------------------------------------------

// The lesson tree's rows for a greedy target: row i one-hot at argmax[i].
std::vector<float> greedy_rows(const Ids& argmax) {
  std::vector<std::vector<float>> rows;
  for (const int32_t t : argmax) rows.push_back(one_hot_row(t, kVocab));
  return stack_rows(rows);
}

TEST(Ch06Task6, GreedyTreeKeepsTheArgmaxPathAndSpendsNoUniform) {
  struct Case {
    const char* what;
    Ids argmax;  // the target's argmax after each node's path (rows 0 .. 6)
    Ids path;
    Ids tokens;
  };
  const std::vector<Case> cases = {
      {"down the deepest branch, bonus after the leaf", {kCat, kSat, kMat, kOn, kMat, kMat, kMat},
       {1, 3, 6}, {kCat, kSat, kOn, kMat}},
      {"the second child at depth 1", {kDog, kIs, kRan, kMat, kMat, kThe, kMat}, {2, 5},
       {kDog, kRan, kThe}},
      {"the second child at depth 2", {kCat, kIs, kMat, kMat, kOn, kMat, kMat}, {1, 4},
       {kCat, kIs, kOn}},
      {"no child holds the argmax at depth 2", {kCat, kDog, kMat, kMat, kMat, kMat, kMat}, {1},
       {kCat, kDog}},
      {"no child holds the argmax at the root", {kMat, kSat, kRan, kOn, kMat, kMat, kMat}, {},
       {kMat}},
  };
  for (const Case& c : cases) {
    CountingUniform u(1);
    const TreeVerifyResult r = verify_tree(greedy_rows(c.argmax), kLessonParents, kLessonTokens,
                                           kVocab, u.draws());
    EXPECT_EQ(r.path, c.path) << c.what;
    EXPECT_EQ(r.tokens, c.tokens) << c.what;
    EXPECT_EQ(u.taken(), 0) << c.what << ": greedy rows decide everything without a draw";
  }
}

TEST(Ch06Task6, ChainIsTask4WithOneHotDraftsUniformForUniform) {
  // A chain of k drafts is Task 4's case with q one-hot at each draft: the same tokens from the
  // same uniforms, the same number taken. The rows give every token a multiple of 1/64 (at
  // least 1/64), so each row sums to exactly 1 and no acceptance probability is 0 or 1: the two
  // rules then compute the same probabilities bit for bit.
  constexpr int64_t vocab = 6;
  std::mt19937_64 rng(64);
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t k = trial % 7;  // 0 .. 6 drafts
    std::vector<float> target;
    for (int64_t row = 0; row <= k; ++row) {
      std::vector<int> units(vocab, 1);
      for (int extra = 0; extra < 64 - vocab; ++extra) units[rng() % vocab] += 1;
      for (const int m : units) target.push_back(static_cast<float>(m) / 64.0f);
    }
    Ids drafts(static_cast<size_t>(k));
    for (int32_t& d : drafts) d = static_cast<int32_t>(rng() % vocab);
    Ids tokens = {0};  // the root's token is never tested
    tokens.insert(tokens.end(), drafts.begin(), drafts.end());

    CountingUniform u_chain(1000 + static_cast<uint64_t>(trial));
    CountingUniform u_tree(1000 + static_cast<uint64_t>(trial));
    const SpecVerifyResult want = verify_drafts(target, {}, drafts, vocab, u_chain.draws());
    const TreeVerifyResult got =
        verify_tree(target, chain_parents(k + 1), tokens, vocab, u_tree.draws());
    Ids want_path;
    for (int32_t i = 1; i <= want.n_accepted; ++i) want_path.push_back(i);
    EXPECT_EQ(got.tokens, want.tokens) << "trial " << trial << ", k " << k;
    EXPECT_EQ(got.path, want_path) << "trial " << trial << ", k " << k;
    EXPECT_EQ(u_tree.taken(), u_chain.taken()) << "trial " << trial << ", k " << k;
  }
}

// A tree over 4 tokens whose probabilities are powers of 2, so every test below is exact:
//
//   root ─┬─ node 1 (token 0)                     row 0 (root) 0.5   0.25  0.125 0.125
//         ├─ node 2 (token 1) ─┬─ node 4 (token 0)  row 2        0.5   0.125 0.125 0.25
//         │                    └─ node 5 (token 3)  rows 1, 3, 5 0.25  0.25  0.25  0.25
//         └─ node 3 (token 2)                       row 4        0.125 0.125 0.5   0.25
const Ids kScriptParents = {-1, 0, 0, 0, 2, 2};
const Ids kScriptTokens = {3, 0, 1, 2, 0, 3};
const std::vector<float> kScriptRows = stack_rows({{0.5f, 0.25f, 0.125f, 0.125f},
                                                   {0.25f, 0.25f, 0.25f, 0.25f},
                                                   {0.5f, 0.125f, 0.125f, 0.25f},
                                                   {0.25f, 0.25f, 0.25f, 0.25f},
                                                   {0.125f, 0.125f, 0.5f, 0.25f},
                                                   {0.25f, 0.25f, 0.25f, 0.25f}});

TEST(Ch06Task6, ScriptedUniformsThroughASiblingsRejection) {
  struct Case {
    const char* what;
    std::vector<double> script;
    Ids path;
    Ids tokens;
  };
  const std::vector<Case> cases = {
      // Node 1 accepted at P = 0.5, then the leaf's bonus: 0.1 falls in token 0's quarter.
      {"first child accepted", {0.2, 0.1}, {1}, {0, 0}},
      // Node 1 rejected (0.6 >= 0.5): the residual {0, .25, .125, .125} has mass 0.5, so node 2
      // is accepted with 0.25 / 0.5 = 0.5 (a rule that forgets to renormalize uses 0.25 and
      // rejects 0.4). At node 2, node 4 is accepted at 0.5; its bonus: 0.7 < 0.75 -> token 2.
      {"second sibling accepted against the residual", {0.6, 0.4, 0.2, 0.7}, {2, 4}, {1, 0, 2}},
      // As above to node 2; node 4 rejected (0.7 >= 0.5); node 5 against {0, .125, .125, .25}:
      // P = 0.25 / 0.5, rejected by 0.55; the correction from {0, .125, .125, 0}: 0.3 -> token 1.
      {"every child of node 2 rejected", {0.6, 0.4, 0.7, 0.55, 0.3}, {2}, {1, 1}},
      // All three root children rejected (P = 0.5, 0.5, 0.5 in turn): the residual keeps token 3
      // alone, so the token is 3 and no uniform is spent on it.
      {"every root child rejected", {0.6, 0.7, 0.9}, {}, {3}},
  };
  for (const Case& c : cases) {
    ScriptedUniform u(c.script);
    const TreeVerifyResult r =
        verify_tree(kScriptRows, kScriptParents, kScriptTokens, 4, u.draws());
    EXPECT_EQ(r.path, c.path) << c.what;
    EXPECT_EQ(r.tokens, c.tokens) << c.what;
    EXPECT_EQ(u.taken(), c.script.size()) << c.what << ": every scripted draw, no more";
  }
}

TEST(Ch06Task6, ImpossibleAndCertainChildrenSpendNoUniform) {
  // Root row {0, 0.5, 0.5, 0}: the child holding token 0 has P = 0 (rejected, no draw), the one
  // holding token 3 too; the child holding token 1 then has P = 0.5 (one draw, 0.9 rejects);
  // the child holding token 2 is all that is left: P = 1, accepted without a draw. Its row is
  // one-hot (greedy): the bonus is token 0, no draw.
  const Ids parents = {-1, 0, 0, 0, 0};
  const Ids tokens = {0, 0, 3, 1, 2};
  const std::vector<float> rows = stack_rows({{0.0f, 0.5f, 0.5f, 0.0f},
                                              {0.25f, 0.25f, 0.25f, 0.25f},
                                              {0.25f, 0.25f, 0.25f, 0.25f},
                                              {0.25f, 0.25f, 0.25f, 0.25f},
                                              one_hot_row(0, 4)});
  ScriptedUniform u({0.9});
  const TreeVerifyResult r = verify_tree(rows, parents, tokens, 4, u.draws());
  EXPECT_EQ(r.path, (Ids{4}));
  EXPECT_EQ(r.tokens, (Ids{2, 0}));
  EXPECT_EQ(u.taken(), 1u);
}

TEST(Ch06Task6, BadTreesAndShapesThrowBeforeAnyDraw) {
  CountingUniform u(7);
  const auto verify = [&](const std::vector<float>& rows, const Ids& parents, const Ids& tokens,
                          int64_t vocab) {
    return verify_tree(rows, parents, tokens, vocab, u.draws());
  };
  const std::vector<float> short_rows(kScriptRows.begin(), kScriptRows.end() - 1);
  EXPECT_THROW(verify(short_rows, kScriptParents, kScriptTokens, 4), InvalidArgument);
  EXPECT_THROW(verify(kScriptRows, kScriptParents, kScriptTokens, 3), InvalidArgument);  // 6x3 != 24
  EXPECT_THROW(verify(kScriptRows, kScriptParents, Ids{3, 0, 1, 2, 0}, 4), InvalidArgument);
  EXPECT_THROW(verify({}, Ids{-1}, Ids{0}, 0), InvalidArgument);  // vocab 0
  EXPECT_THROW(verify(kScriptRows, kScriptParents, Ids{3, 0, 1, 2, 0, 4}, 4), InvalidArgument);
  EXPECT_THROW(verify(kScriptRows, kScriptParents, Ids{3, 0, 1, -1, 0, 3}, 4), InvalidArgument);
  // Nodes 4 and 5 (children of node 2) both hold token 3. Node 1 is accepted first whatever
  // the uniform says (its row gives token 0 all the mass), so only a check made before the
  // first draw sees the pair.
  std::vector<float> sure_rows = kScriptRows;
  std::fill(sure_rows.begin(), sure_rows.begin() + 4, 0.0f);
  sure_rows[0] = 1.0f;
  EXPECT_THROW(verify(sure_rows, kScriptParents, Ids{3, 0, 1, 2, 3, 3}, 4), InvalidArgument);
  EXPECT_THROW(verify(kScriptRows, Ids{-1, 0, 0, 0, 2, 5}, kScriptTokens, 4), InvalidArgument);
  EXPECT_THROW(verify(kScriptRows, Ids{0, 0, 0, 0, 2, 2}, kScriptTokens, 4), InvalidArgument);
  EXPECT_EQ(u.taken(), 0) << "a bad input must throw before any uniform is drawn";
}

// ---- part b: verify_tree keeps the target's distribution ---------------------------------------

// A target over 4 tokens: p(first) and p(second | first). The tree tries tokens 0, 1, 2 after
// the root (token 3, p's favourite of the rest, is left to the residual), then 1 and 3 after
// token 0, and 0 after token 1:
//
//   root ─┬─ node 1 (0) ─┬─ node 4 (1)
//         │              └─ node 5 (3)
//         ├─ node 2 (1) ─── node 6 (0)
//         └─ node 3 (2)
constexpr int64_t kStatVocab = 4;
const std::vector<float> kFirst = {0.30f, 0.25f, 0.15f, 0.30f};
const std::vector<std::vector<float>> kSecondGiven = {
    {0.10f, 0.40f, 0.20f, 0.30f},  // after token 0
    {0.50f, 0.00f, 0.30f, 0.20f},  // after token 1 (token 1 never follows itself)
    {0.25f, 0.25f, 0.25f, 0.25f},  // after token 2
    {0.05f, 0.15f, 0.60f, 0.20f},  // after token 3
};
const Ids kStatParents = {-1, 0, 0, 0, 1, 1, 2};
const Ids kStatTokens = {3, 0, 1, 2, 1, 3, 0};
// Rows 4 .. 6 score a third token, which this test does not count: any distribution does.
const std::vector<float> kStatRows = stack_rows({kFirst, kSecondGiven[0], kSecondGiven[1],
                                                 kSecondGiven[2], {0.4f, 0.3f, 0.2f, 0.1f},
                                                 {0.1f, 0.2f, 0.3f, 0.4f}, {0.25f, 0.25f, 0.25f, 0.25f}});
constexpr int64_t kRounds = 20000;
// A cell of probability p holds a fraction f of the rounds with standard deviation
// sqrt(p (1 - p) / kRounds) (0.0032 at p = 0.3); a correct rule lands outside 5 of them with
// probability erfc(5 / sqrt 2) = 5.7e-7 per cell, 1.2e-5 over the 20 cells below.
constexpr double kZ = 5.0;

using Rule = std::function<TreeVerifyResult(CountingUniform&)>;

// "" when the first token and the first two tokens of `rule`'s rounds follow kFirst and
// kFirst(x) kSecondGiven[x](y), else the cells that do not. A round that emits one token x ends
// there; the next round would draw the second token from the target given x, so it is drawn
// here so (with the test's own generator).
std::string distribution_mismatch(const Rule& rule, uint64_t seed) {
  CountingUniform u(seed);
  std::mt19937_64 next_round(seed + 1);
  std::vector<std::discrete_distribution<int32_t>> plain_step;
  for (const auto& row : kSecondGiven) plain_step.emplace_back(row.begin(), row.end());
  std::vector<int64_t> first(kStatVocab, 0), pair(kStatVocab * kStatVocab, 0);
  for (int64_t round = 0; round < kRounds; ++round) {
    const TreeVerifyResult r = rule(u);
    if (r.tokens.size() != r.path.size() + 1) return "a round's tokens are not its path + 1";
    const int32_t x = r.tokens[0];
    if (x < 0 || x >= kStatVocab) return "token " + std::to_string(x) + " outside the vocabulary";
    const int32_t y = r.tokens.size() >= 2 ? r.tokens[1] : plain_step[static_cast<size_t>(x)](next_round);
    if (y < 0 || y >= kStatVocab) return "token " + std::to_string(y) + " outside the vocabulary";
    first[static_cast<size_t>(x)] += 1;
    pair[static_cast<size_t>(x * kStatVocab + y)] += 1;
  }
  std::ostringstream what;
  const auto check = [&](const std::string& cell, int64_t count, double p) {
    const double f = static_cast<double>(count) / kRounds;
    const double tolerance = kZ * std::sqrt(p * (1.0 - p) / kRounds);
    if ((p == 0.0 && count != 0) || std::abs(f - p) > tolerance)
      what << cell << ": " << f << " of the rounds, target " << p << " +- " << tolerance << "; ";
  };
  for (int32_t x = 0; x < kStatVocab; ++x) {
    check("first = " + std::to_string(x), first[static_cast<size_t>(x)], kFirst[static_cast<size_t>(x)]);
    for (int32_t y = 0; y < kStatVocab; ++y) {
      check("pair (" + std::to_string(x) + ", " + std::to_string(y) + ")",
            pair[static_cast<size_t>(x * kStatVocab + y)],
            static_cast<double>(kFirst[static_cast<size_t>(x)]) *
                kSecondGiven[static_cast<size_t>(x)][static_cast<size_t>(y)]);
    }
  }
  return what.str();
}

// A tempting wrong rule: each child tested with its token's probability in the node's own row,
// p(x), not in what its earlier siblings' rejections left (the residual renormalized); the last
// token from the row without the rejected tokens. A second sibling then comes out with
// (1 - p(first sibling's token)) p(x) instead of p(x).
TreeVerifyResult without_residual(const std::vector<float>& rows, const Ids& parents,
                                  const Ids& tokens, CountingUniform& u) {
  TreeVerifyResult r;
  const auto draw = u.draws();
  int32_t node = 0;
  for (bool descended = true; descended;) {
    descended = false;
    std::vector<float> left(rows.begin() + node * kStatVocab, rows.begin() + (node + 1) * kStatVocab);
    for (int32_t c = 1; c < static_cast<int32_t>(parents.size()) && !descended; ++c) {
      if (parents[static_cast<size_t>(c)] != node) continue;
      const int32_t x = tokens[static_cast<size_t>(c)];
      if (draw() >= rows[static_cast<size_t>(node * kStatVocab + x)]) {
        left[static_cast<size_t>(x)] = 0.0f;
        continue;
      }
      r.path.push_back(c);
      r.tokens.push_back(x);
      node = c;
      descended = true;
    }
    if (!descended) r.tokens.push_back(sample_from_probs(left, draw()));
  }
  return r;
}

TEST(Ch06Task6, EmittedTokensFollowTheTargetAtEachDepth) {
  const Rule rule = [](CountingUniform& u) {
    return verify_tree(kStatRows, kStatParents, kStatTokens, kStatVocab, u.draws());
  };
  EXPECT_EQ(distribution_mismatch(rule, 2024), "");
  // The check has the power to see a wrong rule: the same rounds, siblings tested without the
  // residual, fail it (token 1 comes out at 0.7 x 0.25 = 0.175 of the rounds, not 0.25).
  const Rule wrong = [](CountingUniform& u) {
    return without_residual(kStatRows, kStatParents, kStatTokens, u);
  };
  EXPECT_NE(distribution_mismatch(wrong, 2024), "");
}

TEST(Ch06Task6, GreedyTreeOutputEqualsPlainGreedyDecoding) {
  // Random one-hot targets on the lesson tree: the emitted tokens are what plain greedy decoding
  // would emit, step by step, as far as the tree reaches (the argmax after each emitted token is
  // the row of the node that token was accepted at), and no uniform is spent.
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    Ids argmax(kLessonParents.size());
    for (int32_t& t : argmax) t = static_cast<int32_t>(rng() % kVocab);
    CountingUniform u(static_cast<uint64_t>(trial));
    const TreeVerifyResult r =
        verify_tree(greedy_rows(argmax), kLessonParents, kLessonTokens, kVocab, u.draws());
    // Plain greedy from the root: follow the child holding the argmax while there is one.
    Ids want;
    int32_t node = 0;
    for (bool moved = true; moved;) {
      moved = false;
      want.push_back(argmax[static_cast<size_t>(node)]);
      for (size_t c = 1; c < kLessonParents.size() && !moved; ++c) {
        if (kLessonParents[c] == node && kLessonTokens[c] == want.back()) {
          node = static_cast<int32_t>(c);
          moved = true;
        }
      }
    }
    EXPECT_EQ(r.tokens, want) << "trial " << trial;
    EXPECT_EQ(r.path.size() + 1, r.tokens.size()) << "trial " << trial;
    EXPECT_EQ(u.taken(), 0) << "trial " << trial;
  }
}

}  // namespace
