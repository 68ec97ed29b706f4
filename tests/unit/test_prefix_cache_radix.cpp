// RadixPrefixCache: matching to the token (partial blocks included), splits, the tree's one hold
// per block, LRU eviction of what no sequence holds, and a simulated engine whose every hit is
// checked against the K/V content it should find.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "lio/block_manager.h"
#include "lio/prefix_cache.h"

namespace {

constexpr int64_t kBlockSize = 16;

/// `n` token ids drawn from [lo, hi) (fixed seed per call site). Ranges that do not overlap
/// make two sequences diverge exactly where their draws start.
std::vector<int32_t> random_tokens(size_t n, uint32_t seed, int32_t lo = 0, int32_t hi = 1000) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi - 1);
  std::vector<int32_t> tokens(n);
  for (auto& t : tokens) t = dist(rng);
  return tokens;
}

std::vector<int32_t> concat(std::span<const int32_t> a, std::span<const int32_t> b) {
  std::vector<int32_t> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

std::vector<int32_t> head(std::span<const int32_t> tokens, size_t n) {
  return {tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n)};
}

/// KV slot of `position` in `table`.
int64_t slot_of(std::span<const int32_t> table, int64_t position, int64_t block_size = kBlockSize) {
  return table[static_cast<size_t>(position / block_size)] * block_size + position % block_size;
}

/// A sequence that computed all of `tokens` into fresh blocks, was inserted as finished and
/// freed its table: afterwards only the tree holds the blocks. Returns the table it used.
std::vector<int32_t> insert_finished(lio::BlockManager& bm, lio::RadixPrefixCache& cache,
                                     std::span<const int32_t> tokens) {
  std::vector<int32_t> table;
  EXPECT_TRUE(bm.allocate(table, static_cast<int64_t>(tokens.size())));
  cache.insert(tokens, static_cast<int64_t>(tokens.size()), table, true);
  const std::vector<int32_t> used = table;
  bm.free(table);
  return used;
}

/// match() into a fresh table, then drops the sequence's holds; returns the tokens matched.
int64_t match_and_free(lio::BlockManager& bm, lio::RadixPrefixCache& cache,
                       std::span<const int32_t> tokens) {
  std::vector<int32_t> table;
  const int64_t n = cache.match(tokens, table);
  bm.free(table);
  return n;
}

// ---- match --------------------------------------------------------------------------------

TEST(RadixPrefixCache, MatchOnEmptyTreeReturnsZero) {
  lio::BlockManager bm(8, kBlockSize);
  lio::RadixPrefixCache cache(bm);
  std::vector<int32_t> table;
  EXPECT_EQ(cache.match(random_tokens(10, 1), table), 0);
  EXPECT_TRUE(table.empty());
  EXPECT_EQ(cache.match({}, table), 0);
  EXPECT_EQ(cache.n_nodes(), 0);
  EXPECT_EQ(bm.n_free_blocks(), 8);
}

TEST(RadixPrefixCache, FinishedInsertIsMatchedWithTheInsertersSlots) {
  lio::BlockManager bm(32, kBlockSize);
  lio::RadixPrefixCache cache(bm);
  const auto a = random_tokens(40, 2);
  const auto table_a = insert_finished(bm, cache, a);
  EXPECT_EQ(cache.n_cached_tokens(), 40);

  const auto prompt = concat(a, random_tokens(10, 3, 1000, 2000));
  std::vector<int32_t> table;
  ASSERT_EQ(cache.match(prompt, table), 40);
  ASSERT_EQ(static_cast<int64_t>(table.size()), bm.blocks_for(40));
  for (int64_t p = 0; p < 40; ++p)
    EXPECT_EQ(slot_of(table, p), slot_of(table_a, p)) << "position " << p;
  for (const int32_t id : table) EXPECT_EQ(bm.ref_count(id), 2) << "tree + the matching sequence";
  bm.free(table);
}

