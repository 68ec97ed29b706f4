// cuda_graph_plan.h — which decode batches a CUDA graph can replay, and how a batch is padded to
// one (issue 32). Host logic only: it builds and tests without a GPU.
//
// A CUDA graph (CUDA Programming Guide, "CUDA Graphs": stream capture, then cudaGraphLaunch)
// replays a fixed sequence of kernels with fixed arguments, so it serves one batch shape. As
// vLLM does (`cudagraph_capture_sizes`, `CUDAGraphRunner`), the runner captures the decode
// forward pass once per bucket size at start-up, with every per-step input (token ids,
// positions, slot mapping, block tables, sequence lengths) in fixed device buffers, and pads a
// decode batch of n sequences up to the smallest bucket >= n: the padding rows compute, write no
// K/V (slot kPadSlotId) and ask for no logits. Prefill chunks, speculative verification and
// batches past the largest bucket run eagerly.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lio/forward_batch.h"

namespace lio {

/// The bucket sizes for max_num_seqs: 1, 2, 4, 8, then every 8 up to 32, every 16 up to 64, every
/// 32 beyond, and max_num_seqs itself as the last (so every decode batch the scheduler can form
/// fits one). Ascending, no duplicates. Throws InvalidArgument if max_num_seqs < 1.
std::vector<int64_t> graph_capture_sizes(int64_t max_num_seqs);

/// The smallest size in `sizes` (ascending) that holds n sequences, or -1 when n exceeds the
/// largest (the batch runs eagerly). Throws InvalidArgument if n < 1.
int64_t graph_bucket(std::span<const int64_t> sizes, int64_t n);

/// Whether `b` is a batch a decode graph replays: at least one sequence, each with exactly one
/// query row that gets logits, every layer run (n_layers == 0), no hidden states kept
/// (return_hidden: the graph's rows are not copied back). Speculative verification (k + 1 rows),
/// prefill chunks and early exit are not.
bool is_graph_decode_batch(const ForwardBatch& b);

/// Appends bucket - n_seqs padding sequences to the decode batch `b`: one row each, token 0 at
/// position 0, slot kPadSlotId (no K/V written), seq_len 1, a block table row of block 0 in every
/// KV cache group (read, never written: the row's result is discarded), no logits. The real rows, their logits rows
/// and their order are unchanged, so their results are too (rows are independent in every
/// operator). Throws InvalidArgument if !is_graph_decode_batch(b) or bucket < b.n_seqs().
void pad_decode_batch(ForwardBatch& b, int64_t bucket);

/// The batch a decode graph replays for the decode batch `b`: padded to `bucket` sequences
/// (pad_decode_batch), every row asking for logits (a graph's LM head runs a fixed number of rows:
/// the padding rows' logits are computed and ignored), and every block table widened to `width`
/// columns with zeros (the graph's attention kernels were captured with that row stride). The real
/// rows keep their rows, their results and logits rows 0 .. b.n_seqs() - 1, in order. Throws
/// InvalidArgument as pad_decode_batch, or if width < b.max_blocks_per_seq.
ForwardBatch graph_decode_batch(const ForwardBatch& b, int64_t bucket, int64_t width);

/// The batch a decode graph of `bucket` sequences is captured with: `bucket` padding rows (token 0
/// at position 0, slot kPadSlotId, seq_len 1, block 0), each asking for logits, block tables of
/// `width` columns in `n_groups` KV cache groups. Capturing runs nothing, so only its array shapes
/// matter: every batch graph_decode_batch makes for that bucket and width has the same ones.
/// Throws InvalidArgument if bucket, width, block_size or n_groups is < 1.
ForwardBatch graph_capture_batch(int64_t bucket, int64_t width, int64_t block_size, int64_t n_groups);

}  // namespace lio
