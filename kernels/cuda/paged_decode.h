// paged_decode.h — chapter 04's paged decode-attention kernel: one new query token per sequence
// attends to its whole context, read from the paged KV pool through the sequence's block table
// (Kwon et al. 2023, "PagedAttention", section 4.1), f32, grouped-query attention. The chapter's
// CUDA exercise.
//
// Two halves, two owners:
//   launch_paged_decode   GIVEN (paged_decode.cu): checks the shapes, picks the grid, the block
//                         and the dynamic shared memory below, launches and checks the launch.
//   paged_decode_kernel   Task 6, the BODY is the learner's: exercises|solutions/
//                         04_paged_attention/paged_decode_kernel.cu (lio_ch04_cuda picks which;
//                         the lesson is docs/04_paged_attention.md, section 6, "Your kernel").
// Not on the engine's path: the engine's CUDA attention (paged_attention.cu) serves batches that
// mix prefill chunks and decode rows. This one takes decode rows only, over the same pool layout,
// and is graded against cpu::paged_attention_reference
// (tests/grade/04_paged_attention/test_task_6_cuda_paged_decode.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace lio::cuda {

// ---- the launch shape the kernel is given -------------------------------------------------------
// Each block owns one sequence's KV head and up to kPagedDecodeWarps of the query heads that read
// it (its GQA group, chapter 02), one warp per query head; it walks the sequence's context a tile
// of kPagedDecodeKeys keys at a time, each tile staged in shared memory once for all its heads.

/// Keys of one K (and one V) tile in shared memory: one per lane of a warp.
inline constexpr int kPagedDecodeKeys = 32;
/// Warps of one block, and so the most query heads one block serves.
inline constexpr int kPagedDecodeWarps = 4;
/// Threads of one block.
inline constexpr int kPagedDecodeThreads = kPagedDecodeWarps * 32;
/// Largest head_dim the launcher accepts.
inline constexpr int64_t kPagedDecodeMaxHeadDim = 128;
/// head_dim is a multiple of this (32, 64, 96, 128): a warp's 32 lanes split a row's dimensions
/// evenly, each lane holding head_dim / 32 of them.
inline constexpr int64_t kPagedDecodeHeadDimStep = 32;

/// Floats of padding after each key's head_dim floats in a shared-memory tile: a key then starts
/// head_dim + 1 floats after the previous one, an odd stride, so that 32 lanes reading the same
/// dimension of 32 different keys touch 32 different banks (the lesson's "Your kernel" says why).
inline constexpr int kPagedDecodeKeyPad = 1;

/// Dynamic shared memory one block gets, in bytes: a K tile and a V tile of kPagedDecodeKeys keys
/// at head_dim + kPagedDecodeKeyPad floats each, then kPagedDecodeWarps query vectors of
/// head_dim floats (17,664 B at head_dim 64, 35,072 B at 128). In that order, from the start of
/// the `extern __shared__` array.
constexpr size_t paged_decode_smem_bytes(int64_t head_dim) {
  return (2 * static_cast<size_t>(kPagedDecodeKeys) *
              static_cast<size_t>(head_dim + kPagedDecodeKeyPad) +
          static_cast<size_t>(kPagedDecodeWarps) * static_cast<size_t>(head_dim)) *
         sizeof(float);
}

/// Blocks along the grid's z for one KV head's group of n_heads / n_kv_heads query heads:
/// ceil(group / kPagedDecodeWarps) (1 up to a group of 4; SmolLM2's 3 and Llama-3-70B's 8 give
/// 1 and 2).
constexpr int64_t paged_decode_blocks_per_group(int64_t n_heads, int64_t n_kv_heads) {
  return (n_heads / n_kv_heads + kPagedDecodeWarps - 1) / kPagedDecodeWarps;
}

// ---- the launcher -------------------------------------------------------------------------------