TEST(RadixPrefixCache, NeverMatchesTheLastPromptToken) {
  lio::BlockManager bm(32, kBlockSize);
  lio::RadixPrefixCache cache(bm);
  const auto a = random_tokens(40, 4);
  insert_finished(bm, cache, a);
  EXPECT_EQ(match_and_free(bm, cache, a), 39);
  EXPECT_EQ(match_and_free(bm, cache, head(a, 25)), 24);
  EXPECT_EQ(match_and_free(bm, cache, head(a, 1)), 0);
}

TEST(RadixPrefixCache, DivergingPromptSplitsANodeAndBothBranchesMatch) {
  lio::BlockManager bm(32, kBlockSize);
  lio::RadixPrefixCache cache(bm);
  const auto a = random_tokens(48, 5);
  const auto table_a = insert_finished(bm, cache, a);
  ASSERT_EQ(cache.n_nodes(), 1);

  // B shares A's first two blocks, then goes its own way: it matches them and computes the rest.
  const auto b = concat(head(a, 32), random_tokens(16, 6, 1000, 2000));
  std::vector<int32_t> table_b;
  ASSERT_EQ(cache.match(b, table_b), 32);
  ASSERT_TRUE(bm.allocate(table_b, 48));
  cache.insert(b, 48, table_b, true);
  const std::vector<int32_t> used_b = table_b;
  bm.free(table_b);
  EXPECT_EQ(cache.n_nodes(), 3) << "shared head + two branches";
  EXPECT_EQ(cache.n_cached_tokens(), 32 + 16 + 16);

  const auto tail = random_tokens(5, 7, 2000, 3000);
  std::vector<int32_t> table;
  ASSERT_EQ(cache.match(concat(a, tail), table), 48);
  for (int64_t p = 0; p < 48; ++p)
    EXPECT_EQ(slot_of(table, p), slot_of(table_a, p)) << "A, position " << p;
  bm.free(table);
  ASSERT_EQ(cache.match(concat(b, tail), table), 48);
  for (int64_t p = 0; p < 48; ++p)
    EXPECT_EQ(slot_of(table, p), slot_of(used_b, p)) << "B, position " << p;
  bm.free(table);
}

TEST(RadixPrefixCache, MatchesIntoAPartialLastBlock) {
  lio::BlockManager bm(32, kBlockSize);
  lio::RadixPrefixCache cache(bm);
  const auto a = random_tokens(20, 8);
  const auto table_a = insert_finished(bm, cache, a);
  const auto prompt = concat(a, random_tokens(10, 9, 1000, 2000));
  std::vector<int32_t> table;
  ASSERT_EQ(cache.match(prompt, table), 20);
  ASSERT_EQ(table.size(), 2u);
  EXPECT_EQ(table[1], table_a[1]) << "the partial block holding positions 16..19";
  EXPECT_EQ(bm.ref_count(table[1]), 2) << "shared: the sequence must copy it before writing";
  bm.free(table);
}

TEST(RadixPrefixCache, WhereTwoSequencesMeetInsideABlockTheDeeperBlockServesTheIndex) {
  // A leaves positions 16..19 in its block Y. B matches them, copies Y to Y' before writing
  // position 20 (copy-on-write), then computes 20..39 into Y' and Z. The tree keeps A's slots
  // for 16..19 and takes B's from 20 on, so block index 1 is split between Y and Y'. Y' holds
  // 16..19 too (copied), so a later match takes Y' for the whole index and goes on to 40:
  // reuse keeps growing turn after turn in a multi-turn chat.
  lio::BlockManager bm(32, kBlockSize);
  lio::RadixPrefixCache cache(bm);
  const auto a = random_tokens(20, 10);
  const auto table_a = insert_finished(bm, cache, a);
  const auto b = concat(a, random_tokens(20, 11, 1000, 2000));
  std::vector<int32_t> table_b;
  ASSERT_EQ(cache.match(b, table_b), 20);
  bm.unref(table_b[1]);  // copy-on-write by hand: drop Y, take a fresh Y'
  table_b.pop_back();
  ASSERT_TRUE(bm.allocate(table_b, 40));
  ASSERT_NE(table_b[1], table_a[1]);
  const std::vector<int32_t> b_blocks = table_b;
  cache.insert(b, 40, table_b, true);
  bm.free(table_b);
  EXPECT_EQ(cache.n_cached_tokens(), 40);

  std::vector<int32_t> table;
  ASSERT_EQ(cache.match(concat(b, random_tokens(4, 12, 2000, 3000)), table), 40);
  EXPECT_EQ(table, b_blocks);
  bm.free(table);
}

