// Chapter 07, Task 6 — YOUR kernel: the body of FlashAttention-2's forward pass on a GPU (Dao 2023,
// "FlashAttention-2", Algorithm 1, forward), over contiguous f32 Q, K and V.
// Given, not yours: the launcher (kernels/cuda/flash_forward.cu: shapes checked, grid, block and
// shared memory chosen) and the launch shape (kernels/cuda/flash_forward.h). Yours: everything
// between the braces below. Lesson: docs/07_flash_attention.md, section 9, "Your kernel".
// Grade: scripts/grade.sh 07, or ctest -R ch07_task_6. It runs on an NVIDIA GPU only: without
// one the test is not built or skips (scripts/gpu_check.sh grades it on a lent card).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>

#include "flash_forward.h"

namespace lio::cuda {

/// Task 6 (chapter 07): FlashAttention-2's forward pass (Dao 2023, Algorithm 1) for ONE query tile
/// of ONE head per thread block, causal, with grouped-query attention. Launched only by
/// launch_flash_forward (kernels/cuda/flash_forward.cu, given), which has checked every shape.
/// Inputs (device memory, f32, contiguous, row-major):
///   q    (n_q, n_heads, head_dim)       query row i sits at position start_pos + i
///   k, v (n_ctx, n_kv_heads, head_dim)  positions 0 .. n_ctx - 1, n_ctx >= start_pos + n_q; rows
///                                       past position start_pos + n_q - 1 may hold anything
///                                       (NaN): read none of them
///   out  (n_q, n_heads, head_dim)       every element of this block's rows is written
///   head_dim a multiple of 16, at most kFlashForwardMaxHeadDim (128); n_heads a multiple of
///   n_kv_heads.
/// Launch shape (flash_forward.h): block (blockIdx.x, blockIdx.y) owns query rows blockIdx.x *
/// kFlashForwardRows .. + kFlashForwardRows - 1 (the head's last tile may hold fewer, down to
/// the single row of a decode step) of head h = blockIdx.y, which reads KV head
/// h / (n_heads / n_kv_heads); kFlashForwardThreads threads; flash_forward_smem_bytes(head_dim)
/// bytes of dynamic shared memory (`extern __shared__`), room for one K tile and one V tile of
/// kFlashForwardKeys keys.
/// Must hold:
///   out[i, h] = sum over keys j <= start_pos + i of softmax_j(scale q[i, h] . k[j, g]) v[j, g]:
///     cpu::attention_reference's output to f32 rounding, finite even where scale q . k reaches
///     hundreds (far past expf's range);
///   K and V reach the arithmetic through shared memory, one key tile at a time; no tile past
///     the block's last row's position is loaded;
///   after folding each key tile, each query row's (m, l, acc), in registers, hold the running
///     max, sum and weighted sum over every key it has seen so far; out is acc / l at the end.
/// Lesson: docs/07_flash_attention.md, section 9, "Your kernel", and "Task 6".
__global__ void __launch_bounds__(kFlashForwardThreads)
flash_forward_kernel(const float* __restrict__ q,  // (n_q, n_heads, head_dim)
                     const float* __restrict__ k,  // (n_ctx, n_kv_heads, head_dim)
                     const float* __restrict__ v,  // (n_ctx, n_kv_heads, head_dim)
                     float* __restrict__ out,      // (n_q, n_heads, head_dim)
                     int n_q, int start_pos, int n_heads, int n_kv_heads, int head_dim,
                     float scale) {
  // TODO(Task 6): one thread block = one query tile of one head (the doc comment above). Stage
  //   K and V a tile at a time in the dynamic shared memory, keep each query row's running
  //   (m, l, acc) in registers across the tiles, mask the keys past each row's position, never
  //   load a key the block's rows cannot see, and write every output of the block's rows.
  //   Plan on paper first: which thread owns which row and which dimensions of it, what each
  //   thread keeps in registers, and where the barriers go. The lesson's worked example has the
  //   numbers for head_dim 64.
  //   Lesson: docs/07_flash_attention.md, section 9, "Your kernel", and "Task 6".
  (void)q, (void)k, (void)v, (void)n_q, (void)start_pos, (void)n_heads, (void)n_kv_heads,
      (void)head_dim, (void)scale;
  // Until then: no attention is computed, and the first output is NaN so that none looks done.
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    printf(
        "Task 6 (exercises/07_flash_attention/flash_attention_kernel.cu): flash_forward_kernel — "
        "not written yet; see docs/07_flash_attention.md, Task 6\n");
    out[0] = NAN;
  }
}

}  // namespace lio::cuda
