// Chapter 04, Tasks 2 and 3 — reference solution: reference-counted block allocation and
// copy-on-write. Declarations and contracts: common/engine/include/lio/block_manager.h.
#include <algorithm>
#include <string>

#include "lio/block_manager.h"
#include "lio/error.h"
#include "lio/prefix_cache.h"

namespace lio {

// ---- Task 2 -----------------------------------------------------------------------------------

int32_t BlockManager::allocate_block() {
  if (free_.empty() && cache_ != nullptr) cache_->evict(1);
  if (free_.empty()) return -1;
  const int32_t id = free_.front();  // least recently used first
  free_.pop_front();
  if (cache_ != nullptr) cache_->on_block_reused(id);  // its old content is about to go
  ref_cnt_[static_cast<size_t>(id)] = 1;
  return id;
}

void BlockManager::ref(int32_t id) {
  check_id(id);
  int32_t& count = ref_cnt_[static_cast<size_t>(id)];
  if (count == 0) free_.erase(free_pos_[static_cast<size_t>(id)]);  // a cached block comes back
  count += 1;
}

void BlockManager::unref(int32_t id) {
  check_id(id);
  int32_t& count = ref_cnt_[static_cast<size_t>(id)];
  LIO_CHECK(count > 0, "freeing KV block " + std::to_string(id) + " that is not allocated");
  count -= 1;
  if (count == 0) free_pos_[static_cast<size_t>(id)] = free_.insert(free_.end(), id);
}

bool BlockManager::allocate(std::vector<int32_t>& block_table, int64_t n_tokens) {
  const int64_t needed = blocks_for(n_tokens) - static_cast<int64_t>(block_table.size());
  if (needed <= 0) return true;
  if (needed > n_free_blocks() && cache_ != nullptr) cache_->evict(needed - n_free_blocks());
  if (needed > n_free_blocks()) return false;
  for (int64_t i = 0; i < needed; ++i) block_table.push_back(allocate_block());
  return true;
}

void BlockManager::free(std::vector<int32_t>& block_table) {
  // Unref last to first (last block first): it holds the longest prefix, the least likely to be
  // wanted again, and what is freed first is reused first.
  for (auto it = block_table.rbegin(); it != block_table.rend(); ++it) unref(*it);
  block_table.clear();
}

std::vector<int32_t> BlockManager::fork(std::span<const int32_t> block_table, int64_t n_tokens) {
  const int64_t n = blocks_for(n_tokens);
  if (n > static_cast<int64_t>(block_table.size())) {
    throw InvalidArgument("fork: " + std::to_string(n_tokens) + " tokens need " + std::to_string(n) +
                          " blocks, the table has " + std::to_string(block_table.size()));
  }
  std::vector<int32_t> child(block_table.begin(), block_table.begin() + n);
  for (const int32_t id : child) ref(id);
  return child;
}

// ---- Task 3 -----------------------------------------------------------------------------------

bool BlockManager::append_slots(std::vector<int32_t>& block_table, int64_t n_computed, int64_t n_new,
                                std::vector<BlockCopy>& copies) {
  const int64_t end = n_computed + n_new;
  const auto n_have = static_cast<int64_t>(block_table.size());
  // Existing blocks the new positions fall in that someone else also holds: copy them first.
  std::vector<int64_t> shared;
  for (int64_t k = n_computed / block_size_; k < std::min(n_have, blocks_for(end)); ++k) {
    if (ref_cnt_[static_cast<size_t>(block_table[static_cast<size_t>(k)])] > 1) shared.push_back(k);
  }
  const int64_t needed = static_cast<int64_t>(shared.size()) + std::max<int64_t>(0, blocks_for(end) - n_have);
  if (needed > n_free_blocks() && cache_ != nullptr) cache_->evict(needed - n_free_blocks());
  if (needed > n_free_blocks()) return false;
  for (const int64_t k : shared) {
    int32_t& id = block_table[static_cast<size_t>(k)];
    const int32_t fresh = allocate_block();
    copies.push_back({id, fresh});
    unref(id);  // the others keep the original
    id = fresh;
  }
  return allocate(block_table, end);
}

}  // namespace lio
