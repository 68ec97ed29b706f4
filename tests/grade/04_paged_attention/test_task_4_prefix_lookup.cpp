// Chapter 04, Task 4: prefix lookup over the hash chain of full blocks
// (exercises/04_paged_attention/prefix_cache_hash.cpp, hash_chain_match). The index is built
// by hand here, as HashPrefixCache::insert builds it in the engine.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "lio/error.h"
#include "lio/prefix_cache.h"

namespace {
using namespace lio;

constexpr int64_t kBs = 4;

/// Registers block `id` holding `tokens` after a block whose chain hash is `parent`; returns
/// its chain hash.
uint64_t put(HashChainIndex& idx, int32_t id, uint64_t parent, std::vector<int32_t> tokens) {
  const uint64_t h = block_hash(parent, tokens);
  idx.entries[static_cast<size_t>(id)] = {true, h, parent, std::move(tokens)};
  idx.by_hash[h] = id;
  return h;
}

/// Tokens 0..11 cached in blocks 5, 2, 7 (a 12-token prefix, three full blocks).
HashChainIndex three_blocks() {
  HashChainIndex idx;
  idx.entries.resize(8);
  uint64_t h = put(idx, 5, 0, {0, 1, 2, 3});
  h = put(idx, 2, h, {4, 5, 6, 7});
  put(idx, 7, h, {8, 9, 10, 11});
  return idx;
}

std::vector<int32_t> iota(int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 0);
  return t;
}

TEST(Ch04Task4, LongestChainOfFullBlocksNeverTheLastToken) {
  const HashChainIndex idx = three_blocks();
  EXPECT_EQ(hash_chain_match(idx, iota(13), kBs), (std::vector<int32_t>{5, 2, 7}));
  // 12 tokens: the last one must be computed, so block 2 (tokens 8..11) cannot be a hit.
  EXPECT_EQ(hash_chain_match(idx, iota(12), kBs), (std::vector<int32_t>{5, 2}));
  EXPECT_EQ(hash_chain_match(idx, iota(9), kBs), (std::vector<int32_t>{5, 2}));
  EXPECT_EQ(hash_chain_match(idx, iota(7), kBs), (std::vector<int32_t>{5}));
  EXPECT_TRUE(hash_chain_match(idx, iota(4), kBs).empty());
}

TEST(Ch04Task4, StopsAtTheFirstMissAndTheChainCarriesThePrefix) {
  const HashChainIndex idx = three_blocks();
  std::vector<int32_t> t = iota(16);
  t[5] = 99;  // block 1 differs: only block 0 hits, block 2 cannot (its parent differs)
  EXPECT_EQ(hash_chain_match(idx, t, kBs), (std::vector<int32_t>{5}));
  t = iota(16);
  t[0] = 99;  // block 0 differs: blocks 1 and 2 hold the same tokens but another prefix
  EXPECT_TRUE(hash_chain_match(idx, t, kBs).empty());
}

TEST(Ch04Task4, AnEvictedBlockIsNeverAHit) {
  HashChainIndex idx = three_blocks();
  idx.entries[2].cached = false;  // block 2 was reused: its entry is stale even if a key remains
  EXPECT_EQ(hash_chain_match(idx, iota(13), kBs), (std::vector<int32_t>{5}));
  idx.by_hash.erase(idx.entries[5].hash);  // block 5 evicted: nothing hits
  EXPECT_TRUE(hash_chain_match(idx, iota(13), kBs).empty());
}

TEST(Ch04Task4, AHashCollisionIsNotAHit) {
  HashChainIndex idx = three_blocks();
  // Forge a collision: block 5's key now leads to an entry holding other tokens.
  idx.entries[5].tokens = {0, 1, 2, 42};
  EXPECT_TRUE(hash_chain_match(idx, iota(13), kBs).empty());
  // And one whose tokens match but whose parent is another prefix.
  idx = three_blocks();
  idx.entries[2].parent ^= 1;
  EXPECT_EQ(hash_chain_match(idx, iota(13), kBs), (std::vector<int32_t>{5}));
}

TEST(Ch04Task4, BadBlockSizeIsAnError) {
  const HashChainIndex idx = three_blocks();
  EXPECT_THROW(hash_chain_match(idx, iota(8), 0), InvalidArgument);
}

}  // namespace
