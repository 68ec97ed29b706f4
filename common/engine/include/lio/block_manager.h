// block_manager.h — who owns which KV block: reference counts, the free list, copy-on-write.
//
// PagedAttention's block manager (Kwon et al. 2023, sec. 4.2-4.4; vLLM v1 `BlockPool`,
// nano-vllm `BlockManager`). Physical blocks of `block_size` token slots are handed out as a
// sequence grows and come back when it finishes, is aborted or is preempted. A block may be held
// by several sequences at once — a parallel-sampling fork, a prefix-cache hit — so each block
// carries a reference count, and a sequence about to write into a block that others also hold
// first gets a private copy (copy-on-write, sec. 4.4). It holds no tensor memory — the KvPool
// does — only ids; the copies it decides are carried out by the engine (ModelRunner::copy_blocks).
//
// The free list doubles as the eviction order of the prefix cache (vLLM's `FreeKVCacheBlockQueue`):
// a block whose count drops to 0 keeps its cached content until it is reused, and the blocks
// are reused least recently freed first. Among blocks one sequence frees together, the one
// holding the longest prefix (the least likely to be shared) is reused first
// (docs/04_paged_attention.md, sections 2 and 5).
//
// Chapter 04 exercise points (solutions|exercises/04_paged_attention/block_manager.cpp):
// Task 2 — allocate_block, ref, unref, allocate, free, fork; Task 3 — append_slots. The
// bookkeeping (constructor, ref_count, n_available_blocks) is common/engine/src/block_manager.cpp.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <vector>

#include "lio/forward_batch.h"

namespace lio {

class PrefixCache;

/// Hands out block ids of a pool of `n_blocks` blocks, with reference counts. Not thread-safe
/// (the Engine's thread).
class BlockManager {
 public:
  /// All blocks free, in id order. Throws InvalidArgument if n_blocks < 1, n_blocks >= 2^31 or
  /// block_size < 1.
  BlockManager(int64_t n_blocks, int64_t block_size);

  /// Blocks needed to hold `n_tokens` tokens: ceil(n_tokens / block_size).
  int64_t blocks_for(int64_t n_tokens) const { return (n_tokens + block_size_ - 1) / block_size_; }

  // ---- Task 2: reference-counted allocation (solutions|exercises/04_paged_attention/block_manager.cpp)

  /// A block for one new holder: returns the id of the free block that has been free longest
  /// (the least recently used), now off the free list with ref_count 1. Its old content, if the
  /// prefix cache still knew it, is never returned as a hit again (PrefixCache::on_block_reused
  /// has been told). With the free list empty, the prefix cache may evict (PrefixCache::evict) to
  /// make one free. Returns -1, changing nothing, when no block can be had.
  int32_t allocate_block();
  /// One more holder of block `id` (a fork, a prefix-cache hit): ref_count(id) grows by 1, and a
  /// block that was free (count 0, its cached content kept) is no longer on the free list and
  /// keeps its content. Throws InvalidArgument if id is out of range.
  void ref(int32_t id);
  /// One holder fewer: ref_count(id) drops by 1; a block nobody holds any more is free, its
  /// content kept for the prefix cache, and is reused after every block freed before it. Throws
  /// InternalError if its count is already 0 (a double free), InvalidArgument if id is out of
  /// range.
  void unref(int32_t id);
  /// After it returns true, `block_table` holds blocks_for(n_tokens) blocks (or more, if it
  /// already did): its old entries unchanged, then fresh blocks, each held by this table alone.
  /// All or nothing: returns false and changes neither the table nor the pool if too few blocks
  /// can be had, the prefix cache's evictable blocks counted.
  bool allocate(std::vector<int32_t>& block_table, int64_t n_tokens);
  /// Drops this holder of every block of `block_table` and clears it. Among the blocks this
  /// frees, the one holding the longest prefix is reused first (see the file comment).
  void free(std::vector<int32_t>& block_table);
  /// A table sharing the first blocks_for(n_tokens) blocks of `block_table` (each gains a
  /// holder): parallel sampling's n samples of one prompt (Kwon et al. 2023, sec. 4.4). Throws
  /// InvalidArgument if the table holds fewer blocks.
  std::vector<int32_t> fork(std::span<const int32_t> block_table, int64_t n_tokens);

  // ---- Task 3: copy-on-write (solutions|exercises/04_paged_attention/block_manager.cpp) -------

  /// Makes `block_table` ready for writing positions [n_computed, n_computed + n_new). After it
  /// returns true: the table holds at least blocks_for(n_computed + n_new) blocks; every block
  /// holding one of those positions is held by this table alone (a block that another holder
  /// shares is never written in place); each block that had to be replaced for that has given
  /// way to a fresh one, with BlockCopy {old, fresh} appended to `copies` for the engine to
  /// carry out and one holder fewer on the old block; blocks holding only earlier positions are
  /// unchanged (docs/04_paged_attention.md, section 4). All or nothing: returns false and changes
  /// neither the table, the pool nor `copies` if too few blocks can be had.
  bool append_slots(std::vector<int32_t>& block_table, int64_t n_computed, int64_t n_new,
                    std::vector<BlockCopy>& copies);

  // ---- state ---------------------------------------------------------------------------------

  /// Holders of block `id` (0 = free). Throws InvalidArgument if id is out of range.
  int32_t ref_count(int32_t id) const;
  /// Blocks that allocation can have now: the free list plus what the prefix cache can evict.
  int64_t n_available_blocks() const;
  /// Blocks on the free list (count 0; some may hold cached content).
  int64_t n_free_blocks() const { return static_cast<int64_t>(free_.size()); }
  /// Blocks with count > 0.
  int64_t n_used_blocks() const { return n_blocks_ - n_free_blocks(); }
  /// Blocks in the pool.
  int64_t n_blocks() const { return n_blocks_; }
  /// Tokens per block.
  int64_t block_size() const { return block_size_; }
  /// True if a sequence with `block_table` can grow to hold `n_tokens` tokens (ignoring
  /// copy-on-write) with the blocks available.
  bool can_allocate(std::span<const int32_t> block_table, int64_t n_tokens) const;
  /// Drops this holder of the blocks of `block_table` past the first blocks_for(n_tokens), in
  /// the order free() releases them, and shrinks the table to them: speculative decoding's
  /// rollback (chapter 06) gives back the blocks that held only rejected drafts. No-op when the
  /// table is no longer.
  /// Throws InvalidArgument if n_tokens < 0.
  void truncate(std::vector<int32_t>& block_table, int64_t n_tokens);
  /// Attaches the prefix cache told about reused blocks and asked to evict (nullptr: none).
  /// The cache must outlive this manager or be detached first.
  void set_prefix_cache(PrefixCache* cache) { cache_ = cache; }
  /// The attached prefix cache, or nullptr.
  PrefixCache* prefix_cache() const { return cache_; }

 private:
  void check_id(int32_t id) const;

  int64_t n_blocks_;
  int64_t block_size_;
  std::vector<int32_t> ref_cnt_;                          ///< (n_blocks) holders per block
  std::list<int32_t> free_;                               ///< count-0 blocks, front = evicted first
  std::vector<std::list<int32_t>::iterator> free_pos_;    ///< (n_blocks) position in free_ if free
  PrefixCache* cache_ = nullptr;                          ///< not owned
};

}  // namespace lio
