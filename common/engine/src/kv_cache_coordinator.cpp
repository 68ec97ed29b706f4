#include "lio/kv_cache_coordinator.h"

#include <algorithm>
#include <string>

#include "lio/error.h"
#include "lio/prefix_cache.h"

namespace lio {

KvCacheCoordinator::KvCacheCoordinator(BlockManager& blocks, std::vector<int64_t> windows)
    : blocks_(blocks), windows_(std::move(windows)) {
  if (windows_.empty()) throw InvalidArgument("KvCacheCoordinator: a pool has at least one KV cache group");
  for (const int64_t w : windows_)
    if (w < 0) throw InvalidArgument("KvCacheCoordinator: a sliding window must be >= 0, got " + std::to_string(w));
  if (std::all_of(windows_.begin(), windows_.end(), [](int64_t w) { return w == 0; })) return;
  null_block_ = blocks_.allocate_block();
  if (null_block_ < 0) throw InternalError("KvCacheCoordinator: no block left for the null block");
}

int64_t KvCacheCoordinator::first_kept_block(int64_t window, int64_t n_computed) const {
  if (window == 0) return 0;
  return std::max<int64_t>(0, n_computed - window + 1) / blocks_.block_size();
}

int64_t KvCacheCoordinator::release_out_of_window(GroupTables& tables, int64_t n_computed) {
  int64_t freed = 0;
  for (size_t g = 0; g < tables.size(); ++g) {
    BlockTable& t = tables[g];
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

int64_t KvCacheCoordinator::blocks_needed(const GroupTables& tables, int64_t n_computed, int64_t n_new) const {
  const int64_t want = blocks_.blocks_for(n_computed + n_new);
  int64_t n = 0;
  for (size_t g = 0; g < windows_.size(); ++g) {
    const std::span<const int32_t> t = g < tables.size() ? std::span<const int32_t>(tables[g]) : std::span<const int32_t>();
    n += std::max<int64_t>(0, want - static_cast<int64_t>(t.size())) + shared_in_range(t, n_computed, n_new);
    const int64_t end = std::min<int64_t>(first_kept_block(windows_[g], n_computed), static_cast<int64_t>(t.size()));
    for (int64_t b = 0; b < end; ++b) {  // released first: only a block no one else holds comes back
      const int32_t id = t[static_cast<size_t>(b)];
      if (id != null_block_ && blocks_.ref_count(id) == 1) --n;
    }
  }
  return std::max<int64_t>(0, n);
}

bool KvCacheCoordinator::can_allocate(const GroupTables& tables, int64_t n_computed, int64_t n_new) const {
  return blocks_needed(tables, n_computed, n_new) <= blocks_.n_available_blocks();
}

bool KvCacheCoordinator::append_slots(GroupTables& tables, int64_t n_computed, int64_t n_new,
                                      std::vector<BlockCopy>& copies) {
  if (tables.empty()) tables = empty_tables();
  LIO_CHECK(tables.size() == windows_.size(), "KvCacheCoordinator: a sequence holds " + std::to_string(tables.size()) +
                                                  " block tables; the pool has " + std::to_string(windows_.size()) +
                                                  " KV cache groups");
  release_out_of_window(tables, n_computed);
  for (const BlockTable& t : tables) {  // never write through the null block
    for (size_t b = static_cast<size_t>(n_computed / blocks_.block_size()); b < t.size(); ++b)
      LIO_CHECK(t[b] != null_block_ || null_block_ < 0, "KvCacheCoordinator: a write at position >= " +
                                                             std::to_string(n_computed) +
                                                             " falls in a block that slid out of the window");
  }
  const int64_t need = blocks_needed(tables, n_computed, n_new);
  if (need > blocks_.n_available_blocks()) return false;
  // What the prefix cache must give up goes now, before any table changes: its evictable count
  // is an estimate, and a table grown in one group but not the next could not be undone.
  while (need > blocks_.n_free_blocks() && blocks_.prefix_cache() != nullptr &&
         blocks_.prefix_cache()->evict(need - blocks_.n_free_blocks()) > 0) {
  }  // an eviction can make more evictable (an emptied leaf's parent becomes a leaf)
  if (need > blocks_.n_free_blocks()) return false;
  for (size_t g = 0; g < tables.size(); ++g) {
    if (blocks_.append_slots(tables[g], n_computed, n_new, copies)) continue;
    // The first append is all or nothing itself (the prefix cache's evictable count is an upper
    // bound); after it, every block was counted.
    LIO_CHECK(g == 0, "KvCacheCoordinator: an append that was counted to fit did not");
    return false;
  }
  return true;
}

void KvCacheCoordinator::free(GroupTables& tables) {
  for (BlockTable& t : tables) blocks_.free(t);
}

GroupTables KvCacheCoordinator::fork(const GroupTables& tables, int64_t n_tokens) {
  GroupTables out;
  for (const BlockTable& t : tables) out.push_back(blocks_.fork(t, n_tokens));
  return out;
}

void KvCacheCoordinator::truncate(GroupTables& tables, int64_t n_tokens) {
  for (BlockTable& t : tables) blocks_.truncate(t, n_tokens);
}

int64_t KvCacheCoordinator::n_blocks_held(const GroupTables& tables) const {
  int64_t n = 0;
  for (const BlockTable& t : tables) n += std::count_if(t.begin(), t.end(), [&](int32_t id) { return id != null_block_; });
  return n;
}

int64_t KvCacheCoordinator::peak_blocks(int64_t n_tokens) const {
  const int64_t full = blocks_.blocks_for(n_tokens);
  int64_t n = null_block_ >= 0 ? 1 : 0;
  for (const int64_t w : windows_) n += w == 0 ? full : std::min(full, blocks_.blocks_for(w) + 1);
  return n;
}

// ---- swap preemption ---------------------------------------------------------------------

void KvCacheCoordinator::free_host(BlockManager& host, GroupTables& host_tables) {
  for (BlockTable& t : host_tables)
    for (auto it = t.rbegin(); it != t.rend(); ++it)
      if (*it >= 0) host.unref(*it);
  host_tables.clear();
}

bool KvCacheCoordinator::swap_out(GroupTables& tables, int64_t n_computed, BlockManager& host, GroupTables& host_tables,
                                  std::vector<BlockCopy>& copies) {
  const int64_t n_live = blocks_.blocks_for(n_computed);
  int64_t need = 0;
  for (const BlockTable& t : tables)
    for (int64_t k = 0; k < std::min<int64_t>(n_live, static_cast<int64_t>(t.size())); ++k)
      need += t[static_cast<size_t>(k)] != null_block_ ? 1 : 0;
  if (need > host.n_available_blocks()) return false;
  const size_t n_copies = copies.size();
  GroupTables out(tables.size());
  for (size_t g = 0; g < tables.size(); ++g) {
    for (int64_t k = 0; k < std::min<int64_t>(n_live, static_cast<int64_t>(tables[g].size())); ++k) {
      const int32_t id = tables[g][static_cast<size_t>(k)];
      if (id == null_block_) {
        out[g].push_back(-1);
        continue;
      }
      const int32_t h = host.allocate_block();
      if (h < 0) {  // the host's evictable count was an upper bound: undo
        free_host(host, out);
        copies.resize(n_copies);
        return false;
      }
      out[g].push_back(h);
      copies.push_back({id, h});
    }
  }
  free(tables);
  host_tables = std::move(out);
  return true;
}

int64_t KvCacheCoordinator::kept_on_swap_in(const GroupTables& host_tables, int64_t n_computed) const {
  int64_t n = 0;
  for (size_t g = 0; g < host_tables.size(); ++g) {
    const BlockTable& t = host_tables[g];
    for (size_t k = static_cast<size_t>(first_kept_block(windows_[g], n_computed)); k < t.size(); ++k)
      n += t[k] >= 0 ? 1 : 0;
  }
  return n;
}

bool KvCacheCoordinator::swap_in(GroupTables& host_tables, int64_t n_computed, int64_t n_new, BlockManager& host,
                                 GroupTables& tables, std::vector<BlockCopy>& copies) {
  LIO_CHECK(host_tables.size() == windows_.size(), "KvCacheCoordinator::swap_in: " +
                                                       std::to_string(host_tables.size()) + " host tables for " +
                                                       std::to_string(windows_.size()) + " KV cache groups");
  const int64_t want = blocks_.blocks_for(n_computed + n_new);
  int64_t need = kept_on_swap_in(host_tables, n_computed);
  for (const BlockTable& t : host_tables) need += std::max<int64_t>(0, want - static_cast<int64_t>(t.size()));
  if (need > blocks_.n_available_blocks()) return false;
  const size_t n_copies = copies.size();
  GroupTables out(host_tables.size());
  const auto undo = [&] {
    free(out);
    copies.resize(n_copies);
    return false;
  };
  for (size_t g = 0; g < host_tables.size(); ++g) {
    const int64_t first = first_kept_block(windows_[g], n_computed);
    for (size_t k = 0; k < host_tables[g].size(); ++k) {
      const int32_t h = host_tables[g][k];
      if (h < 0 || static_cast<int64_t>(k) < first) {  // slid out of the window: no copy back
        blocks_.ref(null_block_);
        out[g].push_back(null_block_);
        continue;
      }
      const int32_t id = blocks_.allocate_block();
      if (id < 0) return undo();
      out[g].push_back(id);
      copies.push_back({h, id});
    }
    if (!blocks_.allocate(out[g], n_computed + n_new)) return undo();
  }
  free_host(host, host_tables);
  tables = std::move(out);
  return true;
}

}  // namespace lio
