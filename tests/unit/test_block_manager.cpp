// BlockManager: the free list, growth one block per block_size tokens, frees, double frees.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "lio/block_manager.h"
#include "lio/error.h"

namespace {

TEST(BlockManager, AllocatesCeilTokensOverBlockSize) {
  lio::BlockManager bm(10, 4);
  std::vector<int32_t> table;
  ASSERT_TRUE(bm.allocate(table, 9));  // 9 tokens -> 3 blocks of 4
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(bm.n_free_blocks(), 7);
  ASSERT_TRUE(bm.allocate(table, 12));  // still 3 blocks
  EXPECT_EQ(table.size(), 3u);
  ASSERT_TRUE(bm.allocate(table, 13));  // the 13th token opens a 4th block
  EXPECT_EQ(table.size(), 4u);
  EXPECT_EQ(std::set<int32_t>(table.begin(), table.end()).size(), 4u) << "a block handed out twice";
}

TEST(BlockManager, RefusesWithoutChangingAnything) {
  lio::BlockManager bm(3, 16);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(bm.allocate(a, 40));  // 3 blocks
  EXPECT_FALSE(bm.can_allocate(b, 1));
  EXPECT_FALSE(bm.allocate(b, 1));
  EXPECT_TRUE(b.empty());
  EXPECT_FALSE(bm.allocate(a, 49));
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(bm.n_free_blocks(), 0);
}

TEST(BlockManager, FreeReturnsEveryBlockAndCatchesDoubleFree) {
  lio::BlockManager bm(8, 2);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(bm.allocate(a, 5));
  ASSERT_TRUE(bm.allocate(b, 6));
  EXPECT_EQ(bm.n_free_blocks(), 2);
  std::vector<int32_t> copy = a;
  bm.free(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(bm.n_free_blocks(), 5);
  EXPECT_THROW(bm.free(copy), lio::InternalError);
  bm.free(b);
  EXPECT_EQ(bm.n_free_blocks(), 8);
}

TEST(BlockManager, RejectsBadShapes) {
  EXPECT_THROW(lio::BlockManager(0, 16), lio::InvalidArgument);
  EXPECT_THROW(lio::BlockManager(4, 0), lio::InvalidArgument);
}

}  // namespace
