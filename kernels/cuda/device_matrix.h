// device_matrix.h — a weight matrix in device memory as the GEMV, dequantize, int8 and fused
// kernels read it (gemv.h, dequant.h, gemv_batched.h, gemv_int8.h, gemv_fused.h, matmul.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "lio/dtype.h"

/// CUDA operators of the forward pass (device pointers, explicit stream; one header per kernel
/// concept in kernels/cuda, README.md there) and the helpers beside them.
namespace lio::cuda {

/// A weight matrix W of shape (rows, cols) in device memory, laid out exactly as lio::WeightMatrix
/// (kernels/cpu's view of the same tensor): row r is `row_bytes` bytes of `dtype` elements or
/// 32-element quantized blocks (lio/dtype.h; ggml-common.h block_q8_0/q4_0/q4_1). y = W x maps a
/// cols-vector to a rows-vector. Non-owning: `data` points into memory someone else frees.
struct DeviceMatrix {
  DType dtype = DType::F32;         ///< element or block type of the rows
  int64_t rows = 0;                 ///< out_features
  int64_t cols = 0;                 ///< in_features
  int64_t row_bytes = 0;            ///< dtype_row_bytes(dtype, cols)
  const std::byte* data = nullptr;  ///< (rows, row_bytes) bytes, device memory

  /// Bytes of the whole matrix: rows * row_bytes.
  int64_t size_bytes() const { return rows * row_bytes; }
};

}  // namespace lio::cuda