// ---- insert -------------------------------------------------------------------------------

TEST(RadixPrefixCache, RunningInsertCachesOnlyFullBlocks) {
  lio::BlockManager bm(32, kBlockSize);
  lio::RadixPrefixCache cache(bm);
  const auto tokens = random_tokens(50, 13);
  std::vector<int32_t> table;
  ASSERT_TRUE(bm.allocate(table, 40));
  cache.insert(tokens, 40, table, false);
  EXPECT_EQ(cache.n_cached_tokens(), 32);
  EXPECT_EQ(bm.ref_count(table[2]), 1) << "the block still being written is not the tree's";
  EXPECT_EQ(match_and_free(bm, cache, concat(tokens, random_tokens(3, 14, 1000, 2000))), 32);

  // Every engine step inserts again: nothing new until a block fills.
  for (int step = 0; step < 3; ++step) cache.insert(tokens, 41 + step, table, false);
  EXPECT_EQ(cache.n_cached_tokens(), 32);
  EXPECT_EQ(cache.n_nodes(), 1);

  ASSERT_TRUE(bm.allocate(table, 50));
  cache.insert(tokens, 49, table, false);
  EXPECT_EQ(cache.n_cached_tokens(), 48);
  EXPECT_EQ(cache.n_nodes(), 1) << "a running sequence extends its own leaf";
  cache.insert(tokens, 50, table, true);
  EXPECT_EQ(cache.n_cached_tokens(), 50);
  bm.free(table);
  EXPECT_EQ(bm.n_free_blocks(), 32 - 4);
}

TEST(RadixPrefixCache, TreeHoldsEachBlockOnceAndMatchAddsAHolder) {
  lio::BlockManager bm(32, kBlockSize);
  lio::RadixPrefixCache cache(bm);
  const auto a = random_tokens(40, 15);
  std::vector<int32_t> table_a;
  ASSERT_TRUE(bm.allocate(table_a, 40));
  cache.insert(a, 40, table_a, false);
  cache.insert(a, 40, table_a, false);
  cache.insert(a, 40, table_a, true);
  // C diverges inside A's block 1 (at 20): the split leaves that block used by two nodes.
  const auto c = concat(head(a, 20), random_tokens(12, 16, 1000, 2000));
  std::vector<int32_t> table_c;
  ASSERT_TRUE(bm.allocate(table_c, 32));
  cache.insert(c, 32, table_c, true);
  EXPECT_EQ(cache.n_nodes(), 3);
  const std::vector<int32_t> blocks_a = table_a, blocks_c = table_c;
  bm.free(table_a);
  bm.free(table_c);
  for (const int32_t id : blocks_a) EXPECT_EQ(bm.ref_count(id), 1) << "block " << id;
  EXPECT_EQ(bm.ref_count(blocks_c[1]), 1);
  EXPECT_EQ(bm.ref_count(blocks_c[0]), 0) << "C's positions 0..19 are A's in the tree";

  std::vector<int32_t> table;
  ASSERT_EQ(cache.match(a, table), 39);
  for (const int32_t id : table) EXPECT_EQ(bm.ref_count(id), 2);
  bm.free(table);
  for (const int32_t id : blocks_a) EXPECT_EQ(bm.ref_count(id), 1);
}

// ---- evict --------------------------------------------------------------------------------

