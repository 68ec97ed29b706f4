// test_cuda_flash_host.cu — Flash-Decoding's key split as flash_attention's blocks compute it
// (kernels/cuda/flash_split.cuh), run on the HOST: for every key count and split count the ranges
// are whole tiles, disjoint, in order, cover [0, n_keys) exactly, and put key 0 in split 0 (the
// merge relies on that for a finite max). Runs on every machine, GPU or not.
#include <gtest/gtest.h>

#include <vector>

#include "flash_split.cuh"

namespace {

using lio::cuda::detail::flash_keys_per_split;
using lio::cuda::detail::flash_split_range;

constexpr int kTile = 32;

TEST(FlashSplitHost, RangesAreWholeTilesCoveringEveryKeyOnce) {
  for (const int n_splits : {1, 2, 3, 7, 64}) {
    for (int n_keys = 1; n_keys <= 3000; n_keys += (n_keys < 300 ? 1 : 97)) {
      std::vector<int> seen(static_cast<size_t>(n_keys), 0);
      int next = 0;  // ranges come in order
      for (int s = 0; s < n_splits; ++s) {
        int begin = -1, end = -1;
        flash_split_range(n_keys, n_splits, s, kTile, &begin, &end);
        ASSERT_LE(begin, end) << n_keys << " keys, split " << s << "/" << n_splits;
        ASSERT_EQ(begin, next) << n_keys << " keys, split " << s << "/" << n_splits;
        if (begin < end) {
          ASSERT_EQ(begin % kTile, 0) << "a split starts inside a tile";
          ASSERT_TRUE(end == n_keys || (end - begin) % kTile == 0) << "a split ends inside a tile";
        }
        for (int k = begin; k < end; ++k) ++seen[static_cast<size_t>(k)];
        next = end;
      }
      ASSERT_EQ(next, n_keys) << n_keys << " keys over " << n_splits << " splits: keys left over";
      for (int k = 0; k < n_keys; ++k) ASSERT_EQ(seen[static_cast<size_t>(k)], 1) << "key " << k;
      int b0 = -1, e0 = -1;
      flash_split_range(n_keys, n_splits, 0, kTile, &b0, &e0);
      EXPECT_EQ(b0, 0);
      EXPECT_GT(e0, 0) << "split 0 must hold key 0";
    }
  }
}

TEST(FlashSplitHost, KeysPerSplitBalancesLongContextsAndKeepsOneTileForShortOnes) {
  EXPECT_EQ(flash_keys_per_split(4096, 64, kTile), 64);    // 4,096 keys in 64 splits of 2 tiles
  EXPECT_EQ(flash_keys_per_split(4000, 64, kTile), 64);    // ceil(62.5) = 63 -> 2 tiles
  EXPECT_EQ(flash_keys_per_split(200, 64, kTile), kTile);  // short: one tile each, 7 splits busy
  EXPECT_EQ(flash_keys_per_split(1, 64, kTile), kTile);
  EXPECT_EQ(flash_keys_per_split(0, 64, kTile), kTile);   // no keys: still a whole tile
  EXPECT_EQ(flash_keys_per_split(1000, 1, kTile), 1024);  // no split: the whole range
  int begin = -1, end = -1;
  flash_split_range(200, 64, 63, kTile, &begin, &end);  // past the last key: empty at the end
  EXPECT_EQ(begin, 200);
  EXPECT_EQ(end, 200);
}

}  // namespace
