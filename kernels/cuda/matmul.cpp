// matmul.cpp — y = x W^T on the GPU: gemv for one row (decode), gemv_batched for a few rows
// (a batch of decode steps), cuBLAS SGEMM for many (prefill).
//
// Up to kGemvBatchedMaxRows rows the product is still bound by reading W, so the kernels that
// read each quantized block once and dequantize it in registers win. Prefill multiplies
// hundreds of tokens at once, so each weight is reused n times and the product is
// compute-bound: a tuned GEMM library wins over anything written for this course (chapter 03
// revisits quantized GEMM). Quantized W is first dequantized to an f32 scratch matrix (one
// extra read+write of W, small next to the GEMM for n in the hundreds).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>

#include "cublas_handle.h"
#include "dequant.h"
#include "device_matrix.h"
#include "gemv.h"
#include "gemv_batched.h"
#include "matmul.h"
#include "lio/error.h"

namespace lio::cuda {

void matmul(const CublasHandle& cublas, const DeviceMatrix& w, const float* x, float* y,
            int64_t n, bool accumulate, float* scratch, int64_t scratch_floats,
            cudaStream_t stream) {
  if (n < 0 || n > INT_MAX) {
    throw InvalidArgument("cuda::matmul: need 0 <= n <= INT32_MAX, got " + std::to_string(n));
  }
  if (n == 0) return;
  if (n == 1) {
    gemv(w, x, y, accumulate, stream);
    return;
  }
  if (n <= kGemvBatchedMaxRows) {
    gemv_batched(w, x, y, n, accumulate, stream);
    return;
  }
  if (x == nullptr || y == nullptr) throw InvalidArgument("cuda::matmul: null x or y");
  const float* w_f32 = reinterpret_cast<const float*>(w.data);
  if (w.dtype != DType::F32) {
    if (scratch == nullptr || scratch_floats < w.rows * w.cols) {
      throw InvalidArgument("cuda::matmul: '" + std::string(dtype_info(w.dtype).name) + "' weights (" +
                            std::to_string(w.rows) + " x " + std::to_string(w.cols) +
                            ") need a scratch of that many floats, got " +
                            std::to_string(scratch_floats));
    }
    dequantize(w, scratch, stream);  // validates w
    w_f32 = scratch;
  } else if (w.data == nullptr || w.rows <= 0 || w.cols <= 0 || w.rows > INT_MAX ||
             w.cols > INT_MAX || w.row_bytes != w.cols * static_cast<int64_t>(sizeof(float))) {
    throw InvalidArgument("cuda::matmul: malformed F32 matrix (" + std::to_string(w.rows) + " x " +
                          std::to_string(w.cols) + ", row_bytes " + std::to_string(w.row_bytes) + ")");
  }
  // Row-major y (n, R) = x (n, C) W^T (C, R) is column-major y^T (R, n) = W (R, C) x^T (C, n).
  // W's row-major buffer is column-major W^T (ld C), so op(A) = T; x^T is x's buffer as is.
  const int rows = static_cast<int>(w.rows);
  const int cols = static_cast<int>(w.cols);
  const float alpha = 1.0f;
  const float beta = accumulate ? 1.0f : 0.0f;
  cublas.bind_stream(stream);  // the stream, then our workspace again (cublasSetStream resets it)
  check_cublas(cublasSgemm(cublas.get(), CUBLAS_OP_T, CUBLAS_OP_N, rows, static_cast<int>(n), cols,
                           &alpha, w_f32, cols, x, cols, &beta, y, rows),
               "cublasSgemm");
}

}  // namespace lio::cuda