TEST(RadixPrefixCache, EvictTakesTheLeastRecentlyUsedLeafFirst) {
  lio::BlockManager bm(16, kBlockSize);
  lio::RadixPrefixCache cache(bm);
  const auto a = random_tokens(32, 17, 0, 1000);
  const auto b = random_tokens(32, 18, 1000, 2000);
  const auto c = random_tokens(32, 19, 2000, 3000);
  insert_finished(bm, cache, a);
  insert_finished(bm, cache, b);
  insert_finished(bm, cache, c);
  const auto more = random_tokens(2, 20, 5000, 6000);
  EXPECT_EQ(match_and_free(bm, cache, concat(a, more)), 32);  // A is now the most recent
  EXPECT_EQ(cache.n_evictable(), 6);

  EXPECT_EQ(cache.evict(2), 2);
  EXPECT_EQ(bm.n_free_blocks(), 16 - 4);
  EXPECT_EQ(cache.n_nodes(), 2);
  // One block at a time from the end of the least recently used leaf (C, then A).
  EXPECT_EQ(cache.evict(1), 1);
  EXPECT_EQ(cache.n_cached_tokens(), 32 + 16);
  EXPECT_EQ(match_and_free(bm, cache, concat(b, more)), 0);
  EXPECT_EQ(match_and_free(bm, cache, concat(c, more)), 16);
  EXPECT_EQ(match_and_free(bm, cache, concat(a, more)), 32);
}

TEST(RadixPrefixCache, ADivergingInsertDoesNotRefreshTheBranchItLeft) {
  lio::BlockManager bm(16, kBlockSize);
  lio::RadixPrefixCache cache(bm);
  const auto a = random_tokens(48, 34, 0, 1000);
  const auto c = random_tokens(32, 35, 1000, 2000);
  insert_finished(bm, cache, a);
  insert_finished(bm, cache, c);
  insert_finished(bm, cache, concat(head(a, 32), random_tokens(16, 36, 2000, 3000)));  // after C
  EXPECT_EQ(cache.evict(1), 1);
  const auto more = random_tokens(2, 37, 5000, 6000);
  EXPECT_EQ(match_and_free(bm, cache, concat(a, more)), 32) << "A's tail was the oldest leaf";
  EXPECT_EQ(match_and_free(bm, cache, concat(c, more)), 32);
}

TEST(RadixPrefixCache, EvictNeverFreesABlockASequenceHolds) {
  lio::BlockManager bm(16, kBlockSize);
  lio::RadixPrefixCache cache(bm);
  const auto a = random_tokens(32, 21);
  const auto table_a = insert_finished(bm, cache, a);

  std::vector<int32_t> whole;
  ASSERT_EQ(cache.match(a, whole), 31);
  EXPECT_EQ(cache.n_evictable(), 0);
  EXPECT_EQ(cache.evict(100), 0);
  for (const int32_t id : table_a) EXPECT_EQ(bm.ref_count(id), 2);
  bm.free(whole);

  // A sequence holding only the first block: the unheld tail can go, the head stays.
  std::vector<int32_t> first;
  ASSERT_EQ(cache.match(concat(head(a, 16), random_tokens(4, 22, 1000, 2000)), first), 16);
  EXPECT_EQ(cache.n_evictable(), 1);
  EXPECT_EQ(cache.evict(100), 1);
  EXPECT_EQ(bm.ref_count(table_a[0]), 2);
  EXPECT_EQ(bm.ref_count(table_a[1]), 0);
  EXPECT_EQ(cache.n_cached_tokens(), 16);
  bm.free(first);
  EXPECT_EQ(cache.evict(100), 1);
  EXPECT_EQ(bm.n_free_blocks(), 16);
}

TEST(RadixPrefixCache, NEvictableSkipsAncestorsOfAHeldNode) {
  // A cached 40 tokens; I computed A's first 32 itself (its own blocks) and runs on. The tree
  // keeps A's slots for those 32 and hangs A's tail and I's third block below them. A's first
  // two blocks have no holder but the tree, yet they cannot go while I's node below is held;
  // A's tail can.
  lio::BlockManager bm(16, kBlockSize);
  lio::RadixPrefixCache cache(bm);
  const auto i_tokens = random_tokens(48, 32);
  insert_finished(bm, cache, concat(head(i_tokens, 32), random_tokens(8, 33, 1000, 2000)));
  std::vector<int32_t> table_i;
  ASSERT_TRUE(bm.allocate(table_i, 48));
  cache.insert(i_tokens, 48, table_i, false);
  EXPECT_EQ(cache.n_nodes(), 3);
  EXPECT_EQ(cache.n_evictable(), 1);
  EXPECT_EQ(cache.evict(100), 1);
  EXPECT_EQ(cache.n_cached_tokens(), 48);
  bm.free(table_i);
  EXPECT_EQ(cache.n_evictable(), 3);
  EXPECT_EQ(cache.evict(100), 3);
}

