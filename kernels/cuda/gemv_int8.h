// gemv_int8.h — int8 activations on the GPU (gemv_int8.cu; chapter 03: W8A8 / W4A8): x rounded to
// int8 codes, then integer dot products against the quantized weights.
//
// Launcher conventions (README.md in this folder): device pointers, an explicit stream, shapes
// checked on the host (lio::InvalidArgument), launches checked (lio::cuda::CudaError).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_matrix.h"
#include "lio/dtype.h"

namespace lio::cuda {

/// Whether gemv_int8() takes `dtype`: every block-quantized dtype (not F32, F16, BF16).
constexpr bool has_int8_kernel(DType dtype) {
  return dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16;
}

/// How quantize_activations_int8() groups x for its scales.
enum class ActivationGroup {
  Block32,  ///< one scale per 32-element block (ggml's Q8 activations; --activations int8)
  Token,    ///< one scale per row (SmoothQuant's per-token W8A8; --activations int8-token)
};

/// Rounds x (n_rows, cols) to int8 codes qx (n_rows, cols) with scales dx (n_rows, cols / 32),
/// x ~ dx[r][c / 32] * qx[r][c]:
///   Block32: d = max|x_block| / 127, qx = rint(x * (1 / d)) (half to even; 0 when d == 0) —
///            cpu::packed_matmul's Int8 rounding (kernels/cpu/packed_matmul.cpp, quantize_rows);
///   Token:   s = max|x_row| / 127, qx = round(x / s) (half away from zero; 0 when s == 0) —
///            chapter 03's quantize_row_int8, the CPU's Int8PerToken; dx repeats s per block.
/// So the CPU and CUDA backends round the same x to the same codes. One warp per 32-element
/// block (Block32) or one block of 256 threads per row (Token). Device pointers; cols a
/// positive multiple of 32 (every quantized dtype's rows are). Non-finite x is not checked.
/// Preconditions (throw InvalidArgument): non-null pointers, 0 <= n_rows <= INT32_MAX, 0 < cols
/// <= INT32_MAX, cols % 32 == 0. Throws CudaError if the launch fails.
void quantize_activations_int8(const float* x, int64_t n_rows, int64_t cols, ActivationGroup group, int8_t* qx,
                               float* dx, cudaStream_t stream);

/// y = x W^T, or y += x W^T when `accumulate`, with x already rounded to int8
/// (quantize_activations_int8): integer dot products of w's codes and x's codes, four at a
/// time (__dp4a, sm_61+), each 8-element group scaled once:
///   y[r][j] = sum over groups g of dx[r][g / 4] * (d_w * sum_i c_w qx + m_w * sum_i qx)
/// (detail::Codes8; Dettmers et al. 2022 / Xiao et al. 2023 for W8A8, ggml's vec_dot_q4_1_q8_1
/// for the minimum term). w: (rows, cols) Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K or Q6_K; qx:
/// (n_rows, cols) int8; dx: (n_rows, cols / 32); y: (n_rows, rows) f32; device pointers.
/// Work layout: gemv_batched()'s — one warp per weight row, lanes over 8-column groups, each
/// group's weights decoded once per pass of up to kGemvBatchedRowsPerPass x rows; larger
/// n_rows run more passes in the same launch (no cuBLAS: prefill stays integer, so the
/// rounding a run measures is the same at every batch size).
/// Preconditions (throw InvalidArgument): a usable matrix of one of those dtypes, non-null
/// pointers, 0 <= n_rows <= INT32_MAX (0 launches nothing). Throws CudaError if the launch fails.
void gemv_int8(const DeviceMatrix& w, const int8_t* qx, const float* dx, float* y, int64_t n_rows, bool accumulate,
               cudaStream_t stream);

}  // namespace lio::cuda
