#include "lio/block_manager.h"

#include <string>

#include "lio/error.h"

namespace lio {

BlockManager::BlockManager(int64_t n_blocks, int64_t block_size)
    : n_blocks_(n_blocks), block_size_(block_size), in_use_(static_cast<size_t>(std::max<int64_t>(n_blocks, 0)), 0) {
  if (n_blocks < 1 || block_size < 1) {
    throw InvalidArgument("BlockManager: n_blocks and block_size must be >= 1, got " + std::to_string(n_blocks) +
                          " and " + std::to_string(block_size));
  }
  for (int64_t b = 0; b < n_blocks; ++b) free_.push_back(static_cast<int32_t>(b));
}

bool BlockManager::can_allocate(const std::vector<int32_t>& block_table, int64_t n_tokens) const {
  const int64_t needed = blocks_for(n_tokens) - static_cast<int64_t>(block_table.size());
  return needed <= n_free_blocks();
}

bool BlockManager::allocate(std::vector<int32_t>& block_table, int64_t n_tokens) {
  if (!can_allocate(block_table, n_tokens)) return false;
  while (static_cast<int64_t>(block_table.size()) < blocks_for(n_tokens)) {
    const int32_t id = free_.front();
    free_.pop_front();
    in_use_[static_cast<size_t>(id)] = 1;
    block_table.push_back(id);
  }
  return true;
}

void BlockManager::free(std::vector<int32_t>& block_table) {
  for (const int32_t id : block_table) {
    LIO_CHECK(id >= 0 && id < n_blocks_ && in_use_[static_cast<size_t>(id)] == 1,
              "freeing KV block " + std::to_string(id) + " that is not allocated");
    in_use_[static_cast<size_t>(id)] = 0;
    free_.push_back(id);
  }
  block_table.clear();
}

}  // namespace lio
