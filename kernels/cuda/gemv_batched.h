// gemv_batched.h — the small-batch matmul on the GPU (gemv_batched.cu): a few rows of x against W
// read once per pass, and the naive twin.
//
// Launcher conventions (README.md in this folder): device pointers, an explicit stream, shapes
// checked on the host (lio::InvalidArgument), launches checked (lio::cuda::CudaError).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_matrix.h"

namespace lio::cuda {

/// Most x rows matmul() sends to gemv_batched(); more go to dequantize + cuBLAS. Up to ~16
/// tokens a step is still bound by reading W (2 * 16 FLOPs per weight is far below an H100's
/// ~100 FLOPs per byte), so reading it once beats dequantizing it to an f32 copy first.
inline constexpr int64_t kGemvBatchedMaxRows = 16;

/// x rows gemv_batched() keeps in registers per pass over W: each lane holds 8 dequantized
/// weights and one accumulator per row, so W is read once per group of this many rows.
inline constexpr int64_t kGemvBatchedRowsPerPass = 8;

/// Largest `cols` for which gemv_batched() stages a group of x rows in shared memory
/// (kGemvBatchedRowsPerPass rows of cols floats, padded to a multiple of 4, in the default
/// 48 KiB); wider rows read x through L1/L2 instead.
inline constexpr int64_t kGemvBatchedMaxSharedCols = 48 * 1024 / 4 / kGemvBatchedRowsPerPass;

/// The small-batch matmul: y = x W^T, or y += x W^T when `accumulate`, for a few rows of x
/// (decode steps of a batch of sequences, short prefill chunks).
/// w: (rows, cols) any dtype gemv() supports; x: (n_rows, cols) f32; y: (n_rows, rows) f32;
/// device pointers; y must not overlap x.
/// Work layout: one warp per output row (weight row), lanes over columns as in gemv(); each
/// lane dequantizes its 8 weights once into registers (detail::Weights8) and multiplies them
/// with up to kGemvBatchedRowsPerPass x rows staged in shared memory, one accumulator per row.
/// W is read once per group of 8 rows (twice for 9..16 rows; the second read mostly hits L2).
/// Per x row the arithmetic is gemv()'s, in the same order (same lane/column mapping, same
/// detail::Weights8::dot, same warp reduction), so it agrees with gemv() on that row to a few
/// ulp (bitwise unless the compiler contracts differently), and with cpu::matmul to ~1e-6 of
/// sum_j |w_j x_j| per output (f32 accumulation in another order than the CPU's).
/// Preconditions (throw InvalidArgument): as gemv(), and 0 <= n_rows <= INT32_MAX (0 launches
/// nothing). Any n_rows works; matmul() sends it 2 .. kGemvBatchedMaxRows.
/// Throws CudaError if the launch fails.
void gemv_batched(const DeviceMatrix& w, const float* x, float* y, int64_t n_rows,
                  bool accumulate, cudaStream_t stream);

/// Same contract as gemv_batched(): gemv_naive() launched once per x row (one thread per
/// output, column order, W read n_rows times). The reference gemv_batched() is tested against.
void gemv_batched_naive(const DeviceMatrix& w, const float* x, float* y, int64_t n_rows,
                        bool accumulate, cudaStream_t stream);

}  // namespace lio::cuda
