// Chapter 04, Task 2: allocate / free / fork with reference counts
// (exercises/04_paged_attention/block_manager.cpp). Behaviour only: never which id was picked,
// except where the eviction ORDER is the behaviour asked for.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "lio/block_manager.h"
#include "lio/error.h"

namespace {
using namespace lio;

TEST(Ch04Task2, BlocksReturnToThePool) {
  BlockManager bm(10, 4);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(bm.allocate(a, 9));  // 3 blocks
  ASSERT_TRUE(bm.allocate(b, 4));  // 1 block
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(b.size(), 1u);
  std::set<int32_t> ids(a.begin(), a.end());
  ids.insert(b.begin(), b.end());
  EXPECT_EQ(ids.size(), 4u) << "a block was handed out twice";
  for (int32_t id : ids) {
    EXPECT_TRUE(id >= 0 && id < 10);
    EXPECT_EQ(bm.ref_count(id), 1);
  }
  EXPECT_EQ(bm.n_free_blocks(), 6);
  ASSERT_TRUE(bm.allocate(a, 13));  // grows by one block
  EXPECT_EQ(a.size(), 4u);
  bm.free(a);
  bm.free(b);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(bm.n_free_blocks(), 10);
  for (int32_t id = 0; id < 10; ++id) EXPECT_EQ(bm.ref_count(id), 0);
}

TEST(Ch04Task2, AllocationIsAllOrNothing) {
  BlockManager bm(4, 16);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(bm.allocate(a, 40));  // 3 blocks
  const std::vector<int32_t> before = b;
  EXPECT_FALSE(bm.allocate(b, 33));  // needs 3, 1 left
  EXPECT_EQ(b, before);
  EXPECT_EQ(bm.n_free_blocks(), 1);
  EXPECT_TRUE(bm.allocate(b, 16));
  EXPECT_EQ(bm.n_free_blocks(), 0);
  EXPECT_EQ(bm.allocate_block(), -1);
}

TEST(Ch04Task2, ForkSharesBlocksUntilTheLastHolderLeaves) {
  BlockManager bm(8, 4);
  std::vector<int32_t> parent;
  ASSERT_TRUE(bm.allocate(parent, 10));  // 3 blocks, the last one partial
  std::vector<int32_t> child = bm.fork(parent, 9);  // shares what positions 0..8 need
  ASSERT_EQ(child.size(), 3u);
  EXPECT_TRUE(std::equal(child.begin(), child.end(), parent.begin()));
  for (int32_t id : child) EXPECT_EQ(bm.ref_count(id), 2);
  EXPECT_EQ(bm.n_free_blocks(), 5) << "a fork takes no new blocks";
  bm.free(parent);
  EXPECT_EQ(bm.n_free_blocks(), 5) << "the child still holds every block";
  for (int32_t id : child) EXPECT_EQ(bm.ref_count(id), 1);
  bm.free(child);
  EXPECT_EQ(bm.n_free_blocks(), 8);
  std::vector<int32_t> small;
  ASSERT_TRUE(bm.allocate(small, 4));
  EXPECT_THROW(bm.fork(small, 5), InvalidArgument);  // the table holds 4 tokens' blocks only
}

TEST(Ch04Task2, RefAndUnrefCountHolders) {
  BlockManager bm(3, 2);
  const int32_t id = bm.allocate_block();
  ASSERT_GE(id, 0);
  EXPECT_EQ(bm.ref_count(id), 1);
  bm.ref(id);
  EXPECT_EQ(bm.ref_count(id), 2);
  bm.unref(id);
  bm.unref(id);
  EXPECT_EQ(bm.ref_count(id), 0);
  EXPECT_EQ(bm.n_free_blocks(), 3);
  EXPECT_THROW(bm.unref(id), InternalError) << "a double free must be caught";
  bm.ref(id);  // a free (cached) block can be taken back: it leaves the free list
  EXPECT_EQ(bm.ref_count(id), 1);
  EXPECT_EQ(bm.n_free_blocks(), 2);
  EXPECT_THROW(bm.ref(3), InvalidArgument);
}

TEST(Ch04Task2, EvictionOrderIsLeastRecentlyFreedThenLongestPrefix) {
  // A pool of 4: A holds 2 blocks, B holds 2. A finishes first, then B. The next allocations
  // must reuse A's blocks before B's (least recently used), and of A's, the one holding the
  // longer prefix (its last block) first.
  BlockManager bm(4, 4);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(bm.allocate(a, 8));
  ASSERT_TRUE(bm.allocate(b, 8));
  const std::vector<int32_t> a_ids = a, b_ids = b;
  bm.free(a);
  bm.free(b);
  EXPECT_EQ(bm.allocate_block(), a_ids[1]);
  EXPECT_EQ(bm.allocate_block(), a_ids[0]);
  EXPECT_EQ(bm.allocate_block(), b_ids[1]);
  EXPECT_EQ(bm.allocate_block(), b_ids[0]);
}

}  // namespace
