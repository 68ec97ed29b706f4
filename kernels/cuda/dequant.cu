// dequant.cu — embedding gather and whole-matrix dequantization on the GPU.
//
// Both walk rows element by element with detail::load_element (the dequantize_row formula), one
// block per row: consecutive threads read consecutive elements, so loads coalesce. The
// embedding gather reads one row per token (the decode step reads 1 row of 49152: a few
// hundred bytes); dequantize() feeds cuBLAS SGEMM during prefill.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "dequant.h"
#include "device_matrix.h"
#include "lio/error.h"
#include "quant.cuh"

namespace lio::cuda {

namespace {

constexpr int kRowThreads = 256;

// ---- kernels --------------------------------------------------------------------------------

/// Grid: (n_out_rows). Block: (kRowThreads). Output row r is source row rows[r] (or r when
/// rows is null), dequantized to f32.
template <DType kType>
__global__ void __launch_bounds__(kRowThreads)
gather_rows_kernel(const std::byte* w,     // (n_src_rows, row_bytes) in kType
                   int64_t row_bytes,      // bytes per source row
                   int cols,               // elements per row
                   const int32_t* rows,    // (n_out_rows) source row ids, or null = identity
                   float* out) {           // (n_out_rows, cols)
  const int64_t r = blockIdx.x;
  const int64_t src = rows != nullptr ? rows[r] : r;
  float* out_row = out + r * cols;
  if (src < 0) {  // a token another tensor-parallel rank embeds (chapter 08): zeros
    for (int c = threadIdx.x; c < cols; c += kRowThreads) out_row[c] = 0.0f;
    return;
  }
  const std::byte* row = w + src * row_bytes;
  for (int c = threadIdx.x; c < cols; c += kRowThreads) {
    out_row[c] = detail::load_element<kType>(row, c);
  }
}

void launch_gather(const DeviceMatrix& w, const int32_t* rows, float* out, int64_t n_out_rows,
                   cudaStream_t stream) {
  detail::dispatch_dtype(w.dtype, [&]<DType kType>() {
    gather_rows_kernel<kType><<<static_cast<unsigned>(n_out_rows), kRowThreads, 0, stream>>>(
        w.data, w.row_bytes, static_cast<int>(w.cols), rows, out);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void embedding(const DeviceMatrix& table, const int32_t* tokens, float* out, int64_t n_tokens,
               cudaStream_t stream) {
  detail::check_matrix("embedding", table);
  if (tokens == nullptr || out == nullptr) {
    throw InvalidArgument("cuda::embedding: null device pointer (tokens or out)");
  }
  if (n_tokens < 0 || n_tokens > INT_MAX) {
    throw InvalidArgument("cuda::embedding: need 0 <= n_tokens <= INT32_MAX, got " +
                          std::to_string(n_tokens));
  }
  if (n_tokens == 0) return;
  launch_gather(table, tokens, out, n_tokens, stream);
}

void dequantize(const DeviceMatrix& w, float* out, cudaStream_t stream) {
  detail::check_matrix("dequantize", w);
  if (out == nullptr) throw InvalidArgument("cuda::dequantize: null output pointer");
  launch_gather(w, nullptr, out, w.rows, stream);
}

}  // namespace lio::cuda
