// prefix_cache.h — reusing the K/V of a prompt prefix another request already computed.
//
// Two ways behind one interface (`--prefix-cache none|hash|radix`):
// - HashPrefixCache: vLLM's automatic prefix caching (docs/design/prefix_caching.md;
//   vllm/v1/core/block_pool.py). Every FULL block is keyed by a hash chain,
//   h_k = xxh64(h_{k-1} || token ids of block k), so equal keys mean equal whole prefixes. Cached
//   blocks hold no extra reference: a finished sequence's blocks sit on the BlockManager's free
//   list with their content until allocation reuses them (least recently used first).
// - RadixPrefixCache: SGLang's RadixAttention (Zheng et al. 2024; python/sglang/srt/mem_cache/
//   radix_cache.py): a radix tree over token ids whose edges carry the slots of their tokens.
//   It matches to the token, partial blocks included (the shared partial block is then
//   copied on the first write: BlockManager::append_slots), holds one reference on every block
//   it caches, and evicts least-recently-used leaves that no running sequence uses.
// Both leave the last prompt token uncached, so its logits are computed (at most
// n_tokens - 1 tokens match).
// Both serve every KV cache group of a hybrid pool (lio/kv_cache_coordinator.h): match and insert
// take a sequence's tables, one per group, and a hit must hold each group's blocks that the next
// query can see.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "lio/block_manager.h"
#include "lio/error.h"
#include "lio/kv_cache_coordinator.h"

namespace lio {

/// Which prefix cache the engine uses.
enum class PrefixCacheMode { None, Hash, Radix };

/// The mode's name, as --prefix-cache takes it (lio/cli_parse.h parse_prefix_cache_mode).
const char* prefix_cache_mode_name(PrefixCacheMode mode);

/// Hit and query counters in tokens (vLLM's `prefix_cache_queries` / `prefix_cache_hits`).
struct PrefixCacheStats {
  int64_t queries = 0;  ///< prompt tokens looked up (at admission)
  int64_t hits = 0;     ///< of those, tokens whose K/V came from the cache
  /// hits / queries (0 when nothing was queried).
  double hit_rate() const { return queries > 0 ? static_cast<double>(hits) / static_cast<double>(queries) : 0.0; }
};

/// A prefix cache over a BlockManager's blocks. Not thread-safe (the Engine's thread).
class PrefixCache {
 public:
  virtual ~PrefixCache() = default;
  /// "hash" or "radix".
  virtual const char* name() const = 0;
  /// The longest cached prefix of `tokens` — at most tokens.size() - 1 tokens — that every KV
  /// cache group of `kv` can serve: group g's blocks from kv.first_kept_block(kv.window(g), hit)
  /// on (all of them for a full-attention group); a windowed group's earlier entries name
  /// kv.null_block() (vLLM's find_longest_cache_hit per group; the shortest hit wins). Appends
  /// to each of `tables` (kv.n_groups() tables, empty on entry) the same number of entries, each
  /// with a hold (BlockManager::ref), and returns the number of tokens matched: a multiple of
  /// block_size for the hash chain, any count for the radix tree (its last block may then be
  /// partial and shared).
  virtual int64_t match(std::span<const int32_t> tokens, GroupTables& tables, KvCacheCoordinator& kv) = 0;
  /// Makes findable what a sequence has computed: `tokens`[0, n_computed) whose K/V are in
  /// `tables` (one per group of `kv`; null-block entries are skipped). While the sequence runs
  /// (`finished` false) only full blocks are cached — it still writes into its last one; when it
  /// finishes, the radix tree takes the partial last block too. Call before the sequence frees
  /// its blocks.
  virtual void insert(std::span<const int32_t> tokens, int64_t n_computed, const GroupTables& tables,
                      const KvCacheCoordinator& kv, bool finished) = 0;
  /// Block `id` is about to be rewritten (BlockManager::allocate_block took it off the free
  /// list): forget its content.
  virtual void on_block_reused(int32_t id) = 0;
  /// Drops the cache's hold on up to `n_blocks` blocks that only it holds, least recently used
  /// first, so they become free. Returns how many became free.
  virtual int64_t evict(int64_t n_blocks) = 0;
  /// Blocks evict() could free now (an upper bound).
  virtual int64_t n_evictable() const = 0;
  /// Counters, updated by the scheduler at each admission.
  PrefixCacheStats stats;
};

/// The hash chain's index: what each cached block holds and where each chain hash lives.
/// Maintained by HashPrefixCache; read by hash_chain_match().
struct HashChainIndex {
  /// What a block holds (indexed by block id).
  struct Entry {
    bool cached = false;          ///< findable under `hash`
    uint64_t hash = 0;            ///< its chain hash
    uint64_t parent = 0;          ///< the parent's chain hash (0 for the first block)
    std::vector<int32_t> tokens;  ///< its block_size token ids
  };
  std::vector<Entry> entries;                     ///< (n_blocks)
  std::unordered_map<uint64_t, int32_t> by_hash;  ///< chain hash -> block id
};

/// Hash of a block given its parent's hash (0 for the first block) and its token ids: xxh64
/// (Debian libxxhash) over the 8 bytes of `parent` then the ids' bytes, seed 0.
uint64_t block_hash(uint64_t parent, std::span<const int32_t> block_tokens);

/// Task 4 (chapter 04 exercise point; solutions|exercises/04_paged_attention/prefix_cache_hash.cpp).
/// The ids, in order, of the cached blocks holding the longest prefix of `tokens` that is made
/// of whole blocks of `block_size` tokens and is shorter than tokens.size() (the last token
/// stays uncached, so its logits are computed). Block k of the prefix is served only by an
/// index entry filed under block k's chain hash (h_k, the file comment's chain, h_{-1} = 0)
/// that is cached and holds the same token ids and the same parent hash h_{k-1}: a 64-bit
/// collision never returns another prefix's K/V, and the same tokens after a different
/// beginning never hit (docs/04_paged_attention.md, section 5 and "Task 4"). Empty when block 0
/// is not served. Takes no references. Throws InvalidArgument if block_size < 1.
std::vector<int32_t> hash_chain_match(const HashChainIndex& index, std::span<const int32_t> tokens,
                                      int64_t block_size);

/// vLLM-style hash chain over full blocks. The hash of block k is xxh64 (Debian libxxhash) of
/// its parent's hash followed by the block's token ids; a hit also compares the stored token
/// ids and parent hash, so a 64-bit collision cannot return another prefix's K/V.
class HashPrefixCache final : public PrefixCache {
 public:
  /// Caches blocks of `blocks` (which must outlive it; attach it with set_prefix_cache).
  explicit HashPrefixCache(BlockManager& blocks);
  const char* name() const override { return "hash"; }
  /// Group 0 (full attention: kv_cache_groups puts the full layers first) by hash_chain_match()
  /// (Task 4), which bounds the hit as vLLM's HybridKVCacheCoordinator bounds it by the
  /// full-attention hit; every other group under its own chain, h_{-1} = group_chain_seed(g),
  /// looked up block by block (a windowed group's early blocks may be gone); the hit shrinks a
  /// block at a time until every group holds what it needs. Then a hold on each entry.
  int64_t match(std::span<const int32_t> tokens, GroupTables& tables, KvCacheCoordinator& kv) override;
  /// Each group's full blocks under its own chain (only full blocks are ever cached).
  void insert(std::span<const int32_t> tokens, int64_t n_computed, const GroupTables& tables,
              const KvCacheCoordinator& kv, bool finished) override;
  void on_block_reused(int32_t id) override;
  /// Always 0: cached blocks with no holder are on the free list already.
  int64_t evict(int64_t n_blocks) override;
  int64_t n_evictable() const override { return 0; }

