// draft_tree.h — a batch's draft trees as the CUDA attention kernels take them (tree
// verification, chapter 06; issue 63, item 4): ForwardBatch::tree_lens / tree_masks on the
// device. The device-side rule is tree_mask.cuh; the CPU kernels' twin is
// kernels/cpu/flash_attention.h, AttentionBatch::tree_lens / tree_masks (same semantics).
#pragma once

#include <cstdint>
#include <string>

#include "lio/error.h"

namespace lio::cuda {

/// Device pointers to a batch's draft trees, both null (the default) when it carries none.
/// lens: (n_seqs) T_s in [0, min(64, query_len(s))]: sequence s's last T_s rows are tree nodes
/// t = 0 .. T_s - 1 and its last T_s keys their K/V. masks: (n_tokens) per row its node's tree
/// mask (bit j: node j is the node or an ancestor; lio/spec_decode.h, tree_attention_masks), 0
/// outside a tree. Node t sees every key before the tree and tree key j iff bit j; a sliding
/// window is measured from the node's real position seq_len - T_s + depth(t) (depth =
/// popcount - 1): prefix keys > that - window, ancestors j with depth(j) > depth(t) - window.
/// Causal attention only. Sources: SpecInfer (Miao et al. 2024, sec. 4); Medusa (Cai et al.
/// 2024, sec. 2.1.2).
struct DraftTrees {
  const int32_t* lens = nullptr;
  const uint64_t* masks = nullptr;
};

namespace detail {

/// Throws InvalidArgument when `trees` has one pointer without the other, or trees on
/// non-causal attention (host check; the arrays' contents are not read).
inline void check_trees(const char* op, const DraftTrees& trees, bool causal = true) {
  const std::string where = std::string("cuda::") + op + ": ";
  if ((trees.lens == nullptr) != (trees.masks == nullptr)) {
    throw InvalidArgument(where + "draft trees need both their lengths and their masks (or neither)");
  }
  if (trees.lens != nullptr && !causal) throw InvalidArgument(where + "a draft tree needs causal attention");
}

}  // namespace detail
}  // namespace lio::cuda
