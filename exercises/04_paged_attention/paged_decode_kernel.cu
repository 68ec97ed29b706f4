// Chapter 04, Task 6 — YOUR kernel: decode attention on a GPU, every sequence's one new query
// token against its whole context, read from the paged KV pool through its block table (Kwon et
// al. 2023, "PagedAttention", section 4.1), f32, grouped-query attention.
// Given, not yours: the launcher (kernels/cuda/paged_decode.cu: shapes checked, grid, block and
// shared memory chosen) and the launch shape (kernels/cuda/paged_decode.h). Yours: everything
// between the braces below. Lesson: docs/04_paged_attention.md, section 6, "Your kernel".
// Grade: scripts/grade.sh 04, or ctest -R ch04_task_6. It runs on an NVIDIA GPU only: without
// one the test is not built or skips (scripts/gpu_check.sh grades it on a lent card).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "paged_decode.h"

namespace lio::cuda {

/// Task 6 (chapter 04): decode attention over the paged pool for ONE sequence and up to
/// kPagedDecodeWarps query heads of ONE KV head's group per thread block. Launched only by
/// launch_paged_decode (kernels/cuda/paged_decode.cu, given), which has checked every shape.
/// Inputs (device memory, row-major):
///   q      (n_seqs, n_heads, head_dim) f32       row s: sequence s's new token, position
///                                                seq_lens[s] - 1
///   k_pool, v_pool (n_blocks, block_size, n_kv_heads, head_dim) f32: position j of sequence s
///                                                lives in block block_tables[s, j / block_size]
///                                                at offset j % block_size (Task 1's slots)
///   block_tables (n_seqs, max_blocks_per_seq) int32; seq_lens (n_seqs) int32, each >= 1
///   out    (n_seqs, n_heads, head_dim) f32       every element of this block's heads is written
///   head_dim a multiple of 32, at most kPagedDecodeMaxHeadDim (128); n_heads a multiple of
///   n_kv_heads. Table entries past the blocks of positions < seq_lens[s], and pool slots past
///   seq_lens[s] - 1 in the last block, may hold anything (NaN, ids out of range): read none.
/// Launch shape (paged_decode.h): block (blockIdx.x, blockIdx.y, blockIdx.z) serves sequence
/// s = blockIdx.x and KV head g = blockIdx.y; with group = n_heads / n_kv_heads, its warp w
/// serves query head g * group + kPagedDecodeWarps * blockIdx.z + w when kPagedDecodeWarps *
/// blockIdx.z + w < group (warps past the group's end serve none). kPagedDecodeThreads threads;
/// paged_decode_smem_bytes(head_dim) bytes of dynamic shared memory (`extern __shared__`), laid
/// out as that function says: a K tile and a V tile of kPagedDecodeKeys keys at
/// head_dim + kPagedDecodeKeyPad floats a key, then kPagedDecodeWarps query vectors.
/// Must hold:
///   out[s, h] = sum over j < seq_lens[s] of softmax_j(scale q[s, h] . k[s, j, g]) v[s, j, g],
///     k[s, j, g] the pool's row of position j of sequence s, KV head g = h / group:
///     cpu::paged_attention_reference's output to f32 rounding, finite even where scale q . k
///     reaches hundreds (far past expf's range);
///   K and V reach the arithmetic through shared memory, one tile of kPagedDecodeKeys
///     consecutive positions at a time, staged once for all the block's heads;
///   after folding each tile, each served head's running max, sum and weighted sum (in
///     registers) cover every position it has seen so far; out is the weighted sum over the sum.
/// Lesson: docs/04_paged_attention.md, section 6, "Your kernel", and "Task 6".
__global__ void __launch_bounds__(kPagedDecodeThreads)
paged_decode_kernel(const float* __restrict__ q,               // (n_seqs, n_heads, head_dim)
                    const float* __restrict__ k_pool,          // (n_blocks, block_size, n_kv_heads, head_dim)
                    const float* __restrict__ v_pool,          // (n_blocks, block_size, n_kv_heads, head_dim)
                    float* __restrict__ out,                   // (n_seqs, n_heads, head_dim)
                    const int32_t* __restrict__ block_tables,  // (n_seqs, max_blocks_per_seq)
                    const int32_t* __restrict__ seq_lens,      // (n_seqs)
                    int max_blocks_per_seq, int block_size, int n_heads, int n_kv_heads,
                    int head_dim, float scale) {
  // TODO(Task 6): one thread block = one sequence's KV head and up to 4 of its query heads, one
  //   warp each (the doc comment above). Walk the sequence's context a tile of 32 positions at a
  //   time: find each position's pool row through the block table, stage the tile's K and V
  //   rows in the dynamic shared memory for all the block's warps, keep each head's running
  //   softmax state in registers across the tiles, and write every output of the block's heads.
  //   Plan on paper first: which thread copies which floats of a tile, which key and which
  //   dimensions each lane works on, what stays in registers, and where the barriers go. The
  //   lesson's worked example has the numbers for SmolLM2 (head_dim 64, block size 16).
  //   Lesson: docs/04_paged_attention.md, section 6, "Your kernel", and "Task 6".
  (void)q, (void)k_pool, (void)v_pool, (void)block_tables, (void)seq_lens,
      (void)max_blocks_per_seq, (void)block_size, (void)n_heads, (void)n_kv_heads, (void)head_dim,
      (void)scale;
  // Until then: no attention is computed, and the first output is NaN so that none looks done.
  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0) {
    printf(
        "Task 6 (exercises/04_paged_attention/paged_decode_kernel.cu): paged_decode_kernel — "
        "not written yet; see docs/04_paged_attention.md, Task 6\n");
    out[0] = NAN;
  }
}

}  // namespace lio::cuda
