// The prefix-cache modes and the hash chain's bookkeeping (its lookup, hash_chain_match, is
// chapter 04's Task 4). The radix tree is radix_prefix_cache.cpp.
#include "lio/prefix_cache.h"

#include <algorithm>
#include <string>

#include "lio/error.h"

namespace lio {

const char* prefix_cache_mode_name(PrefixCacheMode mode) {
  switch (mode) {
    case PrefixCacheMode::Hash: return "hash";
    case PrefixCacheMode::Radix: return "radix";
    case PrefixCacheMode::None: break;
  }
  return "none";
}

std::unique_ptr<PrefixCache> make_prefix_cache(PrefixCacheMode mode, BlockManager& blocks) {
  std::unique_ptr<PrefixCache> cache;
  if (mode == PrefixCacheMode::Hash) cache = std::make_unique<HashPrefixCache>(blocks);
  if (mode == PrefixCacheMode::Radix) cache = std::make_unique<RadixPrefixCache>(blocks);
  blocks.set_prefix_cache(cache.get());
  return cache;
}

HashPrefixCache::HashPrefixCache(BlockManager& blocks) : blocks_(blocks) {
  index_.entries.resize(static_cast<size_t>(blocks.n_blocks()));
}

void HashPrefixCache::insert(std::span<const int32_t> tokens, int64_t n_computed, const GroupTables& tables,
                             const KvCacheCoordinator& kv, bool /*finished: only full blocks are ever cached*/) {
  for (size_t g = 0; g < tables.size(); ++g)
    insert_chain(tokens, n_computed, tables[g], group_chain_seed(static_cast<int64_t>(g)), kv.null_block());
}

void HashPrefixCache::insert_chain(std::span<const int32_t> tokens, int64_t n_computed,
                                   std::span<const int32_t> block_table, uint64_t seed, int32_t skip) {
  const int64_t bs = blocks_.block_size();
  const int64_t n_full = std::min<int64_t>(n_computed / bs, static_cast<int64_t>(block_table.size()));
  uint64_t parent = seed;
  for (int64_t k = 0; k < n_full; ++k) {
    const int32_t id = block_table[static_cast<size_t>(k)];
    if (id == skip) {  // a block that slid out of its window: the chain goes on without it
      parent = block_hash(parent, tokens.subspan(static_cast<size_t>(k * bs), static_cast<size_t>(bs)));
      continue;
    }
    HashChainIndex::Entry& e = index_.entries[static_cast<size_t>(id)];
    const std::span<const int32_t> block = tokens.subspan(static_cast<size_t>(k * bs), static_cast<size_t>(bs));
    if (e.cached && e.parent == parent && std::equal(block.begin(), block.end(), e.tokens.begin(), e.tokens.end())) {
      parent = e.hash;  // already findable (cached by this or another sequence)
      continue;
    }
    const uint64_t h = block_hash(parent, block);
    if (!index_.by_hash.contains(h)) {  // a twin computed elsewhere keeps the key (vLLM: first wins)
      e = {true, h, parent, std::vector<int32_t>(block.begin(), block.end())};
      index_.by_hash.emplace(h, id);
    }
    parent = h;
  }
}

uint64_t group_chain_seed(int64_t g) { return g == 0 ? 0 : 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(g); }

int64_t HashPrefixCache::match(std::span<const int32_t> tokens, GroupTables& tables, KvCacheCoordinator& kv) {
  LIO_CHECK(static_cast<int64_t>(tables.size()) == kv.n_groups(), "HashPrefixCache::match: one table per KV cache group");
  const int64_t bs = blocks_.block_size();
  const std::vector<int32_t> hit0 = hash_chain_match(index_, tokens, bs);  // Task 4
  const auto k0 = static_cast<int64_t>(hit0.size());
  // Each group's cached block at every position j < k0 (-1 where it is gone).
  std::vector<std::vector<int32_t>> ids(tables.size());
  ids[0] = hit0;
  for (size_t g = 1; g < tables.size(); ++g) {
    ids[g].assign(static_cast<size_t>(k0), -1);
    uint64_t parent = group_chain_seed(static_cast<int64_t>(g));
    for (int64_t j = 0; j < k0; ++j) {
      const std::span<const int32_t> block = tokens.subspan(static_cast<size_t>(j * bs), static_cast<size_t>(bs));
      const uint64_t h = block_hash(parent, block);
      const auto it = index_.by_hash.find(h);
      if (it != index_.by_hash.end()) {
        const HashChainIndex::Entry& e = index_.entries[static_cast<size_t>(it->second)];
        if (e.cached && e.parent == parent && std::equal(block.begin(), block.end(), e.tokens.begin(), e.tokens.end()))
          ids[g][static_cast<size_t>(j)] = it->second;
      }
      parent = h;
    }
  }
  int64_t k = k0;
  for (; k > 0; --k) {  // the longest hit every group can serve
    bool ok = true;
    for (size_t g = 0; g < tables.size() && ok; ++g)
      for (int64_t j = kv.first_kept_block(kv.window(static_cast<int64_t>(g)), k * bs); j < k && ok; ++j)
        ok = ids[g][static_cast<size_t>(j)] >= 0;
    if (ok) break;
  }
  for (size_t g = 0; g < tables.size() && k > 0; ++g) {
    const int64_t first = kv.first_kept_block(kv.window(static_cast<int64_t>(g)), k * bs);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t id = j < first ? kv.null_block() : ids[g][static_cast<size_t>(j)];
      blocks_.ref(id);  // a free cached block leaves the free list
      tables[g].push_back(id);
    }
  }
  return k * bs;
}

void HashPrefixCache::on_block_reused(int32_t id) {
  HashChainIndex::Entry& e = index_.entries[static_cast<size_t>(id)];
  if (!e.cached) return;
  const auto it = index_.by_hash.find(e.hash);
  if (it != index_.by_hash.end() && it->second == id) index_.by_hash.erase(it);
  e.cached = false;  // evicted: never a hit again
}

int64_t HashPrefixCache::evict(int64_t /*n_blocks*/) { return 0; }

}  // namespace lio
