// dequant.h — quantized weights to f32 on the GPU (dequant.cu): the embedding gather and the whole
// matrix (what cuBLAS multiplies in matmul()).
//
// Launcher conventions (README.md in this folder): device pointers, an explicit stream, shapes
// checked on the host (lio::InvalidArgument), launches checked (lio::cuda::CudaError).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_matrix.h"

namespace lio::cuda {

/// Gathers rows of an embedding table, dequantized to f32: out[t] = table[tokens[t]].
/// table: (vocab, dim) DeviceMatrix of any supported dtype (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
/// Q5_0, Q5_1, Q4_K, Q6_K);
/// tokens: (n_tokens) int32 device pointer; out: (n_tokens, table.cols) device pointer.
/// Token ids are NOT range-checked on the device (the caller checks them on the host, as
/// Model::forward does); an id outside [0, table.rows) reads out of bounds, except -1, which gives
/// a row of zeros (a token another tensor-parallel rank embeds; chapter 08).
/// Dequantization evaluates lio::dequantize_row's formula in f32 and is exact: d (f16, 11
/// significant bits) times q (<= 8 bits) fits f32's 24 (Q6_K's d * scale * (q - 32): 11 + 7 + 5
/// bits), so Q4_1's d*q + m rounds once whether or
/// not nvcc fuses it into an FMA. Results equal cpu::embedding_row bit for bit. Preconditions (throw InvalidArgument): non-null pointers,
/// a valid matrix (see gemv()), 0 <= n_tokens <= INT32_MAX. Throws CudaError if the launch fails.
void embedding(const DeviceMatrix& table, const int32_t* tokens, float* out, int64_t n_tokens,
               cudaStream_t stream);

/// Dequantizes the whole matrix to f32: out (w.rows, w.cols), row-major, device pointer.
/// Bit-equal to lio::dequantize_row per row (see embedding()). Feeds cuBLAS SGEMM in matmul().
/// Preconditions and errors as embedding().
void dequantize(const DeviceMatrix& w, float* out, cudaStream_t stream);

}  // namespace lio::cuda