TEST(RadixPrefixCache, EvictingEverythingReturnsEveryBlock) {
  lio::BlockManager bm(32, kBlockSize);
  lio::RadixPrefixCache cache(bm);
  const auto a = random_tokens(40, 23);
  insert_finished(bm, cache, a);
  insert_finished(bm, cache,
                  concat(head(a, 20), random_tokens(30, 24, 1000, 2000)));  // splits mid-block
  insert_finished(bm, cache,
                  concat(head(a, 32), random_tokens(7, 25, 2000, 3000)));  // splits at a boundary
  insert_finished(bm, cache, random_tokens(17, 26, 3000, 4000));
  std::vector<int32_t> running;  // a sequence still running on a cached prefix
  ASSERT_EQ(cache.match(concat(a, random_tokens(3, 27, 5000, 6000)), running), 40);

  const int64_t n_evictable = cache.n_evictable();
  EXPECT_EQ(cache.evict(1000), n_evictable) << "n_evictable is exact";
  EXPECT_GT(cache.n_nodes(), 0) << "the running sequence's path stays";
  bm.free(running);
  // Read before evicting: the order in which a call's arguments are evaluated is unspecified
  // (GCC happened to take the right one first, Clang takes the left).
  const int64_t held_by_tree = bm.n_used_blocks();
  EXPECT_EQ(cache.evict(1000), held_by_tree);
  EXPECT_EQ(cache.n_nodes(), 0);
  EXPECT_EQ(cache.n_cached_tokens(), 0);
  EXPECT_EQ(bm.n_free_blocks(), bm.n_blocks());
}

TEST(RadixPrefixCache, EvictedPrefixIsNotMatchedAgain) {
  lio::BlockManager bm(16, kBlockSize);
  lio::RadixPrefixCache cache(bm);
  const auto a = random_tokens(40, 28);
  insert_finished(bm, cache, a);
  const auto prompt = concat(a, random_tokens(5, 29, 1000, 2000));
  EXPECT_EQ(match_and_free(bm, cache, prompt), 40);
  EXPECT_EQ(cache.evict(1000), 3);
  std::vector<int32_t> table;
  EXPECT_EQ(cache.match(prompt, table), 0);
  EXPECT_TRUE(table.empty());
}

TEST(RadixPrefixCache, AllocationEvictsThroughTheBlockManager) {
  lio::BlockManager bm(4, kBlockSize);
  lio::RadixPrefixCache cache(bm);
  bm.set_prefix_cache(&cache);
  const auto a = random_tokens(64, 30);
  insert_finished(bm, cache, a);
  EXPECT_EQ(bm.n_free_blocks(), 0);
  EXPECT_EQ(bm.n_available_blocks(), 4);
  std::vector<int32_t> table;
  ASSERT_TRUE(bm.allocate(table, 16));
  EXPECT_EQ(cache.n_cached_tokens(), 48) << "one block evicted, from the end";
  bm.free(table);
  EXPECT_EQ(match_and_free(bm, cache, a), 48);
}

TEST(RadixPrefixCache, DestructorReleasesTheTreesHolds) {
  lio::BlockManager bm(8, kBlockSize);
  {
    lio::RadixPrefixCache cache(bm);
    bm.set_prefix_cache(&cache);
    insert_finished(bm, cache, random_tokens(40, 31));
    EXPECT_EQ(bm.n_free_blocks(), 5);
  }
  EXPECT_EQ(bm.n_free_blocks(), 8);
  EXPECT_EQ(bm.prefix_cache(), nullptr) << "a destroyed cache detaches itself";
}

// ---- a simulated engine -------------------------------------------------------------------

/// Hash of tokens[0, p] for every p: what the K/V at position p depends on.
std::vector<uint64_t> prefix_hashes(std::span<const int32_t> tokens) {
  std::vector<uint64_t> h(tokens.size());
  uint64_t x = 1469598103934665603ull;
  for (size_t p = 0; p < tokens.size(); ++p) {
    x = (x ^ static_cast<uint64_t>(tokens[p] + 1)) * 1099511628211ull;
    h[p] = x;
  }
  return h;
}

