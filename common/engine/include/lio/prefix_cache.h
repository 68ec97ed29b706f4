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

/// "none" | "hash" | "radix" -> mode. Throws InvalidArgument on anything else.
PrefixCacheMode parse_prefix_cache_mode(const std::string& name);
/// The mode's name, as parse_prefix_cache_mode() takes it.
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
  /// The longest cached prefix of `tokens` — at most tokens.size() - 1 tokens. Appends its
  /// blocks to `block_table` (empty on entry), each gaining a holder (BlockManager::ref), and
  /// returns the number of tokens matched: a multiple of block_size for the hash chain, any
  /// count for the radix tree (its last block may then be partial and shared).
  virtual int64_t match(std::span<const int32_t> tokens, std::vector<int32_t>& block_table) = 0;
  /// Makes findable what a sequence has computed: `tokens`[0, n_computed) whose K/V are in
  /// `block_table`. While the sequence runs (`finished` false) only full blocks are cached —
  /// it still writes into its last one; when it finishes, the radix tree takes the partial
  /// last block too. Call before the sequence frees its blocks.
  virtual void insert(std::span<const int32_t> tokens, int64_t n_computed, std::span<const int32_t> block_table,
                      bool finished) = 0;
  /// Block `id` is about to be rewritten (BlockManager::allocate_block took it off the free
  /// list): forget its content.
  virtual void on_block_reused(int32_t id) = 0;
  /// match() over every KV cache group of a hybrid pool (lio/kv_cache_coordinator.h): the
  /// longest prefix whose group-0 blocks are cached and, for each other group, the blocks the
  /// next query can still see (from kv.first_kept_block(window, hit) on); earlier entries of a
  /// windowed group name kv.null_block(). Appends to `block_table` and to each of `groups`
  /// (empty on entry), every entry with a hold. The default throws UnsupportedError (the radix
  /// tree does not support KV cache groups).
  /// (Defined inline, like every default here: PrefixCache keeps no key function, so its
  /// typeinfo is emitted wherever it is used, lio_blocks' sanitized builds included.)
  virtual int64_t match_groups(std::span<const int32_t> tokens, std::vector<int32_t>& block_table,
                               GroupTables& groups, KvCacheCoordinator& kv) {
    (void)tokens, (void)block_table, (void)groups, (void)kv;
    throw UnsupportedError(std::string("--prefix-cache ") + name() +
                           " does not support a hybrid KV cache (sliding-window layers): use --prefix-cache hash "
                           "or --disable-hybrid-kv-cache-manager");
  }
  /// insert() over every KV cache group: group 0's table as insert() takes it, and each other
  /// group's non-null blocks under that group's own hash chain. The default throws
  /// UnsupportedError.
  virtual void insert_groups(std::span<const int32_t> tokens, int64_t n_computed, std::span<const int32_t> block_table,
                             const GroupTables& groups, const KvCacheCoordinator& kv, bool finished) {
    (void)tokens, (void)n_computed, (void)block_table, (void)groups, (void)kv, (void)finished;
    throw UnsupportedError(std::string("--prefix-cache ") + name() + " does not support a hybrid KV cache");
  }
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
  /// hash_chain_match() (Task 4), then a hold on each matched block.
  int64_t match(std::span<const int32_t> tokens, std::vector<int32_t>& block_table) override;
  void insert(std::span<const int32_t> tokens, int64_t n_computed, std::span<const int32_t> block_table,
              bool finished) override;
  void on_block_reused(int32_t id) override;
  /// Group 0 by hash_chain_match(); group g >= 1 under its own chain, h_{-1} = group_chain_seed(g),
  /// looked up block by block (a windowed group's early blocks may be gone); the hit shrinks a
  /// block at a time until every group holds what it needs (vLLM: find_longest_cache_hit per
  /// group, then the shortest wins).
  int64_t match_groups(std::span<const int32_t> tokens, std::vector<int32_t>& block_table, GroupTables& groups,
                       KvCacheCoordinator& kv) override;
  void insert_groups(std::span<const int32_t> tokens, int64_t n_computed, std::span<const int32_t> block_table,
                     const GroupTables& groups, const KvCacheCoordinator& kv, bool finished) override;
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
  int64_t match(std::span<const int32_t> tokens, std::vector<int32_t>& block_table) override;
  void insert(std::span<const int32_t> tokens, int64_t n_computed, std::span<const int32_t> block_table,
              bool finished) override;
  /// Never called for blocks the tree holds (they are never free); a no-op.
  void on_block_reused(int32_t id) override;
  int64_t evict(int64_t n_blocks) override;
  int64_t n_evictable() const override;
  /// Tokens stored in the tree.
  int64_t n_cached_tokens() const;
  /// Nodes in the tree, root excluded.
  int64_t n_nodes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The cache for `mode` over `blocks` (nullptr for None); attaches it to `blocks`.
std::unique_ptr<PrefixCache> make_prefix_cache(PrefixCacheMode mode, BlockManager& blocks);

}  // namespace lio
