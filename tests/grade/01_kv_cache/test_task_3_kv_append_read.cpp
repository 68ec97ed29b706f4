// Chapter 01, Task 3: append one step's K/V and read the cached prefix
// (exercises/01_kv_cache/kv_cache_ops.cpp).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "configs.h"
#include "lio/error.h"
#include "lio/kv_cache.h"

namespace {
using namespace lio;

ModelConfig tiny() {
  ModelConfig c = grade::make_config(3, 4, 2, 8);  // kv_dim = 16
  c.context_length = 64;
  return c;
}

std::vector<float> random_vec(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(Ch01Task3, AppendedStepsReadBackInOrder) {
  KvCache cache(tiny(), 10);
  std::mt19937 rng(3);
  std::vector<std::vector<float>> ks, vs;
  for (int pos = 0; pos < 7; ++pos) {
    ks.push_back(random_vec(rng, 16));
    vs.push_back(random_vec(rng, 16));
    cache.write(1, pos, ks.back().data(), vs.back().data());
  }
  auto kp = cache.key_prefix(1, 7);
  auto vp = cache.value_prefix(1, 7);
  ASSERT_EQ(kp.size(), 7u * 16u);
  ASSERT_EQ(vp.size(), 7u * 16u);
  for (int pos = 0; pos < 7; ++pos)
    for (int i = 0; i < 16; ++i) {
      EXPECT_EQ(kp[pos * 16 + i], ks[pos][i]) << "key pos " << pos;
      EXPECT_EQ(vp[pos * 16 + i], vs[pos][i]) << "value pos " << pos;
    }
}

TEST(Ch01Task3, LayersAreIndependent) {
  KvCache cache(tiny(), 4);
  std::vector<float> a(16, 1.5f), b(16, -2.0f);
  cache.write(0, 2, a.data(), b.data());
  cache.write(2, 2, b.data(), a.data());
  EXPECT_EQ(cache.key_prefix(0, 3)[2 * 16 + 5], 1.5f);
  EXPECT_EQ(cache.key_prefix(2, 3)[2 * 16 + 5], -2.0f);
  EXPECT_EQ(cache.value_prefix(0, 3)[2 * 16], -2.0f);
  EXPECT_EQ(cache.value_prefix(2, 3)[2 * 16], 1.5f);
}

TEST(Ch01Task3, PrefixIsAViewOfTheCache) {
  KvCache cache(tiny(), 8);
  std::vector<float> k(16, 0.25f), v(16, 0.75f);
  cache.write(0, 0, k.data(), v.data());
  auto before = cache.key_prefix(0, 1);
  k.assign(16, 9.0f);
  cache.write(0, 0, k.data(), v.data());  // overwrite position 0
  EXPECT_EQ(before[3], 9.0f);             // the span sees the cache, not a copy
  EXPECT_EQ(cache.key_prefix(0, 0).size(), 0u);
  EXPECT_EQ(cache.value_prefix(0, 8).size(), 8u * 16u);
}

TEST(Ch01Task3, RejectsOutOfRange) {
  KvCache cache(tiny(), 4);
  std::vector<float> k(16, 1.0f);
  EXPECT_THROW(cache.write(0, 4, k.data(), k.data()), InvalidArgument);
  EXPECT_THROW(cache.write(0, -1, k.data(), k.data()), InvalidArgument);
  EXPECT_THROW(cache.write(3, 0, k.data(), k.data()), InvalidArgument);
  EXPECT_THROW(cache.key_prefix(0, 5), InvalidArgument);
  EXPECT_THROW(cache.value_prefix(-1, 1), InvalidArgument);
}

}  // namespace
