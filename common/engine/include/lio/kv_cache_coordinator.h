// kv_cache_coordinator.h — one sequence's block tables, one per KV cache group, over one pool.
//
// vLLM v1's KV cache manager (vllm/v1/core/kv_cache_coordinator.py: KVCacheCoordinator,
// UnitaryKVCacheCoordinator, HybridKVCacheCoordinator; single_type_kv_cache_manager.py:
// FullAttentionManager, SlidingWindowManager; docs/design/hybrid_kv_cache_manager.md). A
// sequence keeps one block table per KV cache group (lio/kv_pool.h, KvCacheGroups; vLLM's
// `req_to_blocks` per manager), all of them in one GroupTables: every model has at least one
// group, and group 0 is not special. This coordinator is the one allocator over the
// BlockManager (chapter 04's learner code, underneath): the scheduler, the engine and the prefix
// cache go through it and never ask how many groups there are.
//
// Each group has a policy, given by its window:
// - full attention (window 0, vLLM's FullAttentionManager): the table grows with the sequence,
//   as chapter 04's single table does; with one such group every call is the BlockManager's.
// - sliding window (window w > 0, vLLM's SlidingWindowManager): the next query at position
//   n_computed sees only keys >= n_computed - w + 1, so before each step the group's blocks
//   wholly before that go back to the pool and their entries name the null block (vLLM's
//   `null_block`, `remove_skipped_blocks`): its memory stops growing at the window. Every entry,
//   the null block's included, holds one reference (fork, free and truncate treat all entries
//   alike); the coordinator holds one more on the null block so it is never handed out.
//
// What works with several groups, and what vLLM does:
// - Copy-on-write (parallel sampling): append_slots copies a shared block in every group whose
//   written positions fall in it, as BlockManager::append_slots does for one table.
// - Preemption by recompute frees every table (vLLM v1's only mode: its scheduler has no swap
//   preemption, `_preempt_request` frees the blocks and requeues the request). Swap preemption
//   (vLLM v0's) works here with any number of groups: swap_out copies each group's blocks that
//   hold a live position to host blocks and swap_in brings them back; the entries that slid out
//   of a window stay the null block, so a windowed group swaps at most its window.
// - Speculative rollback: truncate cuts every table; a rollback never goes below the step's
//   n_computed, and blocks are released only below n_computed - window + 1, so no rejected draft
//   ever needs a released block.
// - Prefix caching: the prefix cache keeps each group's blocks (PrefixCache::match / insert take
//   every group's table); a hit needs each group's blocks within its window before the hit's
//   end (vLLM's find_longest_cache_hit per manager, the shortest hit wins). The hash chain does
//   it as vLLM does; the radix cache keeps one tree per group and tombstones a windowed group's
//   blocks anywhere in an edge (SGLang's SWARadixCache).
// - Tensor and pipeline parallelism: every rank's pool has these groups, the whole model's,
//   restricted to the layers it holds (kv_cache_groups(whole, hybrid, first_layer, n_layers);
//   a pipeline stage leaves the lanes of a group with no layer there unused), and the runner
//   RPC carries each group's tables (common/model/src/runner_rpc.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lio/block_manager.h"

namespace lio {

/// One block table of one KV cache group: logical block i -> physical block id.
using BlockTable = std::vector<int32_t>;
/// A sequence's block tables, one per KV cache group (group 0 first; one table for a model
/// without a hybrid pool), all as long as each other once allocated.
using GroupTables = std::vector<BlockTable>;

/// Allocation over every KV cache group of a sequence, on one BlockManager. Not thread-safe
/// (the Engine's thread).
class KvCacheCoordinator {
 public:
  /// `windows`: the sliding window of each group, in tokens (0 = full attention), one entry per
  /// group (at least one). If a group has a window, takes the null block off `blocks`
  /// (allocate_block) for good. Throws InvalidArgument if `windows` is empty or a window is < 0,
  /// InternalError if no block can be had for the null block.
  KvCacheCoordinator(BlockManager& blocks, std::vector<int64_t> windows);

  /// KV cache groups (G >= 1).
  int64_t n_groups() const { return static_cast<int64_t>(windows_.size()); }
  /// The block out-of-window entries name (-1 when no group has a window).
  int32_t null_block() const { return null_block_; }
  /// The window of group `g` in tokens (0 = full attention).
  int64_t window(int64_t g) const { return windows_[static_cast<size_t>(g)]; }
  /// The first logical block a group with `window` still needs when the next query is at
  /// position n_computed: floor(max(0, n_computed - window + 1) / block_size); 0 for window 0.
  int64_t first_kept_block(int64_t window, int64_t n_computed) const;
  /// Empty tables, one per group (a new sequence's).
  GroupTables empty_tables() const { return GroupTables(windows_.size()); }