/// Decode attention over the paged pool on the device, with the kernel of Task 6: for each of
/// n_seqs sequences, its one query row (at position seq_lens[s] - 1, its K/V already in the
/// pool) attends to positions 0 .. seq_lens[s] - 1 of its own context. out equals
/// cpu::paged_attention_reference over one row per sequence (query_start_loc = 0, 1, ..,
/// n_seqs) to f32 rounding.
///   q:            (n_seqs, n_heads, head_dim) device pointer, f32; row s is sequence s's token
///   k_pool, v_pool: (n_blocks, block_size, n_kv_heads, head_dim) device pointers, f32: one layer
///                 of the pool; slot = block * block_size + offset (chapter 04, section 2)
///   out:          (n_seqs, n_heads, head_dim) device pointer, written whole; must not overlap
///                 q, k_pool or v_pool
///   block_tables: (n_seqs, max_blocks_per_seq) device pointer, int32; entry b of row s is the
///                 pool block holding positions b * block_size .. b * block_size + block_size - 1
///                 of sequence s (Task 1's convention)
///   seq_lens:     (n_seqs) device pointer, int32: the context of each sequence, new token
///                 included
/// Preconditions the launcher cannot check (they live on the device; the kernel trusts them):
/// 1 <= seq_lens[s] <= max_blocks_per_seq * block_size, and each entry of a table row that holds
/// a position < seq_lens[s] is a block id in 0 .. n_blocks - 1. Entries past those, and pool
/// slots no table reaches, are never read (they may hold anything).
/// Query head h reads KV head h / (n_heads / n_kv_heads) (Ainslie et al. 2023, GQA); scale is
/// usually 1 / sqrt(head_dim).
/// Launch: grid (n_seqs, n_kv_heads, paged_decode_blocks_per_group(n_heads, n_kv_heads)), block
/// kPagedDecodeThreads, dynamic shared memory paged_decode_smem_bytes(head_dim), on `stream`.
/// n_seqs == 0 launches nothing.
/// Throws InvalidArgument before any CUDA call when: n_seqs < 0 or > INT32_MAX (the grid's x);
/// n_blocks, block_size or max_blocks_per_seq < 1, or max_blocks_per_seq x block_size past
/// INT32_MAX (positions are int); n_heads or n_kv_heads < 1, n_heads not a multiple of n_kv_heads,
/// or n_heads > 65,535; head_dim not a multiple of kPagedDecodeHeadDimStep in 32 ..
/// kPagedDecodeMaxHeadDim; the pool's n_blocks x block_size x n_kv_heads x head_dim past int64;
/// scale not finite; a pointer null, or out overlapping q, k_pool or v_pool.
/// Throws CudaError if the launch fails.
void launch_paged_decode(const float* q, const float* k_pool, const float* v_pool, float* out,
                         const int32_t* block_tables, const int32_t* seq_lens, int64_t n_seqs,
                         int64_t n_blocks, int64_t block_size, int64_t max_blocks_per_seq,
                         int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale,
                         cudaStream_t stream);

#ifdef __CUDACC__
/// Task 6: the kernel launch_paged_decode runs. Its contract (inputs, launch shape, what must
/// hold) is the doc comment in exercises/04_paged_attention/paged_decode_kernel.cu, the learner's
/// file; the reference is in solutions/.
__global__ void __launch_bounds__(kPagedDecodeThreads)
paged_decode_kernel(const float* __restrict__ q,               // (n_seqs, n_heads, head_dim)
                    const float* __restrict__ k_pool,          // (n_blocks, block_size, n_kv_heads, head_dim)
                    const float* __restrict__ v_pool,          // (n_blocks, block_size, n_kv_heads, head_dim)
                    float* __restrict__ out,                   // (n_seqs, n_heads, head_dim)
                    const int32_t* __restrict__ block_tables,  // (n_seqs, max_blocks_per_seq)
                    const int32_t* __restrict__ seq_lens,      // (n_seqs)
                    int max_blocks_per_seq, int block_size, int n_heads, int n_kv_heads,
                    int head_dim, float scale);
#endif

}  // namespace lio::cuda
