// q4_1_gemv.h — chapter 03's Q4_1 GEMV kernel: y = W x for a matrix W of ggml's Q4_1 blocks
// (lio/dtype.h, BlockQ4_1) and one to kQ4_1GemvMaxBatch f32 rows of x, the decode step's
// matrix-vector product on 4-bit weights, dequantized in registers. The chapter's CUDA exercise.
//
// Two halves, two owners:
//   launch_q4_1_gemv   GIVEN (q4_1_gemv.cu): checks the shapes and pointers, picks the grid, the
//                      block and the dynamic shared memory below, launches and checks the launch.
//   q4_1_gemv_kernel   Task 7, the BODY is the learner's: exercises|solutions/03_quantization/
//                      q4_1_gemv_kernel.cu (lio_ch03_cuda picks which; the lesson is
//                      docs/03_quantization.md, section 7, "Your kernel").
// Not on the engine's path: the engine's Q4_1 matmuls run gemv.cu (every dtype, with a wider
// reader behind --fused-kernels) and gemv_batched.cu. This one takes Q4_1 only, is graded against
// lio::dequantize_row and a double-precision product
// (tests/grade/03_quantization/test_task_7_cuda_q4_1_gemv.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "lio/dtype.h"

namespace lio::cuda {

// ---- the launch shape the kernel is given -------------------------------------------------------
// Each block owns kQ4_1GemvWarps consecutive output rows, one warp per row, and stages every row
// of x in shared memory once for all of them.

/// Warps of one block, and so the output rows one block computes (one row a warp).
inline constexpr int kQ4_1GemvWarps = 8;
/// Threads of one block.
inline constexpr int kQ4_1GemvThreads = kQ4_1GemvWarps * 32;
/// Most rows of x one launch multiplies (decode batches of 1 .. 8 tokens).
inline constexpr int64_t kQ4_1GemvMaxBatch = 8;
/// Most dynamic shared memory a launch asks for: the 48 KiB a kernel gets without opting in
/// (CUDA C++ Programming Guide, "Shared Memory"). x takes n_batch x n_cols x 4 bytes of it, so
/// n_batch x n_cols is at most 12,288 (one row of 12,288 columns, or 8 rows of SmolLM2's 1,536).
inline constexpr size_t kQ4_1GemvMaxSmemBytes = 48 * 1024;
/// Bytes of one Q4_1 block of 32 weights: f16 d, f16 m, 16 bytes of 4-bit codes.
inline constexpr int64_t kQ4_1BlockBytes = sizeof(BlockQ4_1);
static_assert(kQ4_1BlockBytes == 20 && kQuantBlockElems == 32, "ggml's block_q4_1");

/// Dynamic shared memory one block gets, in bytes: every row of x, n_batch x n_cols floats,
/// row-major from the start of the `extern __shared__` array (2,304 B for one row of 576
/// columns; 49,152 B, the most, for 8 rows of 1,536).
constexpr size_t q4_1_gemv_smem_bytes(int64_t n_batch, int64_t n_cols) {
  return static_cast<size_t>(n_batch) * static_cast<size_t>(n_cols) * sizeof(float);
}

/// Blocks of the grid for n_rows output rows: ceil(n_rows / kQ4_1GemvWarps) (72 for SmolLM2's
/// 576 rows, 6,144 for its 49,152-row LM head).
constexpr int64_t q4_1_gemv_blocks(int64_t n_rows) {
  return (n_rows + kQ4_1GemvWarps - 1) / kQ4_1GemvWarps;
}

// ---- the launcher -------------------------------------------------------------------------------

/// y = W x (or y += W x) on the device, with the kernel of Task 7, for each of n_batch rows of x:
///   y[b, r] = sum over c < n_cols of w(r, c) x[b, c]   (+ the old y[b, r] when accumulate)
/// where w(r, c) = d * q + m is element c of row r dequantized as lio::dequantize_row does
/// (block c / 32 of the row, code q of its element c % 32, ggml's nibble order).
///   w:  (n_rows, n_cols / 32) BlockQ4_1 device pointer, row-major: row r is n_cols / 32 blocks,
///       20 bytes each (n_cols / 32 x 20 bytes a row); 4-byte aligned (cudaMalloc's is)
///   x:  (n_batch, n_cols) device pointer, f32
///   y:  (n_batch, n_rows) device pointer, f32: with accumulate false every element is written
///       and its old value never read; with accumulate true each element gets W x added. Must not
///       overlap w or x.
///   n_rows >= 0 (output features; 0 launches nothing), n_cols a multiple of 32 (input features),
///   n_batch in 1 .. kQ4_1GemvMaxBatch, n_batch x n_cols x 4 bytes at most kQ4_1GemvMaxSmemBytes.
/// Launch: grid q4_1_gemv_blocks(n_rows), block kQ4_1GemvThreads, dynamic shared memory
/// q4_1_gemv_smem_bytes(n_batch, n_cols), on `stream` (asynchronous, like any launch).
/// Throws InvalidArgument before any CUDA call when: n_rows < 0 or > INT32_MAX; n_cols < 32, not
/// a multiple of 32 or past INT32_MAX; n_batch outside 1 .. kQ4_1GemvMaxBatch; x past the shared
/// memory limit; a pointer null (n_rows > 0), w not 4-byte aligned, or y overlapping w or x.
/// Throws CudaError if the launch fails.
/// Source for the layout: ggml's ggml-common.h, block_q4_1 (lio/dtype.h mirrors it).
void launch_q4_1_gemv(const BlockQ4_1* w, const float* x, float* y, int64_t n_rows, int64_t n_cols,
                      int64_t n_batch, bool accumulate, cudaStream_t stream);

#ifdef __CUDACC__
/// Task 7: the kernel launch_q4_1_gemv runs. Its contract (inputs, launch shape, what must hold)
/// is the doc comment in exercises/03_quantization/q4_1_gemv_kernel.cu, the learner's file; the
/// reference is in solutions/.
__global__ void __launch_bounds__(kQ4_1GemvThreads)
q4_1_gemv_kernel(const BlockQ4_1* __restrict__ w,  // (n_rows, n_cols / 32) Q4_1 blocks
                 const float* __restrict__ x,      // (n_batch, n_cols)
                 float* __restrict__ y,            // (n_batch, n_rows)
                 int n_rows, int n_cols, int n_batch, bool accumulate);
#endif

}  // namespace lio::cuda
