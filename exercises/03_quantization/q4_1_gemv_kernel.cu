// Chapter 03, Task 7 — YOUR kernel: y = W x on a GPU for a matrix W of ggml's Q4_1 blocks (4-bit
// codes, an f16 scale d and minimum m per 32 weights) and one to eight f32 rows of x: the decode
// step's matrix-vector product, each weight dequantized in registers as it is read.
// Given, not yours: the launcher (kernels/cuda/q4_1_gemv.cu: shapes checked, grid, block and
// shared memory chosen) and the launch shape (kernels/cuda/q4_1_gemv.h). Yours: everything
// between the braces below. Lesson: docs/03_quantization.md, section 7, "Your kernel".
// Grade: scripts/grade.sh 03, or ctest -R ch03_task_7. It runs on an NVIDIA GPU only: without
// one the test is not built or skips (scripts/gpu_check.sh grades it on a lent card).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "q4_1_gemv.h"

namespace lio::cuda {

/// Task 7 (chapter 03): kQ4_1GemvWarps (8) output rows of y = W x per thread block, for every
/// row of x at once. Launched only by launch_q4_1_gemv (kernels/cuda/q4_1_gemv.cu, given), which
/// has checked every shape.
/// Inputs (device memory, row-major):
///   w   (n_rows, n_cols / 32) BlockQ4_1 (lio/dtype.h; ggml's block_q4_1, 20 bytes): block k of
///       row r holds columns 32 k .. 32 k + 31 of the row; element i of a block is
///       d * q_i + m with d and m its f16 fields and q_i in 0 .. 15 its code: the low nibble of
///       qs[i] for i < 16, the high nibble of qs[i - 16] for i >= 16. w is 4-byte aligned.
///   x   (n_batch, n_cols) f32, n_batch in 1 .. kQ4_1GemvMaxBatch (8)
///   y   (n_batch, n_rows) f32, overlapping neither w nor x
///   n_cols a multiple of 32; n_batch x n_cols <= 12,288 (x fits the shared memory)
/// Launch shape (q4_1_gemv.h): block blockIdx.x computes rows kQ4_1GemvWarps * blockIdx.x + w,
/// w = threadIdx.x / 32, those below n_rows (the last block may hold fewer than 8: its other
/// warps write nothing). kQ4_1GemvThreads (256) threads; q4_1_gemv_smem_bytes(n_batch, n_cols)
/// bytes of dynamic shared memory (`extern __shared__`): room for every row of x.
/// Must hold:
///   y[b, r] = sum over c < n_cols of w(r, c) x[b, c], with w(r, c) element c of row r as
///     lio::dequantize_row gives it; plus the old y[b, r] when accumulate (the residual add),
///     and the old y[b, r] never read when not (it may be NaN);
///   within 1e-5 of the exact sum relative to sum over c of (|d q| + |m|) |x[b, c]| (f32
///     arithmetic in any sensible order of summation passes; a wrong code, block, scale or
///     minimum fails);
///   x reaches the arithmetic through shared memory, staged once per block for all its rows;
///   W is streamed once: each weight block is read by one warp, the one of its row, and no
///     dequantized copy of W is written anywhere (registers only);
///   nothing outside y[0 .. n_batch) x [0 .. n_rows) is written.
/// Lesson: docs/03_quantization.md, section 7, "Your kernel", and "Task 7".
__global__ void __launch_bounds__(kQ4_1GemvThreads)
q4_1_gemv_kernel(const BlockQ4_1* __restrict__ w,  // (n_rows, n_cols / 32) Q4_1 blocks
                 const float* __restrict__ x,      // (n_batch, n_cols)
                 float* __restrict__ y,            // (n_batch, n_rows)
                 int n_rows, int n_cols, int n_batch, bool accumulate) {
  // TODO(Task 7): one thread block = 8 consecutive output rows, one warp each (the doc comment
  //   above). Stage x in the dynamic shared memory for the whole block, then let each warp walk
  //   its row's Q4_1 blocks with its 32 lanes, turn codes, d and m into the row's dot product
  //   with each row of x, combine the lanes' partial sums, and write (or add) one output per
  //   row of x. Plan on paper first: which bytes of a block each lane reads, which floats of x
  //   go with them, where the barrier goes and which warps may leave early. The lesson's worked
  //   example has the numbers for SmolLM2's 576 x 576 and 49,152 x 576 matrices.
  //   Lesson: docs/03_quantization.md, section 7, "Your kernel", and "Task 7".
  (void)w, (void)x, (void)n_cols, (void)n_batch, (void)accumulate;
  // Until then: nothing is computed, and the first output is NaN so that none looks done.
  if (blockIdx.x == 0 && threadIdx.x == 0 && n_rows > 0) {
    printf(
        "Task 7 (exercises/03_quantization/q4_1_gemv_kernel.cu): q4_1_gemv_kernel — not "
        "written yet; see docs/03_quantization.md, Task 7\n");
    y[0] = NAN;
  }
}

}  // namespace lio::cuda
