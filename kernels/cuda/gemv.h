// gemv.h — the decode step's matrix-vector product on the GPU (gemv.cu): every dtype dequantized
// in registers, issue 45's wide Q4_1 reader, and the naive twin.
//
// Launcher conventions (README.md in this folder): device pointers, an explicit stream, shapes
// checked on the host (lio::InvalidArgument), launches checked (lio::cuda::CudaError).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_matrix.h"

namespace lio::cuda {

/// Largest `cols` for which gemv() stages x in shared memory (48 KiB, the default per-block
/// limit, of floats); wider rows read x through L1/L2 instead.
inline constexpr int64_t kGemvMaxSharedCols = 48 * 1024 / 4;

/// Matrix-vector product, the decode-step matmul: y = W x, or y += W x when `accumulate`
/// (fuses the residual add: x_resid += W_o attn). w: (rows, cols) any supported dtype;
/// x: (cols) f32; y: (rows) f32; device pointers; y must not overlap x.
/// One warp per output row; lane l reads 8 consecutive weights at columns l*8 + 256*i, so a warp
/// covers 8 quantized blocks per step and dequantizes them in registers (no f32 copy of W).
/// x is staged in shared memory when cols <= kGemvMaxSharedCols. Accumulates in f32, in another
/// order than cpu::matmul: agreement to ~1e-6 of sum_j |w_j x_j| per row.
/// Preconditions (throw InvalidArgument): non-null pointers; rows, cols > 0 and <= INT32_MAX;
/// cols a multiple of 32 for quantized dtypes; row_bytes == dtype_row_bytes(dtype, cols).
/// Throws CudaError if the launch fails.
void gemv(const DeviceMatrix& w, const float* x, float* y, bool accumulate, cudaStream_t stream);

/// Whether gemv_q4_1_wide() takes `w`: Q4_1, cols a multiple of 32 and <= kGemvMaxSharedCols,
/// data and row_bytes 4-byte aligned (the 32-bit loads). Host-only, no GPU needed.
bool gemv_wide_supports(const DeviceMatrix& w);

/// gemv() for a Q4_1 matrix with issue 45's wide reader: each lane reads one 32-bit word of a
/// block's codes and one of its d and m (detail::q4_1_word_dot), so every weight byte is read once
/// with a quarter of the load instructions, where gemv()'s lanes read each code byte twice, one byte
/// at a time. Same results as gemv() up to summation order. Throws InvalidArgument as gemv() and
/// when !gemv_wide_supports(w); CudaError if the launch fails.
void gemv_q4_1_wide(const DeviceMatrix& w, const float* x, float* y, bool accumulate, cudaStream_t stream);

/// Same contract as gemv(); one thread per row, elements dequantized one at a time in column
/// order (the CPU's scalar loop). The reference gemv() is tested against.
void gemv_naive(const DeviceMatrix& w, const float* x, float* y, bool accumulate,
                cudaStream_t stream);

}  // namespace lio::cuda
