// gemv_batched.cu — y = x W^T (+ y) for a few rows of x: the decode step of a batch of
// sequences, weights read once and dequantized in registers for every row.
//
// With B tokens a step does 2B FLOPs per weight; for B <= 16 that is still far below what a GPU
// does per byte of memory traffic, so the step is bound by reading W, exactly like gemv. Calling
// gemv B times would read W B times; dequantizing W to f32 for cuBLAS would write and re-read
// 4 bytes per weight. This kernel reads each weight block once per group of 8 rows:
//   block = kWarps warps, one output row (weight row) per warp, lanes over columns as in gemv
//   (lane l reads the 8 weights at columns l*8 + 256*i);
//   the lane decodes its 8 weights once (detail::Weights8) and multiplies them with the same 8
//   columns of each of the group's x rows, staged in shared memory: 8 accumulators per lane;
//   the warp reduces each accumulator with shuffles (reduce.cuh), lane 0 writes the 8 outputs.
// Per x row the arithmetic (lane/column mapping, Weights8::dot, warp_sum) is gemv's.
// Naive twin: gemv_naive once per x row.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "device_matrix.h"
#include "gemv.h"
#include "gemv_batched.h"
#include "lio/error.h"
#include "quant.cuh"
#include "reduce.cuh"

namespace lio::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * detail::kWarpSize;
constexpr int kRowsPerPass = static_cast<int>(kGemvBatchedRowsPerPass);
constexpr int kElemsPerLane = detail::kDot8Elems;
constexpr int kElemsPerWarpStep = kElemsPerLane * detail::kWarpSize;  // 256
static_assert(kGemvBatchedMaxSharedCols % 4 == 0, "padded x rows fit the staging buffer exactly");

// ---- device helpers -----------------------------------------------------------------------------

/// Floats between consecutive staged x rows: cols rounded up to a multiple of 4, so every row
/// (and every 8-column group in it) starts 16-byte aligned for float4 loads.
__host__ __device__ __forceinline__ int padded_cols(int cols) { return (cols + 3) / 4 * 4; }

// ---- kernels ------------------------------------------------------------------------------------

/// Grid: (ceil(rows / kWarps)). Block: (kThreads). Dynamic shared memory when kStageX:
/// kRowsPerPass * padded_cols(cols) floats. Warp w of block b computes output column (weight
/// row) b*kWarps + w for every x row, kRowsPerPass x rows per pass over its weight row.
template <DType kType, bool kStageX>
__global__ void __launch_bounds__(kThreads)
gemv_batched_kernel(const std::byte* w,  // (rows, row_bytes) in kType
                    int64_t row_bytes,   // bytes per weight row
                    int rows,            // out_features
                    int cols,            // in_features (a multiple of 32 for quantized types)
                    const float* x,      // (n_x, cols)
                    int n_x,             // x rows (tokens)
                    float* y,            // (n_x, rows)
                    bool accumulate) {   // y += x W^T instead of y = x W^T
  extern __shared__ float4 x_shared4[];  // declared float4: the base is 16-byte aligned
  float* x_shared = reinterpret_cast<float*>(x_shared4);
  const int lane = threadIdx.x % detail::kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / detail::kWarpSize;
  // Warps past the last weight row stay for the barriers but compute nothing (warp-uniform).
  const bool active = row < rows;
  const std::byte* w_row = w + (active ? row : 0) * row_bytes;
  const int x_stride = kStageX ? padded_cols(cols) : cols;

  for (int x0 = 0; x0 < n_x; x0 += kRowsPerPass) {
    const int n_pass = min(kRowsPerPass, n_x - x0);
    const float* xs = x + static_cast<int64_t>(x0) * cols;
    if constexpr (kStageX) {
      __syncthreads();  // the previous pass has finished reading x_shared
      for (int b = 0; b < n_pass; ++b) {
        const float* x_row = xs + static_cast<int64_t>(b) * cols;
        for (int i = threadIdx.x; i < cols; i += kThreads) x_shared[b * x_stride + i] = x_row[i];
      }
      __syncthreads();
      xs = x_shared;
    }
    if (!active) continue;
    float acc[kRowsPerPass];
#pragma unroll
    for (int b = 0; b < kRowsPerPass; ++b) acc[b] = 0.0f;
    for (int e0 = lane * kElemsPerLane; e0 < cols; e0 += kElemsPerWarpStep) {
      if (e0 + kElemsPerLane <= cols) {
        const detail::Weights8<kType> w8 = detail::load_weights8<kType>(w_row, e0);
#pragma unroll
        for (int b = 0; b < kRowsPerPass; ++b) {
          if (b < n_pass) {
            float x8[kElemsPerLane];
            detail::load_x8<kStageX>(xs + static_cast<int64_t>(b) * x_stride, e0, x8);
            acc[b] += w8.dot(x8);
          }
        }
      } else {  // ragged tail, float dtypes only (quantized cols are whole blocks)
        for (int e = e0; e < cols; ++e) {
          const float we = detail::load_element<kType>(w_row, e);
#pragma unroll
          for (int b = 0; b < kRowsPerPass; ++b) {
            if (b < n_pass) acc[b] += we * xs[static_cast<int64_t>(b) * x_stride + e];
          }
        }
      }
    }
#pragma unroll
    for (int b = 0; b < kRowsPerPass; ++b) {
      if (b < n_pass) {
        const float sum = detail::warp_sum(acc[b]);
        if (lane == 0) {
          float& out = y[static_cast<int64_t>(x0 + b) * rows + row];
          out = accumulate ? out + sum : sum;
        }
      }
    }
  }
}

