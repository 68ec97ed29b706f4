// Chapter 04, Task 5: paged decode attention, K/V gathered through the block table
// (exercises/04_paged_attention/paged_decode_attention.cpp). Checked against a float64
// reference over the same keys laid out contiguously.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "cpu_ops.h"
#include "lio/error.h"

namespace {
using namespace lio;

struct Case {
  int64_t n_ctx, block_size, n_kv_heads, head_dim;
};

/// Fills a pool of n_blocks blocks with random K/V, scatters the sequence's blocks through a
/// shuffled table, and compares every KV head's output with the contiguous float64 reference.
void check(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n_seq_blocks = (c.n_ctx + c.block_size - 1) / c.block_size;
  const int64_t n_blocks = 3 * n_seq_blocks + 2, kvd = c.n_kv_heads * c.head_dim;
  std::vector<float> k_pool(static_cast<size_t>(n_blocks * c.block_size * kvd)), v_pool(k_pool.size());
  for (float& x : k_pool) x = nd(rng);
  for (float& x : v_pool) x = nd(rng);
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);  // non-contiguous, out of order
  const std::vector<int32_t> table(ids.begin(), ids.begin() + n_seq_blocks);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  for (int64_t g = 0; g < c.n_kv_heads; ++g) {
    std::vector<float> q(static_cast<size_t>(c.head_dim)), out(q.size(), NAN);
    std::vector<float> scores(static_cast<size_t>(c.n_ctx) + 3,
                              NAN);  // the caller's scratch, a little longer
    for (float& x : q) x = nd(rng);
    cpu::paged_decode_attention(q.data(), k_pool.data(), v_pool.data(), out.data(), table, c.n_ctx,
                                c.block_size, c.n_kv_heads, g, c.head_dim, scale, scores);
    // Reference: gather position j's vectors by hand, softmax in float64.
    std::vector<double> s(static_cast<size_t>(c.n_ctx)), ref(static_cast<size_t>(c.head_dim), 0.0);
    auto at = [&](const std::vector<float>& pool, int64_t j) {
      const int64_t slot = table[static_cast<size_t>(j / c.block_size)] * c.block_size + j % c.block_size;
      return pool.data() + slot * kvd + g * c.head_dim;
    };
    double mx = -1e300, den = 0;
    for (int64_t j = 0; j < c.n_ctx; ++j) {
      double d = 0;
      for (int64_t e = 0; e < c.head_dim; ++e) d += static_cast<double>(q[static_cast<size_t>(e)]) * at(k_pool, j)[e];
      s[static_cast<size_t>(j)] = d * scale;
      mx = std::max(mx, d * scale);
    }
    for (double& x : s) den += (x = std::exp(x - mx));
    for (int64_t j = 0; j < c.n_ctx; ++j)
      for (int64_t e = 0; e < c.head_dim; ++e) ref[static_cast<size_t>(e)] += s[static_cast<size_t>(j)] / den * at(v_pool, j)[e];
    for (int64_t e = 0; e < c.head_dim; ++e) {
      ASSERT_NEAR(out[static_cast<size_t>(e)], ref[static_cast<size_t>(e)], 1e-5)
          << "n_ctx " << c.n_ctx << ", block size " << c.block_size << ", KV head " << g << ", element " << e;
    }
  }
}

TEST(Ch04Task5, CrossesNonContiguousBlocks) {
  check({37, 4, 3, 16}, 1);   // 10 blocks, the last one partial
  check({64, 16, 3, 64}, 2);  // SmolLM2's KV heads and head_dim
}

TEST(Ch04Task5, BlockSizeOneAndOneBigBlock) {
  check({23, 1, 2, 8}, 3);
  check({200, 256, 1, 32}, 4);
}

TEST(Ch04Task5, FirstTokenAttendsToItselfOnly) {
  check({1, 16, 3, 64}, 5);
}

TEST(Ch04Task5, LargeScoresStayFinite) {
  // Scores around 1e3: a softmax without the max subtraction overflows exp().
  std::vector<float> k(8 * 4, 0.0f), v(8 * 4);
  for (int j = 0; j < 8; ++j) {
    k[static_cast<size_t>(j * 4)] = 1000.0f + j;
    v[static_cast<size_t>(j * 4 + 1)] = static_cast<float>(j);
  }
  const std::vector<float> q = {1.0f, 0.0f, 0.0f, 0.0f};
  std::vector<float> out(4, NAN), scores(8);
  cpu::paged_decode_attention(q.data(), k.data(), v.data(), out.data(), std::vector<int32_t>{1, 0},
                              8, 4, 1, 0, 4, 1.0f, scores);
  for (float x : out) ASSERT_TRUE(std::isfinite(x));
  EXPECT_GT(out[1], 6.0f);  // weight concentrated on the largest score (position 7 -> v = 7)
}

TEST(Ch04Task5, ShortTableIsAnError) {
  std::vector<float> pool(64, 0.5f), q(4, 1.0f), out(4), scores(5);
  EXPECT_THROW(cpu::paged_decode_attention(q.data(), pool.data(), pool.data(), out.data(),
                                           std::vector<int32_t>{0}, 5, 4, 1, 0, 4, 0.5f, scores),
               InvalidArgument);
}

TEST(Ch04Task5, ShortScoresScratchIsAnError) {
  // The caller owns the scratch: one score per position, never fewer.
  std::vector<float> pool(64, 0.5f), q(4, 1.0f), out(4), scores(4);
  EXPECT_THROW(cpu::paged_decode_attention(q.data(), pool.data(), pool.data(), out.data(),
                                           std::vector<int32_t>{0, 1}, 5, 4, 1, 0, 4, 0.5f, scores),
               InvalidArgument);
}

}  // namespace
