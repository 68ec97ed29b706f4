// runner_rpc.h — chapter 08's driver-to-worker messages (private to lio_model): the commands
// and the int32 encodings of a ForwardBatch and of block copies that ModelRunner broadcasts from
// world rank 0 (runner_rpc.cpp, model_runner.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lio/forward_batch.h"
#include "lio/kv_pool.h"

namespace lio::rpc {

/// The driver's commands to the workers (the first int of each message).
enum Command : int32_t { kForward = 1, kCopyBlocks = 2, kSwapOut = 3, kSwapIn = 4, kStop = 5, kCopySlots = 6 };

/// A ForwardBatch as ints: block_size, max_blocks_per_seq, n_layers, then each array with its
/// length, then the number of KV cache groups past the first (G - 1) and each one's slot
/// mapping and block tables with their lengths (a hybrid pool's workers get every group's), then
/// the draft trees (tree verification): tree_lens with its length, and tree_masks as two ints
/// (low word, high word) a mask, with its length in ints (both 0 without trees).
std::vector<int32_t> serialize(const ForwardBatch& b);

/// The inverse of serialize(const ForwardBatch&). Throws CommError when the message ends early or
/// an array's length runs past it.
ForwardBatch deserialize(const std::vector<int32_t>& in);

/// Block (or slot: kCopySlots) copies as ints: src, dst per copy.
std::vector<int32_t> serialize(std::span<const BlockCopy> copies);

/// The inverse of serialize(std::span<const BlockCopy>); an odd trailing int is ignored.
std::vector<BlockCopy> copies_of(const std::vector<int32_t>& in);

}  // namespace lio::rpc