// ---- host launchers -----------------------------------------------------------------------------

void check_gemv_batched_args(const char* op, const DeviceMatrix& w, const float* x,
                             const float* y, int64_t n_rows) {
  detail::check_matrix(op, w);
  if (x == nullptr || y == nullptr) {
    throw InvalidArgument(std::string("cuda::") + op + ": null device pointer (x or y)");
  }
  if (n_rows < 0 || n_rows > INT_MAX) {
    throw InvalidArgument(std::string("cuda::") + op + ": need 0 <= n_rows <= INT32_MAX, got " +
                          std::to_string(n_rows));
  }
}

}  // namespace

void gemv_batched(const DeviceMatrix& w, const float* x, float* y, int64_t n_rows,
                  bool accumulate, cudaStream_t stream) {
  check_gemv_batched_args("gemv_batched", w, x, y, n_rows);
  if (n_rows == 0) return;
  const unsigned n_blocks = static_cast<unsigned>((w.rows + kWarps - 1) / kWarps);
  const int rows = static_cast<int>(w.rows);
  const int cols = static_cast<int>(w.cols);
  const int n_x = static_cast<int>(n_rows);
  const bool stage_x = w.cols <= kGemvBatchedMaxSharedCols;
  const size_t shared_bytes =
      stage_x ? static_cast<size_t>(kRowsPerPass) * padded_cols(cols) * sizeof(float) : 0;
  detail::dispatch_dtype(w.dtype, [&]<DType kType>() {
    if (stage_x) {
      gemv_batched_kernel<kType, true><<<n_blocks, kThreads, shared_bytes, stream>>>(
          w.data, w.row_bytes, rows, cols, x, n_x, y, accumulate);
    } else {
      gemv_batched_kernel<kType, false><<<n_blocks, kThreads, 0, stream>>>(
          w.data, w.row_bytes, rows, cols, x, n_x, y, accumulate);
    }
  });
  CUDA_CHECK(cudaGetLastError());
}

void gemv_batched_naive(const DeviceMatrix& w, const float* x, float* y, int64_t n_rows,
                        bool accumulate, cudaStream_t stream) {
  check_gemv_batched_args("gemv_batched_naive", w, x, y, n_rows);
  for (int64_t i = 0; i < n_rows; ++i) {
    gemv_naive(w, x + i * w.cols, y + i * w.rows, accumulate, stream);
  }
}

}  // namespace lio::cuda
