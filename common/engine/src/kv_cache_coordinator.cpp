#include "lio/kv_cache_coordinator.h"

#include <algorithm>
#include <string>

#include "lio/error.h"

namespace lio {

KvCacheCoordinator::KvCacheCoordinator(BlockManager& blocks, std::vector<int64_t> windows)
    : blocks_(blocks), windows_(std::move(windows)) {
  for (const int64_t w : windows_)
    if (w < 0) throw InvalidArgument("KvCacheCoordinator: a sliding window must be >= 0, got " + std::to_string(w));
  if (windows_.empty()) return;
  null_block_ = blocks_.allocate_block();
  if (null_block_ < 0) throw InternalError("KvCacheCoordinator: no block left for the null block");
}

int64_t KvCacheCoordinator::first_kept_block(int64_t window, int64_t n_computed) const {
  if (window == 0) return 0;
  return std::max<int64_t>(0, n_computed - window + 1) / blocks_.block_size();
}

int64_t KvCacheCoordinator::release_out_of_window(GroupTables& groups, int64_t n_computed) {
  int64_t freed = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<int32_t>& t = groups[g];
    const int64_t end = std::min<int64_t>(first_kept_block(windows_[g], n_computed), static_cast<int64_t>(t.size()));
    for (int64_t b = 0; b < end; ++b) {
      int32_t& id = t[static_cast<size_t>(b)];
      if (id == null_block_) continue;
      if (blocks_.ref_count(id) == 1) ++freed;
      blocks_.unref(id);
      blocks_.ref(null_block_);
      id = null_block_;
    }
  }
  return freed;
}

int64_t KvCacheCoordinator::shared_in_range(std::span<const int32_t> table, int64_t n_computed, int64_t n_new) const {
  const int64_t first = n_computed / blocks_.block_size();
  const int64_t last = std::min<int64_t>(blocks_.blocks_for(n_computed + n_new), static_cast<int64_t>(table.size()));
  int64_t n = 0;
  for (int64_t b = first; b < last; ++b) {
    const int32_t id = table[static_cast<size_t>(b)];
    if (id != null_block_ && blocks_.ref_count(id) > 1) ++n;
  }
  return n;
}

int64_t KvCacheCoordinator::blocks_needed(std::span<const int32_t> table, const GroupTables& groups, int64_t n_computed,
                                          int64_t n_new) const {
  const int64_t want = blocks_.blocks_for(n_computed + n_new);
  int64_t n = std::max<int64_t>(0, want - static_cast<int64_t>(table.size())) + shared_in_range(table, n_computed, n_new);
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<int32_t>& t = groups[g];
    n += std::max<int64_t>(0, want - static_cast<int64_t>(t.size())) + shared_in_range(t, n_computed, n_new);
    const int64_t end = std::min<int64_t>(first_kept_block(windows_[g], n_computed), static_cast<int64_t>(t.size()));
    for (int64_t b = 0; b < end; ++b) {  // released first: only a block no one else holds comes back
      const int32_t id = t[static_cast<size_t>(b)];
      if (id != null_block_ && blocks_.ref_count(id) == 1) --n;
    }
  }
  return std::max<int64_t>(0, n);
}

bool KvCacheCoordinator::can_allocate(std::span<const int32_t> table, const GroupTables& groups, int64_t n_computed,
                                      int64_t n_new) const {
  return blocks_needed(table, groups, n_computed, n_new) <= blocks_.n_available_blocks();
}

bool KvCacheCoordinator::append_slots(std::vector<int32_t>& table, GroupTables& groups, int64_t n_computed,
                                      int64_t n_new, std::vector<BlockCopy>& copies) {
  if (groups.empty()) return blocks_.append_slots(table, n_computed, n_new, copies);
  release_out_of_window(groups, n_computed);
  for (const std::vector<int32_t>& t : groups) {  // never write through the null block
    for (size_t b = static_cast<size_t>(n_computed / blocks_.block_size()); b < t.size(); ++b)
      LIO_CHECK(t[b] != null_block_, "KvCacheCoordinator: a write at position >= " + std::to_string(n_computed) +
                                         " falls in a block that slid out of the window");
  }
  if (!can_allocate(table, groups, n_computed, n_new)) return false;
  bool ok = blocks_.append_slots(table, n_computed, n_new, copies);
  for (std::vector<int32_t>& t : groups) ok = ok && blocks_.append_slots(t, n_computed, n_new, copies);
  LIO_CHECK(ok, "KvCacheCoordinator: an append that was counted to fit did not");
  return true;
}

bool KvCacheCoordinator::allocate(std::vector<int32_t>& table, GroupTables& groups, int64_t n_tokens) {
  if (groups.empty()) return blocks_.allocate(table, n_tokens);
  int64_t need = std::max<int64_t>(0, blocks_.blocks_for(n_tokens) - static_cast<int64_t>(table.size()));
  for (const std::vector<int32_t>& t : groups)
    need += std::max<int64_t>(0, blocks_.blocks_for(n_tokens) - static_cast<int64_t>(t.size()));
  if (need > blocks_.n_available_blocks()) return false;
  bool ok = blocks_.allocate(table, n_tokens);
  for (std::vector<int32_t>& t : groups) ok = ok && blocks_.allocate(t, n_tokens);
  LIO_CHECK(ok, "KvCacheCoordinator: an allocation that was counted to fit did not");
  return true;
}

void KvCacheCoordinator::free(std::vector<int32_t>& table, GroupTables& groups) {
  blocks_.free(table);
  for (std::vector<int32_t>& t : groups) blocks_.free(t);
}

GroupTables KvCacheCoordinator::fork(const GroupTables& groups, int64_t n_tokens) {
  GroupTables out;
  for (const std::vector<int32_t>& t : groups) out.push_back(blocks_.fork(t, n_tokens));
  return out;
}

void KvCacheCoordinator::truncate(GroupTables& groups, int64_t n_tokens) {
  for (std::vector<int32_t>& t : groups) blocks_.truncate(t, n_tokens);
}

}  // namespace lio
