// matmul.h — y = x W^T on the GPU for any number of rows (matmul.cpp): gemv for one row,
// gemv_batched for a few, dequantize + cuBLAS SGEMM for many.
//
// Launcher conventions (README.md in this folder): device pointers, an explicit stream, shapes
// checked on the host (lio::InvalidArgument), launches checked (lio::cuda::CudaError).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_matrix.h"
#include "gemv_batched.h"

namespace lio::cuda {

class CublasHandle;  // cublas_handle.h

/// y = x W^T for n rows of x, or y += x W^T when `accumulate` — the contract of cpu::matmul
/// on device pointers. x: (n, w.cols); y: (n, w.rows); no overlap.
/// n == 1: gemv() (the weights are read once, dequantized in registers).
/// 2 <= n <= kGemvBatchedMaxRows (decode batches, short chunks): gemv_batched() (W read once
/// per 8 rows, dequantized in registers; no scratch needed).
/// n > kGemvBatchedMaxRows (prefill): W is dequantized into `scratch` (unless it is F32) and
/// multiplied with cublasSgemm — y^T = W x^T in cuBLAS's column-major terms (cuBLAS docs,
/// "cublas<t>gemm()").
/// Every path accumulates in f32 (SGEMM without TF32): agreement with cpu::matmul to ~1e-6 of
/// sum_j |w_j x_j| per output.
/// scratch: device floats, at least w.rows * w.cols when n > kGemvBatchedMaxRows and w is not
/// F32 (otherwise it may be null).
/// Preconditions (throw InvalidArgument): as gemv(), n >= 0 (0 does nothing), n <= INT32_MAX,
/// scratch large enough. Throws CudaError on a launch or cuBLAS failure.
void matmul(const CublasHandle& cublas, const DeviceMatrix& w, const float* x, float* y,
            int64_t n, bool accumulate, float* scratch, int64_t scratch_floats,
            cudaStream_t stream);

}  // namespace lio::cuda
