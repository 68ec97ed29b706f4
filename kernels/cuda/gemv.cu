// gemv.cu — y = W x (+ y) for one token: the decode step's matmul, weights dequantized in
// registers.
//
// At batch 1 every weight is read once and used once (2 FLOPs per weight), so the step is bound
// by memory bandwidth: the kernel's job is to stream W at full speed and never write a
// dequantized copy. Layout of the work (optimized kernel):
//   block = kGemvWarps warps, one output row per warp;
//   lane l of a warp reads the 8 consecutive weights at columns l*8 + 256*i, i = 0, 1, ...:
//   a warp step covers 256 columns = 8 quantized blocks, 4 lanes per block;
//   x (cols floats) is staged in shared memory once per block and reused by its 8 rows.
// The 8 partial dot products of a warp are combined with shuffles (reduce.cuh).
// Naive kernel: one thread per row, element by element — the reference.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "device_matrix.h"
#include "gemv.h"
#include "lio/error.h"
#include "quant.cuh"
#include "reduce.cuh"

namespace lio::cuda {

namespace {

constexpr int kGemvWarps = 8;
constexpr int kGemvThreads = kGemvWarps * detail::kWarpSize;
constexpr int kElemsPerLane = detail::kDot8Elems;
constexpr int kElemsPerWarpStep = kElemsPerLane * detail::kWarpSize;  // 256
constexpr int kNaiveBlockThreads = 128;


// ---- kernels --------------------------------------------------------------------------------

/// Grid: (ceil(rows / kGemvWarps)). Block: (kGemvThreads). Dynamic shared memory: cols floats
/// when kStageX. Warp w of block b computes row b*kGemvWarps + w.
template <DType kType, bool kStageX>
__global__ void __launch_bounds__(kGemvThreads)
gemv_kernel(const std::byte* w,   // (rows, row_bytes) in kType
            int64_t row_bytes,    // bytes per row
            int rows,             // out_features
            int cols,             // in_features (a multiple of 32 for quantized types)
            const float* x,       // (cols)
            float* y,             // (rows)
            bool accumulate) {    // y += W x instead of y = W x
  extern __shared__ float4 x_shared4[];  // declared float4: the base is 16-byte aligned
  float* x_shared = reinterpret_cast<float*>(x_shared4);
  const float* xv = x;
  if constexpr (kStageX) {
    for (int i = threadIdx.x; i < cols; i += kGemvThreads) x_shared[i] = x[i];
    __syncthreads();
    xv = x_shared;
  }
  const int lane = threadIdx.x % detail::kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / detail::kWarpSize;
  if (row >= rows) return;  // whole warps leave together: the shuffles below stay full-warp
  const std::byte* w_row = w + row * row_bytes;
  float acc = 0.0f;
  for (int e0 = lane * kElemsPerLane; e0 < cols; e0 += kElemsPerWarpStep) {
    if (e0 + kElemsPerLane <= cols) {
      float x8[kElemsPerLane];
      detail::load_x8<kStageX>(xv, e0, x8);
      acc += detail::dot8<kType>(w_row, e0, x8);
    } else {  // ragged tail, float dtypes only (quantized cols are whole blocks)
      for (int e = e0; e < cols; ++e) acc += detail::load_element<kType>(w_row, e) * xv[e];
    }
  }
  acc = detail::warp_sum(acc);
  if (lane == 0) y[row] = accumulate ? y[row] + acc : acc;
}

/// gemv_kernel<Q4_1, staged> with issue 45's wide reader (q4_1_row_partial_wide: 32-bit loads,
/// each weight byte read once). Grid and block as gemv_kernel; dynamic shared memory: cols floats.
__global__ void __launch_bounds__(kGemvThreads)
gemv_q4_1_wide_kernel(const std::byte* w, int64_t row_bytes, int rows, int cols, const float* x, float* y,
                      bool accumulate) {
  extern __shared__ float4 x_shared4[];
  float* xs = reinterpret_cast<float*>(x_shared4);
  for (int i = threadIdx.x; i < cols; i += kGemvThreads) xs[i] = x[i];
  __syncthreads();
  const int lane = threadIdx.x % detail::kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / detail::kWarpSize;
  if (row >= rows) return;
  const float acc = detail::warp_sum(detail::q4_1_row_partial_wide(w + row * row_bytes, cols, xs, lane));
  if (lane == 0) y[row] = accumulate ? y[row] + acc : acc;
}

/// Grid: (ceil(rows / kNaiveBlockThreads)). Block: (kNaiveBlockThreads). One thread per row.
template <DType kType>
__global__ void gemv_naive_kernel(const std::byte* w,  // (rows, row_bytes) in kType
                                  int64_t row_bytes,
                                  int rows,
                                  int cols,
                                  const float* x,      // (cols)
                                  float* y,            // (rows)
                                  bool accumulate) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const std::byte* w_row = w + row * row_bytes;
  float acc = 0.0f;
  for (int c = 0; c < cols; ++c) acc += detail::load_element<kType>(w_row, c) * x[c];
  y[row] = accumulate ? y[row] + acc : acc;
}

// ---- host launchers -------------------------------------------------------------------------

void check_gemv_args(const char* op, const DeviceMatrix& w, const float* x, const float* y) {
  detail::check_matrix(op, w);
  if (x == nullptr || y == nullptr) {
    throw InvalidArgument(std::string("cuda::") + op + ": null device pointer (x or y)");
  }
}

}  // namespace