  /// Blocks currently findable.
  int64_t n_cached_blocks() const { return static_cast<int64_t>(index_.by_hash.size()); }
  /// The index (for tests and the chapter executable).
  const HashChainIndex& index() const { return index_; }

 private:
  /// Caches `table`'s full blocks under the chain that starts at `seed`, skipping entries equal
  /// to `skip` (the null block; -1: none).
  void insert_chain(std::span<const int32_t> tokens, int64_t n_computed, std::span<const int32_t> table, uint64_t seed,
                    int32_t skip);
  BlockManager& blocks_;
  HashChainIndex index_;
};

/// The parent hash of block 0 in KV cache group `g`'s chain: 0 for group 0 (hash_chain_match's
/// chain), a distinct constant for each other group, so equal tokens in two groups never share
/// a key.
uint64_t group_chain_seed(int64_t g);

/// SGLang-style radix tree over token ids. Defined in common/engine/src/radix_prefix_cache.cpp.
class RadixPrefixCache final : public PrefixCache {
 public:
  /// Caches blocks of `blocks` (which must outlive it; attach it with set_prefix_cache).
  explicit RadixPrefixCache(BlockManager& blocks);
  ~RadixPrefixCache() override;
  const char* name() const override { return "radix"; }
  /// One tree per KV cache group, each matched on its own; the hit is the shortest of them,
  /// shrunk a block at a time until each windowed group's entries within its window before the
  /// hit's end are real blocks (SGLang's SWARadixCache keeps full and windowed slots in one tree
  /// and tombstones the evicted windowed ones; separate trees give the same hits). Entries past
  /// the hit are given back.
  int64_t match(std::span<const int32_t> tokens, GroupTables& tables, KvCacheCoordinator& kv) override;
  /// Each group's table into its own tree.
  void insert(std::span<const int32_t> tokens, int64_t n_computed, const GroupTables& tables,
              const KvCacheCoordinator& kv, bool finished) override;
  /// match() on the first KV cache group's tree alone (a pool of one group; `block_table`
  /// empty on entry).
  int64_t match(std::span<const int32_t> tokens, std::vector<int32_t>& block_table);
  /// insert() of one table into the first KV cache group's tree (a pool of one group).
  void insert(std::span<const int32_t> tokens, int64_t n_computed, std::span<const int32_t> block_table, bool finished);
  /// Never called for blocks the tree holds (they are never free); a no-op.
  void on_block_reused(int32_t id) override;
  /// Trims least recently used leaves, tree by tree, the last group's first; a sliding-window
  /// group's tree then also replaces unheld blocks at the head of its edges by the null block
  /// (SGLang's SWARadixCache tombstones), least recently used node first.
  int64_t evict(int64_t n_blocks) override;
  int64_t n_evictable() const override;
  /// Tokens stored in the trees.
  int64_t n_cached_tokens() const;
  /// Nodes in the trees, roots excluded.
  int64_t n_nodes() const;

 private:
  struct Impl;  // one tree (radix_prefix_cache.cpp)
  /// The tree of KV cache group `g`, created on first use; a sliding-window group's (window
  /// from `kv`, if given) evicts by tombstones as well.
  Impl& tree(int64_t g, const KvCacheCoordinator* kv);
  BlockManager& blocks_;
  std::vector<std::unique_ptr<Impl>> trees_;  ///< one per KV cache group seen, group 0's first
};

/// The cache for `mode` over `blocks` (nullptr for None); attaches it to `blocks`.
std::unique_ptr<PrefixCache> make_prefix_cache(PrefixCacheMode mode, BlockManager& blocks);

}  // namespace lio
