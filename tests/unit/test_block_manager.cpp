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

// Lecture note 003's worked example (its PagedKVCacheManager, section 3): a pool of 1,000 blocks of
// 16 tokens; requests of 200, 500 and 100 tokens take ceil(n / 16) = 13, 32 and 7 blocks, leaving
// 987, 955 and 948 free; when request 1 finishes, its 13 blocks come back: 961 free. The same
// numbers through LIO's BlockManager (docs/04_paged_attention.md, section 2).
TEST(BlockManager, LectureNote003WorkedExample) {
  lio::BlockManager bm(1000, 16);
  std::vector<int32_t> r1, r2, r3;
  ASSERT_TRUE(bm.allocate(r1, 200));
  EXPECT_EQ(r1.size(), 13u);
  EXPECT_EQ(bm.n_free_blocks(), 987);
  ASSERT_TRUE(bm.allocate(r2, 500));
  EXPECT_EQ(r2.size(), 32u);
  EXPECT_EQ(bm.n_free_blocks(), 955);
  ASSERT_TRUE(bm.allocate(r3, 100));
  EXPECT_EQ(r3.size(), 7u);
  EXPECT_EQ(bm.n_free_blocks(), 948);
  bm.free(r1);
  EXPECT_EQ(bm.n_free_blocks(), 961);
  // The note sizes blocks for the prompt only; decoding request 2 past 512 tokens needs a 33rd.
  ASSERT_TRUE(bm.allocate(r2, 513));
  EXPECT_EQ(r2.size(), 33u);
  EXPECT_EQ(bm.n_free_blocks(), 960);
}
