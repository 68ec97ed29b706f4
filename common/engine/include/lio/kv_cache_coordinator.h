// kv_cache_coordinator.h — one sequence's block tables, one per KV cache group, over one pool.
//
// vLLM v1's hybrid KV cache manager (vllm/v1/core/kv_cache_coordinator.py and
// single_type_kv_cache_manager.py; docs/design/hybrid_kv_cache_manager.md): a model with both
// full-attention and sliding-window layers (Gemma 3: five windowed layers of every six) keeps
// one block table per KV cache group (lio/kv_pool.h, KvCacheGroups). Group 0 (full attention)
// grows with the sequence, as chapter 04's single table does. A sliding-window group needs
// only the keys the next query can see — positions >= n_computed - window + 1 — so before each
// step its blocks wholly before that go back to the pool and their table entries name the null
// block (vLLM's `null_block`, `SlidingWindowManager.remove_skipped_blocks`): the sequence's KV
// memory on those layers stops growing at the window. Every table entry, the null block's
// included, holds one reference (so fork, free and truncate treat all entries alike); the
// coordinator holds one more on the null block so it is never handed out.
//
// What stays correct with windowed groups, and how vLLM does it:
// - Copy-on-write (parallel sampling): append_slots copies a shared block in every group whose
//   written positions fall in it, as BlockManager::append_slots does for one table.
// - Preemption: recompute frees every table (vLLM v1 only recomputes); swap preemption is
//   refused for a hybrid pool (Engine).
// - Speculative rollback: truncate cuts every table; a rollback never goes below the step's
//   n_computed, and blocks are released only below n_computed - window + 1, so no rejected
//   draft ever needs a released block.
// - Prefix caching (hash): each group's blocks are cached under its own hash chain; a hit
//   needs group 0's blocks and each windowed group's blocks within the window before the hit's
//   end (HashPrefixCache::match_groups; vLLM's SlidingWindowManager.find_longest_cache_hit).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lio/block_manager.h"

namespace lio {

/// Block tables of KV cache groups 1 .. G-1 of one sequence (group 0's is the sequence's
/// block_table), each as long as group 0's.
using GroupTables = std::vector<std::vector<int32_t>>;

/// Allocation over every KV cache group of a sequence, on one BlockManager. With no extra group
/// (window list empty) every call is the BlockManager's own. Not thread-safe (the Engine's thread).
class KvCacheCoordinator {
 public:
  /// `windows`: the sliding window of groups 1 .. G-1 (0 = a full-attention group), empty for
  /// one group. With extra groups, takes the null block off `blocks` (allocate_block) for good.
  /// Throws InvalidArgument if a window is < 0, InternalError if no block can be had.
  KvCacheCoordinator(BlockManager& blocks, std::vector<int64_t> windows);

  /// Groups beyond group 0 (G - 1).
  int64_t n_extra_groups() const { return static_cast<int64_t>(windows_.size()); }
  /// The block out-of-window entries name (-1 with one group).
  int32_t null_block() const { return null_block_; }
  /// The window of extra group `g` (0-based over groups 1..).
  int64_t window(size_t g) const { return windows_[g]; }
  /// The first logical block a windowed group still needs when the next query is at position
  /// n_computed: floor(max(0, n_computed - window + 1) / block_size); 0 for window 0.
  int64_t first_kept_block(int64_t window, int64_t n_computed) const;

  /// Gives back every windowed group's blocks before first_kept_block(n_computed): each entry
  /// becomes the null block. Returns the blocks that became free (count 0).
  int64_t release_out_of_window(GroupTables& groups, int64_t n_computed);
  /// Blocks append_slots(table, groups, n_computed, n_new) would take from the pool: new
  /// blocks and copy-on-write copies of every table, less the out-of-window blocks it would
  /// free first. Never negative.
  int64_t blocks_needed(std::span<const int32_t> table, const GroupTables& groups, int64_t n_computed,
                        int64_t n_new) const;
  /// True if blocks_needed(...) <= the blocks available now.
  bool can_allocate(std::span<const int32_t> table, const GroupTables& groups, int64_t n_computed,
                    int64_t n_new) const;
  /// release_out_of_window, then BlockManager::append_slots on every table for positions
  /// [n_computed, n_computed + n_new); copy-on-write copies go to `copies`. All or nothing
  /// beyond the release: returns false and allocates nothing if too few blocks can be had.
  bool append_slots(std::vector<int32_t>& table, GroupTables& groups, int64_t n_computed, int64_t n_new,
                    std::vector<BlockCopy>& copies);
  /// Fresh tables holding `n_tokens` tokens in every group (a swap-in or a one-shot
  /// allocation): BlockManager::allocate on each. All or nothing.
  bool allocate(std::vector<int32_t>& table, GroupTables& groups, int64_t n_tokens);
  /// Drops this holder of every block of every table and clears them (groups keeps its size).
  void free(std::vector<int32_t>& table, GroupTables& groups);
  /// Each extra group's table forked as BlockManager::fork forks group 0's.
  GroupTables fork(const GroupTables& groups, int64_t n_tokens);
  /// BlockManager::truncate on every extra group's table (group 0's is the caller's).
  void truncate(GroupTables& groups, int64_t n_tokens);
  /// Empty tables, one per extra group.
  GroupTables empty_tables() const { return GroupTables(windows_.size()); }

  /// The BlockManager all groups draw from.
  BlockManager& blocks() { return blocks_; }

 private:
  /// Blocks of `table` that positions [n_computed, n_computed + n_new) fall in and another holder shares.
  int64_t shared_in_range(std::span<const int32_t> table, int64_t n_computed, int64_t n_new) const;

  BlockManager& blocks_;
  std::vector<int64_t> windows_;
  int32_t null_block_ = -1;
};

}  // namespace lio
