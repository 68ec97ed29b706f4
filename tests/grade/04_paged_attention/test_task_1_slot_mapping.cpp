// Chapter 04, Task 1: the slot mapping from block table and position
// (exercises/04_paged_attention/slot_mapping.cpp).
#include <gtest/gtest.h>

#include <vector>

#include "lio/error.h"
#include "lio/forward_batch.h"

namespace {
using namespace lio;

std::vector<int32_t> slots(const std::vector<int32_t>& table, int64_t start, int64_t n, int64_t bs) {
  std::vector<int32_t> out(static_cast<size_t>(n), -1);
  compute_slot_mapping(table, start, bs, out);
  return out;
}

TEST(Ch04Task1, PositionsFollowANonContiguousTable) {
  // Logical blocks 0, 1, 2 live in physical blocks 7, 2, 9 (block size 4).
  const std::vector<int32_t> table = {7, 2, 9};
  EXPECT_EQ(slots(table, 0, 12, 4),
            (std::vector<int32_t>{28, 29, 30, 31, 8, 9, 10, 11, 36, 37, 38, 39}));
}

TEST(Ch04Task1, AChunkStartingMidBlock) {
  // A prefill chunk (or one decode row) starts where the computed tokens end.
  const std::vector<int32_t> table = {5, 0, 3};
  EXPECT_EQ(slots(table, 6, 4, 4), (std::vector<int32_t>{2, 3, 12, 13}));
  EXPECT_EQ(slots(table, 9, 1, 4), (std::vector<int32_t>{13}));
}

TEST(Ch04Task1, BlockSizeOneAndLargeBlocks) {
  EXPECT_EQ(slots({4, 1, 6}, 0, 3, 1), (std::vector<int32_t>{4, 1, 6}));
  EXPECT_EQ(slots({2}, 250, 3, 256), (std::vector<int32_t>{762, 763, 764}));
}

TEST(Ch04Task1, PositionPastTheTableIsAnError) {
  std::vector<int32_t> out(3);
  EXPECT_THROW(compute_slot_mapping(std::vector<int32_t>{1, 2}, 6, 4, out), InvalidArgument);  // needs block 2
  EXPECT_THROW(compute_slot_mapping(std::vector<int32_t>{1}, 0, 0, out), InvalidArgument);     // block size 0
}

}  // namespace
