// Chapter 02, Task 1: the KV head a query head reads (exercises/02_gqa_mla/gqa.cpp).
#include <gtest/gtest.h>

#include <vector>

#include "lio/error.h"
#include "lio/gqa.h"

namespace {
using namespace lio;

TEST(Ch02Task1, SmolLM2GroupsOfThree) {
  // SmolLM2-135M: 9 query heads, 3 KV heads -> heads 0-2 read 0, 3-5 read 1, 6-8 read 2.
  const std::vector<int64_t> want = {0, 0, 0, 1, 1, 1, 2, 2, 2};
  for (int64_t h = 0; h < 9; ++h) EXPECT_EQ(kv_head_for_query_head(h, 9, 3), want[static_cast<size_t>(h)]) << "h=" << h;
}

TEST(Ch02Task1, Llama2_70bGroupsOfEight) {
  // 64 query heads, 8 KV heads: consecutive groups of 8, not h % 8 (interleaved is wrong).
  EXPECT_EQ(kv_head_for_query_head(0, 64, 8), 0);
  EXPECT_EQ(kv_head_for_query_head(7, 64, 8), 0);
  EXPECT_EQ(kv_head_for_query_head(8, 64, 8), 1);
  EXPECT_EQ(kv_head_for_query_head(9, 64, 8), 1);
  EXPECT_EQ(kv_head_for_query_head(63, 64, 8), 7);
}

TEST(Ch02Task1, MhaAndMqaAreTheEnds) {
  for (int64_t h = 0; h < 16; ++h) {
    EXPECT_EQ(kv_head_for_query_head(h, 16, 16), h) << "MHA: every head its own";
    EXPECT_EQ(kv_head_for_query_head(h, 16, 1), 0) << "MQA: every head reads head 0";
  }
}

TEST(Ch02Task1, EveryKvHeadServesTheSameNumberOfQueryHeads) {
  const int64_t n_heads = 32, n_kv = 4;
  std::vector<int> served(n_kv, 0);
  for (int64_t h = 0; h < n_heads; ++h) ++served[static_cast<size_t>(kv_head_for_query_head(h, n_heads, n_kv))];
  for (int64_t g = 0; g < n_kv; ++g) EXPECT_EQ(served[static_cast<size_t>(g)], 8) << "KV head " << g;
}

TEST(Ch02Task1, RejectsBadShapes) {
  EXPECT_THROW(kv_head_for_query_head(9, 9, 3), InvalidArgument);   // h past the last head
  EXPECT_THROW(kv_head_for_query_head(-1, 9, 3), InvalidArgument);
  EXPECT_THROW(kv_head_for_query_head(0, 9, 2), InvalidArgument);   // 9 heads in 2 groups
  EXPECT_THROW(kv_head_for_query_head(0, 9, 0), InvalidArgument);
}

}  // namespace
