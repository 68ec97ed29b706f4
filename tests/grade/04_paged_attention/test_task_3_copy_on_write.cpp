// Chapter 04, Task 3: copy-on-write on append into a shared block
// (exercises/04_paged_attention/block_manager.cpp, append_slots). A toy pool of one int per
// slot stands in for K/V: copies are applied, then the new positions are written through the
// slot mapping, exactly as the engine does.
#include <gtest/gtest.h>

#include <vector>

#include "lio/block_manager.h"

namespace {
using namespace lio;

constexpr int64_t kBs = 4;

struct ToyPool {
  std::vector<int> slot;  // (n_blocks * kBs)
  explicit ToyPool(int64_t n_blocks) : slot(static_cast<size_t>(n_blocks * kBs), -1) {}
  void copy(const std::vector<BlockCopy>& copies) {
    for (const BlockCopy& c : copies)
      for (int64_t o = 0; o < kBs; ++o) slot[static_cast<size_t>(c.dst * kBs + o)] = slot[static_cast<size_t>(c.src * kBs + o)];
  }
  int& at(const std::vector<int32_t>& table, int64_t pos) {
    return slot[static_cast<size_t>(table[static_cast<size_t>(pos / kBs)] * kBs + pos % kBs)];
  }
  /// Writes `value + pos` at positions [from, to) of the sequence with `table`.
  void write(const std::vector<int32_t>& table, int64_t from, int64_t to, int value) {
    for (int64_t p = from; p < to; ++p) at(table, p) = value + static_cast<int>(p);
  }
};

TEST(Ch04Task3, ASharedBlockIsNeverWrittenInPlace) {
  BlockManager bm(8, kBs);
  ToyPool pool(8);
  std::vector<int32_t> parent;
  ASSERT_TRUE(bm.allocate(parent, 10));  // positions 0..9: blocks 0, 1 full, block 2 half
  pool.write(parent, 0, 10, 100);
  std::vector<int32_t> child = bm.fork(parent, 10);
  const std::vector<int32_t> parent_before = parent;

  std::vector<BlockCopy> copies;
  ASSERT_TRUE(bm.append_slots(child, 10, 1, copies));  // the child writes position 10
  for (int64_t k = 10 / kBs; k < static_cast<int64_t>(child.size()); ++k)
    EXPECT_EQ(bm.ref_count(child[static_cast<size_t>(k)]), 1) << "the child would write block " << k << " in place";
  pool.copy(copies);
  pool.write(child, 10, 11, 500);

  EXPECT_EQ(parent, parent_before) << "the parent's table must not change";
  for (int64_t p = 0; p < 10; ++p) {
    EXPECT_EQ(pool.at(parent, p), 100 + p) << "parent position " << p << " was overwritten";
    EXPECT_EQ(pool.at(child, p), 100 + p) << "child lost shared position " << p;
  }
  EXPECT_EQ(pool.at(child, 10), 510);
  // The parent now writes ITS position 10: its block is no longer shared, so no copy.
  std::vector<BlockCopy> parent_copies;
  ASSERT_TRUE(bm.append_slots(parent, 10, 1, parent_copies));
  EXPECT_TRUE(parent_copies.empty()) << "a block held once is written in place, without a copy";
  pool.copy(parent_copies);
  pool.write(parent, 10, 11, 900);
  EXPECT_EQ(pool.at(parent, 10), 910);
  EXPECT_EQ(pool.at(child, 10), 510);
}

TEST(Ch04Task3, FullSharedBlocksStayShared) {
  BlockManager bm(8, kBs);
  std::vector<int32_t> parent;
  ASSERT_TRUE(bm.allocate(parent, 8));  // two full blocks
  std::vector<int32_t> child = bm.fork(parent, 8);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(bm.append_slots(child, 8, 3, copies));  // positions 8..10: a new block
  EXPECT_TRUE(copies.empty()) << "nothing shared is written: no copy";
  ASSERT_EQ(child.size(), 3u);
  EXPECT_EQ(child[0], parent[0]);
  EXPECT_EQ(child[1], parent[1]);
  EXPECT_EQ(bm.ref_count(child[2]), 1);
  EXPECT_EQ(bm.n_free_blocks(), 5);
}

TEST(Ch04Task3, AppendIsAllOrNothing) {
  BlockManager bm(3, kBs);
  std::vector<int32_t> parent;
  ASSERT_TRUE(bm.allocate(parent, 6));  // 2 blocks, the second partial
  std::vector<int32_t> child = bm.fork(parent, 6);
  std::vector<int32_t> other;
  ASSERT_TRUE(bm.allocate(other, 1));  // the pool is now full
  const std::vector<int32_t> before = child;
  std::vector<BlockCopy> copies;
  EXPECT_FALSE(bm.append_slots(child, 6, 1, copies)) << "the copy needs a block and none is free";
  EXPECT_EQ(child, before);
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(bm.ref_count(child[1]), 2);
  bm.free(other);
  EXPECT_TRUE(bm.append_slots(child, 6, 1, copies));
  EXPECT_EQ(copies.size(), 1u);
}

TEST(Ch04Task3, DecodeStepsInAnOwnedBlockNeedNoCopies) {
  BlockManager bm(4, kBs);
  std::vector<int32_t> seq;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(bm.append_slots(seq, 0, 5, copies));  // a prompt of 5
  for (int64_t n = 5; n < 16; ++n) ASSERT_TRUE(bm.append_slots(seq, n, 1, copies));  // 11 decode steps
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(seq.size(), 4u);
  EXPECT_FALSE(bm.append_slots(seq, 16, 1, copies)) << "the pool of 4 blocks is full";
  EXPECT_EQ(seq.size(), 4u);
}

}  // namespace
