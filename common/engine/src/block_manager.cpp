// The BlockManager's bookkeeping. Its allocation and copy-on-write methods are chapter 04's
// exercise points: solutions|exercises/04_paged_attention/block_manager.cpp.
#include "lio/block_manager.h"

#include <string>

#include "lio/error.h"
#include "lio/prefix_cache.h"

namespace lio {

BlockManager::BlockManager(int64_t n_blocks, int64_t block_size) : n_blocks_(n_blocks), block_size_(block_size) {
  if (n_blocks < 1 || n_blocks > INT32_MAX || block_size < 1) {
    throw InvalidArgument("BlockManager: n_blocks must be in [1, 2^31) and block_size >= 1, got " +
                          std::to_string(n_blocks) + " and " + std::to_string(block_size));
  }
  ref_cnt_.assign(static_cast<size_t>(n_blocks), 0);
  free_pos_.resize(static_cast<size_t>(n_blocks));
  for (int64_t b = 0; b < n_blocks; ++b) free_pos_[static_cast<size_t>(b)] = free_.insert(free_.end(), static_cast<int32_t>(b));
}

void BlockManager::check_id(int32_t id) const {
  if (id < 0 || id >= n_blocks_) {
    throw InvalidArgument("KV block id " + std::to_string(id) + " is outside [0, " + std::to_string(n_blocks_) + ")");
  }
}

int32_t BlockManager::ref_count(int32_t id) const {
  check_id(id);
  return ref_cnt_[static_cast<size_t>(id)];
}

int64_t BlockManager::n_available_blocks() const {
  return n_free_blocks() + (cache_ != nullptr ? cache_->n_evictable() : 0);
}

bool BlockManager::can_allocate(std::span<const int32_t> block_table, int64_t n_tokens) const {
  return blocks_for(n_tokens) - static_cast<int64_t>(block_table.size()) <= n_available_blocks();
}

void BlockManager::truncate(std::vector<int32_t>& block_table, int64_t n_tokens) {
  if (n_tokens < 0) throw InvalidArgument("BlockManager::truncate: n_tokens must be >= 0, got " + std::to_string(n_tokens));
  const auto keep = static_cast<size_t>(blocks_for(n_tokens));
  while (block_table.size() > keep) {
    unref(block_table.back());
    block_table.pop_back();
  }
}

}  // namespace lio