TEST(RadixPrefixCache, EveryHitFindsTheKvItsPrefixWrote) {
  // Sequences share a few "system prompts", continue earlier conversations or start fresh; each
  // is matched, copied-on-write, computed block by block with an insert every step, and
  // finished. `kv[slot]` records the prefix hash written there, so a hit that maps a position to
  // a slot holding another prefix's K/V fails.
  constexpr int64_t kBs = 4;
  constexpr int64_t kBlocks = 96;
  lio::BlockManager bm(kBlocks, kBs);
  lio::RadixPrefixCache cache(bm);
  bm.set_prefix_cache(&cache);
  std::vector<uint64_t> kv(static_cast<size_t>(kBlocks * kBs), 0);
  std::mt19937 rng(1234);
  const std::vector<std::vector<int32_t>> systems = {random_tokens(13, 40), random_tokens(24, 41),
                                                     random_tokens(6, 42)};
  std::vector<std::vector<int32_t>> finished;
  int64_t n_hit = 0;

  for (int request = 0; request < 300; ++request) {
    std::vector<int32_t> tokens;
    const int kind = static_cast<int>(rng() % 3);
    if (kind == 0 && !finished.empty()) {
      tokens = finished[rng() % finished.size()];
    } else if (kind == 1) {
      tokens = systems[rng() % systems.size()];
    }
    const auto suffix = random_tokens(1 + rng() % 12, static_cast<uint32_t>(rng()));
    tokens = concat(tokens, suffix);
    const auto hashes = prefix_hashes(tokens);

    std::vector<int32_t> table;
    const int64_t n_matched = cache.match(tokens, table);
    ASSERT_LT(n_matched, static_cast<int64_t>(tokens.size()));
    ASSERT_EQ(static_cast<int64_t>(table.size()), bm.blocks_for(n_matched));
    for (int64_t p = 0; p < n_matched; ++p) {
      ASSERT_EQ(kv[static_cast<size_t>(slot_of(table, p, kBs))], hashes[static_cast<size_t>(p)])
          << "request " << request << " position " << p;
    }
    n_hit += n_matched;

    // Compute the rest a few tokens per step, copying a shared block before writing into it.
    int64_t n_computed = n_matched;
    bool ok = true;
    while (ok && n_computed < static_cast<int64_t>(tokens.size())) {
      const int64_t n_new =
          std::min<int64_t>(1 + rng() % 5, static_cast<int64_t>(tokens.size()) - n_computed);
      const auto k = static_cast<size_t>(n_computed / kBs);
      if (n_computed % kBs != 0 && bm.ref_count(table[k]) > 1) {
        std::vector<int32_t> fresh;
        if (!bm.allocate(fresh, 1)) break;
        for (int64_t o = 0; o < kBs; ++o)
          kv[static_cast<size_t>(fresh[0] * kBs + o)] = kv[static_cast<size_t>(table[k] * kBs + o)];
        bm.unref(table[k]);
        table[k] = fresh[0];
      }
      ok = bm.allocate(table, n_computed + n_new);
      if (!ok) break;
      for (int64_t p = n_computed; p < n_computed + n_new; ++p) {
        kv[static_cast<size_t>(slot_of(table, p, kBs))] = hashes[static_cast<size_t>(p)];
      }
      n_computed += n_new;
      cache.insert(tokens, n_computed, table, false);
    }
    cache.insert(tokens, n_computed, table, true);
    bm.free(table);
    if (n_computed == static_cast<int64_t>(tokens.size()) && tokens.size() < 60)
      finished.push_back(tokens);
    if (request % 50 == 49) {
      const int64_t n_evictable = cache.n_evictable();
      ASSERT_EQ(cache.evict(n_evictable + 1), n_evictable) << "request " << request;
      ASSERT_EQ(bm.n_free_blocks(), kBlocks);
    }
  }
  EXPECT_GT(n_hit, 0) << "the workload must produce hits";
}

}  // namespace