  /// Gives back every windowed group's blocks before first_kept_block(n_computed): each entry
  /// becomes the null block. Returns the blocks that became free (count 0).
  int64_t release_out_of_window(GroupTables& tables, int64_t n_computed);
  /// Blocks append_slots(tables, n_computed, n_new) would take from the pool: new blocks and
  /// copy-on-write copies of every table, less the out-of-window blocks it would free first.
  /// Never negative. `tables` may be empty (a sequence that holds nothing yet).
  int64_t blocks_needed(const GroupTables& tables, int64_t n_computed, int64_t n_new) const;
  /// True if blocks_needed(...) <= the blocks available now (BlockManager::n_available_blocks).
  bool can_allocate(const GroupTables& tables, int64_t n_computed, int64_t n_new) const;
  /// release_out_of_window, then BlockManager::append_slots on every table for positions
  /// [n_computed, n_computed + n_new); copy-on-write copies go to `copies`. Resizes an empty
  /// `tables` to one per group first. All or nothing beyond the release: returns false and
  /// allocates nothing if too few blocks can be had.
  bool append_slots(GroupTables& tables, int64_t n_computed, int64_t n_new, std::vector<BlockCopy>& copies);
  /// Drops this holder of every block of every table and clears them (the group count stays).
  void free(GroupTables& tables);
  /// Every table forked as BlockManager::fork forks one (parallel sampling's samples).
  GroupTables fork(const GroupTables& tables, int64_t n_tokens);
  /// BlockManager::truncate on every table (speculative rollback).
  void truncate(GroupTables& tables, int64_t n_tokens);
  /// Blocks the tables hold, the null block's entries not counted (a sequence's KV memory in
  /// blocks of the pool).
  int64_t n_blocks_held(const GroupTables& tables) const;
  /// Blocks a sequence of `n_tokens` tokens holds at most at once in every group, the null
  /// block included: blocks_for(n_tokens) per full-attention group, at most
  /// blocks_for(window) + 1 per windowed group. The engine refuses a prompt that could never fit.
  int64_t peak_blocks(int64_t n_tokens) const;

  // ---- swap preemption (vLLM v0's; vLLM v1 only recomputes) -------------------------------

  /// Moves the K/V of positions [0, n_computed) of every group to host blocks of `host`: each
  /// entry of the first blocks_for(n_computed) that is not the null block gets a host block
  /// (copies {device, host} appended to `copies`; `host_tables` gets one table per group, the
  /// null block's entries as -1), then the device tables are freed. All or nothing: returns
  /// false, changing nothing, if `host` has too few blocks.
  bool swap_out(GroupTables& tables, int64_t n_computed, BlockManager& host, GroupTables& host_tables,
                std::vector<BlockCopy>& copies);
  /// Brings a swapped-out sequence back for positions [0, n_computed + n_new): host entries a
  /// window has passed by now are dropped, the others get a fresh device block (copies {host,
  /// device} appended to `copies`), -1 entries become the null block, and every table then
  /// grows to blocks_for(n_computed + n_new). The host blocks are freed. All or nothing: returns
  /// false, changing nothing, if the pool has too few blocks.
  bool swap_in(GroupTables& host_tables, int64_t n_computed, int64_t n_new, BlockManager& host, GroupTables& tables,
               std::vector<BlockCopy>& copies);
  /// Drops the host blocks of a swapped-out sequence's `host_tables` (-1 entries hold none)
  /// and clears them (an aborted or finished swapped-out sequence).
  static void free_host(BlockManager& host, GroupTables& host_tables);

  /// The BlockManager all groups draw from.
  BlockManager& blocks() { return blocks_; }

 private:
  /// Blocks of `table` that positions [n_computed, n_computed + n_new) fall in and another holder shares.
  int64_t shared_in_range(std::span<const int32_t> table, int64_t n_computed, int64_t n_new) const;
  /// Host entries of `host_tables` swap_in keeps at n_computed (those not before their window).
  int64_t kept_on_swap_in(const GroupTables& host_tables, int64_t n_computed) const;

  BlockManager& blocks_;
  std::vector<int64_t> windows_;  ///< (n_groups) tokens, 0 = full attention
  int32_t null_block_ = -1;
};

}  // namespace lio
