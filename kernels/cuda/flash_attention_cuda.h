// flash_attention_cuda.h — chapter 07's FlashAttention on the GPU over the paged pool
// (flash_attention.cu) with its split-KV decode, and the naive twin that materializes the scores
// (naive_attention.cu). Named apart from kernels/cpu/flash_attention.h (the CPU contract of the
// same chapter): both folders are on some targets' include path.
//
// Launcher conventions (README.md in this folder): device pointers, an explicit stream, shapes
// checked on the host (lio::InvalidArgument), launches checked (lio::cuda::CudaError).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_buffer.h"
#include "draft_tree.h"

namespace lio::cuda {

// Attention without the N x N score matrix (Dao et al. 2022; FlashAttention-2, Dao 2023), its
// split-KV decode (Flash-Decoding, Dao, Haziza, Massa, Sizov 2023), and the naive twin that does
// materialize the scores; the tensor-core bf16 variant for the kernel benchmark is
// flash_attention_mma.h. The CPU contract of the same chapter is kernels/cpu/flash_attention.h
// (same semantics).

/// Largest head_dim flash_attention() and naive_attention() accept: a thread of the flash kernel
/// keeps its share of a row's head_dim accumulators in registers, and a query tile of
/// head_dim-float rows lives in shared memory. 256 covers every model LIO runs (64: SmolLM2 and
/// Llama 3.2 1B; 128: Llama 3 8B, Qwen2.5; 256: Gemma 3), as paged_attention() does.
inline constexpr int64_t kFlashAttentionMaxHeadDim = 256;

/// Longest query (max_query_len) flash_attention() treats as decode: a block then holds 4 or 8
/// (row, head) query vectors instead of 64, and the keys may be split across blocks
/// (Flash-Decoding).
inline constexpr int64_t kFlashDecodeMaxQueryLen = 4;

/// Keys per K/V tile (Bc): a Flash-Decoding split walks whole tiles, so one tile is the fewest
/// keys a non-empty split holds.
inline constexpr int64_t kFlashKeyTile = 32;

/// Most splits of one row's keys (bounds the workspace: n_splits x n_tokens x n_heads x
/// (head_dim + 2) floats).
inline constexpr int64_t kFlashMaxSplits = 64;

/// Device scratch and settings of flash_attention(), owned by the caller (one per backend or
/// benchmark, on one device; no hidden allocation or global state). Its first use reads the SM
/// count and sets the kernels' shared-memory attribute once. The partials are sized by the
/// caller up front (flash_attention_workspace_floats(); CudaBackend::reserve does it at
/// start-up) and grown by the launcher only past that size (synchronizing `stream` first, since
/// queued kernels may still read the old allocation; counted in `grows`); never shrunk.
struct FlashWorkspace {
  /// Flash-Decoding's split partials: accumulators (n_splits, n_tokens, n_heads, head_dim), then
  /// (m, l) pairs (n_splits, n_tokens, n_heads, 2); empty until a call splits or it is reserved.
  DeviceBuffer<float> partials;
  /// Streaming multiprocessors of the device (the split rule's input), read on first use.
  int sm_count = 0;
  /// Dynamic shared memory a block may opt in to on the device (bytes), read on first use.
  int64_t max_smem_bytes = 0;
  /// True once the SM count is read and the kernels' attributes are set.
  bool configured = false;
  /// cudaFuncSetAttribute calls made for this workspace (all on its first use).
  int64_t attribute_sets = 0;
  /// Times a launch had to grow `partials` (each synchronizes the stream; 0 when reserved).
  int64_t grows = 0;
};

/// Configures `workspace` for the current device now instead of at its first flash_attention()
/// call: reads the SM count and sets the shared-memory attribute of every flash kernel that
/// needs more than 48 KiB (cudaFuncSetAttribute, once; up to what the GPU allows a block).
/// Idempotent. Throws CudaError if a query or the attribute call fails.
void configure_flash_attention(FlashWorkspace& workspace);

/// (row, head) query vectors one flash_attention() block holds, from the batch's shape: decode
/// (max_query_len <= kFlashDecodeMaxQueryLen) 4 when group x max_query_len <= 4 (group = n_heads /
/// n_kv_heads: a GQA-3 or MQA-4 decode row), else 8; prefill 64, or 32 when head_dim > 128 (the
/// accumulators stay in registers). Host-only arithmetic, no GPU needed. Throws InvalidArgument
/// unless n_heads is a positive multiple of n_kv_heads > 0, max_query_len >= 1 and
/// 0 < head_dim <= kFlashAttentionMaxHeadDim.
int64_t flash_attention_vectors_per_block(int64_t max_query_len, int64_t n_heads, int64_t n_kv_heads,
                                          int64_t head_dim);

/// Query rows (of one sequence) one flash_attention() block holds: its vectors
/// (flash_attention_vectors_per_block()) shared among the group's heads: vectors / min(group,
/// vectors). This is the query tile Br. Host-only arithmetic; throws as
/// flash_attention_vectors_per_block().
int64_t flash_attention_rows_per_block(int64_t max_query_len, int64_t n_heads, int64_t n_kv_heads,
                                       int64_t head_dim);

/// Number of Flash-Decoding splits flash_attention() uses, from the batch's shape alone (never
/// the context length, so a decode step's grid is the same at every length: what a CUDA graph
/// needs). The rule: none (1) unless max_query_len <= kFlashDecodeMaxQueryLen. Otherwise the
/// blocks without splits (n_seqs x query tiles x KV heads x head chunks) are multiplied until
/// they fill every SM twice (2 x sm_count blocks: a full wave plus room to hide the tail), at most
/// kFlashMaxSplits:  splits = clamp(ceil(2 sm_count / blocks), 1, kFlashMaxSplits).
/// On the device each block then cuts the keys its tile sees into that many ranges of whole
/// kFlashKeyTile tiles (flash_split.cuh): a short context leaves the later splits empty (they
/// write only their running max, -inf, which the merge skips), a long one gives every split
/// ceil(keys / splits) keys rounded up to a tile. At batch 1 on a 132-SM card a GQA 9/3 decode row
/// gets 64 splits: 4,096 keys run as 192 blocks of 64 keys, not 3 blocks of 4,096.
/// Host-only arithmetic, no GPU needed. Throws InvalidArgument for non-positive arguments, as
/// flash_attention_vectors_per_block().
int64_t flash_attention_splits(int64_t max_query_len, int64_t n_seqs, int64_t n_heads, int64_t n_kv_heads,
                               int64_t head_dim, int64_t sm_count);

/// Floats of FlashWorkspace::partials a call with `n_splits` splits over n_tokens rows needs:
/// n_splits x n_tokens x n_heads x (head_dim + 2), or 0 without splits. Host-only arithmetic.
/// Throws InvalidArgument for n_splits, n_heads or head_dim < 1 or n_tokens < 0.
int64_t flash_attention_workspace_floats(int64_t n_splits, int64_t n_tokens, int64_t n_heads, int64_t head_dim);

/// FlashAttention-2 forward (Dao 2023, Algorithm 1) over the paged f32 pool, for a batch mixing
/// prefill chunks and decode rows: the contract of paged_attention() (same q, pool, index arrays
/// and GQA mapping) plus
///   causal: row i at position p sees keys 0 .. p (true), or all seq_lens[s] keys (false);
///   lse: (n_tokens, n_heads) each row's logsumexp m + log(l) of the scaled scores, natural log,
///        or null (not written);
///   max_query_len: the longest query_len(s) in the batch (host int: the grid is sized without
///        reading the device); a smaller value leaves rows unwritten (not checked);
///   workspace: the caller's scratch (split partials), grown on demand;
///   split_kv: false forces one block per row's keys (no Flash-Decoding; the benchmark's
///        "without");
///   window: sliding window (0: none), causal only: row p sees keys p - window + 1 .. p, and key
///        tiles wholly before a query tile's window are never loaded (the splits cut only the
///        keys the tile sees), as the CPU kernel's skip_window_tiles;
///   trees: the batch's draft trees (DraftTrees; tree verification, issue 63): a tree row sees
///        the keys before its tree and its ancestors' only, a window counted from its real
///        position; the causal tile skipping on the linear positions stays (a superset).
/// Work layout: grid (sequence, query tile x split, KV head x head chunk); a block of 128
/// threads holds a query tile of Br = flash_attention_rows_per_block() rows times the group's
/// heads (so each K/V tile is gathered through the block table into shared memory ONCE per
/// group), walks key tiles of 32 with the online softmax per (row, head) (running m, l and a
/// register accumulator), skips key tiles wholly above the diagonal (causal) and masks the rest
/// per key. Decode (max_query_len <= kFlashDecodeMaxQueryLen): 4 or 8 query vectors per block,
/// and each row's keys split into flash_attention_splits() ranges processed by different blocks
/// (Flash-Decoding), each writing its partial (m, l, acc) to the workspace; a merge kernel then
/// combines them per (row, head): out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
/// The grid depends on n_seqs, max_query_len and the model's shape only, not on the context.
/// Shared memory: (Q tile + K + V + P) floats, up to 101 KiB (32 vectors at head_dim 256; opt-in
/// beyond 48 KiB, sm_80+, set once per workspace). f32 throughout, summed in another order than
/// paged_attention_reference (test_cuda_flash_attention holds it to 1e-4 of the outputs' scale).
/// Preconditions (throw InvalidArgument): paged_attention()'s, with 0 < head_dim <=
/// kFlashAttentionMaxHeadDim; 1 <= max_query_len <= n_tokens when n_tokens > 0; 0 <= window <=
/// INT32_MAX, and window 0 unless causal; n_kv_heads and
/// the grid's other dimensions within 65535. Throws CudaError if a launch or allocation fails,
/// UnsupportedError if the GPU's per-block shared memory is below a tile's.
void flash_attention(const float* q, const float* k_pool, const float* v_pool, float* out,
                     float* lse, const int32_t* query_start_loc, const int32_t* seq_lens,
                     const int32_t* block_tables, int64_t n_tokens, int64_t n_seqs,
                     int64_t max_blocks_per_seq, int64_t block_size, int64_t n_heads,
                     int64_t n_kv_heads, int64_t head_dim, float scale, bool causal,
                     int64_t max_query_len, FlashWorkspace& workspace, cudaStream_t stream,
                     bool split_kv = true, int64_t window = 0, DraftTrees trees = {});

/// Standard attention, flash_attention()'s naive twin (Vaswani et al. 2017, eq. 1; "standard
/// attention implementation", Dao et al. 2022, Algorithm 0), on the same arguments: for each
/// sequence in turn, S = scale Q K^T is materialized in device memory as (n_heads, query_len,
/// n_keys) (causal: -inf above the diagonal), softmaxed row by row in place (max subtracted),
/// then out = P V. One thread per score, one block per softmax row, one thread per output
/// element; three launches per sequence. `scores` is the caller's buffer for S, grown (after
/// synchronizing `stream`) to n_heads x max_scores_per_head floats, where max_scores_per_head is
/// the largest query_len(s) x seq_lens[s] of the batch when the caller knows it (the host batch:
/// CudaBackend), or 0 for the bound max_query_len x max_blocks_per_seq x block_size. A value
/// below some sequence's query_len x seq_len overruns the buffer (not checked on the device, as
/// the index arrays are not). Returns the bytes of S this call needed: the O(N^2) memory
/// FlashAttention avoids. `window` and `trees` as flash_attention() (S keeps its masked scores:
/// -inf before the window and on keys outside a tree row's path). Same preconditions and errors as flash_attention(), plus
/// InvalidArgument for max_scores_per_head < 0 or above the bound.
int64_t naive_attention(const float* q, const float* k_pool, const float* v_pool, float* out,
                        float* lse, const int32_t* query_start_loc, const int32_t* seq_lens,
                        const int32_t* block_tables, int64_t n_tokens, int64_t n_seqs,
                        int64_t max_blocks_per_seq, int64_t block_size, int64_t n_heads,
                        int64_t n_kv_heads, int64_t head_dim, float scale, bool causal,
                        int64_t max_query_len, DeviceBuffer<float>& scores, cudaStream_t stream,
                        int64_t max_scores_per_head = 0, int64_t window = 0, DraftTrees trees = {});

}  // namespace lio::cuda