void gemv(const DeviceMatrix& w, const float* x, float* y, bool accumulate, cudaStream_t stream) {
  check_gemv_args("gemv", w, x, y);
  const unsigned n_blocks = static_cast<unsigned>((w.rows + kGemvWarps - 1) / kGemvWarps);
  const int rows = static_cast<int>(w.rows);
  const int cols = static_cast<int>(w.cols);
  const bool stage_x = w.cols <= kGemvMaxSharedCols;
  const size_t shared_bytes = stage_x ? static_cast<size_t>(w.cols) * sizeof(float) : 0;
  detail::dispatch_dtype(w.dtype, [&]<DType kType>() {
    if (stage_x) {
      gemv_kernel<kType, true><<<n_blocks, kGemvThreads, shared_bytes, stream>>>(
          w.data, w.row_bytes, rows, cols, x, y, accumulate);
    } else {
      gemv_kernel<kType, false><<<n_blocks, kGemvThreads, 0, stream>>>(
          w.data, w.row_bytes, rows, cols, x, y, accumulate);
    }
  });
  CUDA_CHECK(cudaGetLastError());
}

bool gemv_wide_supports(const DeviceMatrix& w) {
  return w.dtype == DType::Q4_1 && w.cols > 0 && w.cols % 32 == 0 && w.cols <= kGemvMaxSharedCols &&
         w.row_bytes % 4 == 0 && reinterpret_cast<uintptr_t>(w.data) % 4 == 0;
}

void gemv_q4_1_wide(const DeviceMatrix& w, const float* x, float* y, bool accumulate, cudaStream_t stream) {
  check_gemv_args("gemv_q4_1_wide", w, x, y);
  if (!gemv_wide_supports(w)) {
    throw InvalidArgument("cuda::gemv_q4_1_wide: needs a 4-byte aligned Q4_1 matrix of at most kGemvMaxSharedCols "
                          "columns (gemv_wide_supports)");
  }
  const unsigned n_blocks = static_cast<unsigned>((w.rows + kGemvWarps - 1) / kGemvWarps);
  gemv_q4_1_wide_kernel<<<n_blocks, kGemvThreads, static_cast<size_t>(w.cols) * sizeof(float), stream>>>(
      w.data, w.row_bytes, static_cast<int>(w.rows), static_cast<int>(w.cols), x, y, accumulate);
  CUDA_CHECK(cudaGetLastError());
}

void gemv_naive(const DeviceMatrix& w, const float* x, float* y, bool accumulate,
                cudaStream_t stream) {
  check_gemv_args("gemv_naive", w, x, y);
  const unsigned n_blocks =
      static_cast<unsigned>((w.rows + kNaiveBlockThreads - 1) / kNaiveBlockThreads);
  detail::dispatch_dtype(w.dtype, [&]<DType kType>() {
    gemv_naive_kernel<kType><<<n_blocks, kNaiveBlockThreads, 0, stream>>>(
        w.data, w.row_bytes, static_cast<int>(w.rows), static_cast<int>(w.cols), x, y, accumulate);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace lio::cuda
