// tree_mask.cuh — the draft-tree attention rule on the device (DraftTrees, draft_tree.h), shared
// by the flash, naive and paged attention kernels so that they mask alike (the CPU kernels' twin:
// TreeView in kernels/cpu/flash_attention.cpp).
#pragma once

#include <cstdint>

#include "draft_tree.h"

namespace lio::cuda::detail {

/// One query row's view of its sequence's draft tree; is_tree() false for every row outside a
/// tree (which then attends causally as usual).
struct TreeRow {
  const uint64_t* masks = nullptr;  // the tree's masks, node j's at masks[j]; null: no tree row
  uint64_t mask = 0;                // this row's node mask
  int key0 = 0;                     // the tree's first key: seq_len - T
  int depth = 0;                    // the node's depth: popcount(mask) - 1
  int window = 0;                   // sliding window (0: none)

  __device__ __forceinline__ bool is_tree() const { return masks != nullptr; }
  /// The node's real position (its RoPE position): key0 + depth.
  __device__ __forceinline__ int position() const { return key0 + depth; }
  /// The first key the row may see: its window's first prefix key (0 without a window).
  __device__ __forceinline__ int first_key() const { return window > 0 ? max(0, key0 + depth - window + 1) : 0; }
  /// Whether the tree row sees key `key` (a linear key index of its sequence).
  __device__ __forceinline__ bool sees(int key) const {
    if (key < key0) return key >= first_key();
    const int a = key - key0;
    if (a >= 64 || ((mask >> a) & 1u) == 0) return false;
    return window == 0 || __popcll(masks[a]) - 1 > depth - window;
  }
};

/// The TreeRow of row `row_in_seq` (0 .. query_len - 1) of sequence s, whose rows start at batch
/// row q_start and whose keys number seq_len.
__device__ __forceinline__ TreeRow tree_row(const DraftTrees& trees, int s, int q_start, int query_len,
                                            int row_in_seq, int seq_len, int window) {
  TreeRow r;
  r.window = window;
  if (trees.lens == nullptr) return r;
  const int n = trees.lens[s];
  const int t = row_in_seq - (query_len - n);
  if (n == 0 || t < 0) return r;
  r.masks = trees.masks + (q_start + query_len - n);
  r.mask = r.masks[t];
  r.key0 = seq_len - n;
  r.depth = __popcll(r.mask) - 1;
  return r;
}

/// Whether a row at linear position `pos` (tree: TreeRow `tr`) sees key `key`, causal with an
/// optional window: the one rule every kernel applies.
__device__ __forceinline__ bool row_sees(const TreeRow& tr, int pos, int window, int key) {
  if (tr.is_tree()) return key <= pos && tr.sees(key);
  return key <= pos && (window == 0 || key > pos - window);
}

}  // namespace lio::cuda::detail
