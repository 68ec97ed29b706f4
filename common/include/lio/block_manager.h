// block_manager.h — who owns which KV block: the free list and each sequence's block table.
//
// PagedAttention's block manager (Kwon et al. 2023, sec. 4.2; vLLM v1 `KVCacheManager`,
// nano-vllm `BlockManager`): physical blocks of `block_size` token slots are handed out from a
// free list as a sequence grows and returned when it finishes, is aborted or is preempted. It
// holds no tensor memory — the KvPool does — only ids. Chapter 04 completes it with reference
// counts, prefix hashing and copy-on-write; this is the minimal version the batched engine needs.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

namespace lio {

/// Hands out block ids of a pool of `n_blocks` blocks. Not thread-safe (the Engine's thread).
class BlockManager {
 public:
  /// Throws InvalidArgument if n_blocks < 1 or block_size < 1.
  BlockManager(int64_t n_blocks, int64_t block_size);

  /// Blocks needed to hold `n_tokens` tokens: ceil(n_tokens / block_size).
  int64_t blocks_for(int64_t n_tokens) const { return (n_tokens + block_size_ - 1) / block_size_; }
  /// True if a sequence with `block_table` can grow to hold `n_tokens` tokens with the free
  /// blocks left.
  bool can_allocate(const std::vector<int32_t>& block_table, int64_t n_tokens) const;
  /// Grows `block_table` (appending free block ids) until it holds `n_tokens` tokens: a prompt's
  /// blocks at admission, or the slot of each new token (a new block every block_size tokens).
  /// Returns false and changes nothing if too few blocks are free.
  bool allocate(std::vector<int32_t>& block_table, int64_t n_tokens);
  /// Returns every block of `block_table` to the free list and clears it. Throws
  /// InternalError if a block is not currently allocated (a double free).
  void free(std::vector<int32_t>& block_table);

  /// Blocks on the free list.
  int64_t n_free_blocks() const { return static_cast<int64_t>(free_.size()); }
  /// Blocks in the pool.
  int64_t n_blocks() const { return n_blocks_; }
  /// Tokens per block.
  int64_t block_size() const { return block_size_; }

 private:
  int64_t n_blocks_;
  int64_t block_size_;
  std::deque<int32_t> free_;       ///< free ids; freed blocks go to the back (FIFO reuse)
  std::vector<uint8_t> in_use_;    ///< (n_blocks) 1 while allocated, to catch double frees
};

}  // namespace lio
