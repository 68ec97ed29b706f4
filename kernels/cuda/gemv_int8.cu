// gemv_int8.cu — chapter 03's int8 activations on the GPU: x rounded to int8 (per 32-element
// block or per token), then y = x W^T as integer dot products of the weights' codes and x's
// codes (W8A8 for Q8_0 weights, W4A8 for the 4- and 5-bit ones).
//
// quantize_activations_int8:
//   Block32: one warp per 32-element block, lane = element: max|x| by a warp reduction, then
//            every lane rounds its own value with the CPU's formula (rint(x * (1/d))).
//   Token:   one block of kTokenThreads per row: max|x| over the row by a block reduction,
//            then round(x / s) as quantize_row_int8 does; the scale is written once per block.
// gemv_int8: gemv_batched's layout (one warp per weight row, lane l reads the 8 weights at
//   columns 8l + 256i), the 8 weights decoded once (detail::Weights8 -> detail::Codes8) and
//   dotted with each x row's 8 codes by two __dp4a; the sum of the x codes (for the minimum of
//   Q4_1 / Q5_1 / Q4_K) is two more __dp4a against 0x01010101. x codes are read straight from
//   global memory as one 8-byte load (cols % 32 == 0 keeps every group 8-byte aligned).
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "device_matrix.h"
#include "gemv_batched.h"
#include "gemv_int8.h"
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
constexpr int kBlock = 32;                                            // elements per x scale
constexpr int kTokenThreads = 256;

// ---- kernels ------------------------------------------------------------------------------------

/// Grid: (ceil(n_rows * cols / 32 / kWarps)). Block: (kThreads). Warp w rounds 32-element block
/// blockIdx.x * kWarps + w of x (blocks numbered row-major over (n_rows, cols / 32)).
__global__ void __launch_bounds__(kThreads)
quantize_block32_kernel(const float* x, int64_t n_blocks, int8_t* qx, float* dx) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / detail::kWarpSize;
  if (b >= n_blocks) return;  // warp-uniform
  const int lane = threadIdx.x % detail::kWarpSize;
  const float v = x[b * kBlock + lane];
  const float d = detail::warp_max(fabsf(v)) / 127.0f;
  const float inv = d > 0.0f ? 1.0f / d : 0.0f;
  qx[b * kBlock + lane] = static_cast<int8_t>(rintf(v * inv));
  if (lane == 0) dx[b] = d;
}

/// Grid: (n_rows). Block: (kTokenThreads). Rounds row blockIdx.x with one scale.
__global__ void __launch_bounds__(kTokenThreads)
quantize_token_kernel(const float* x, int cols, int8_t* qx, float* dx) {
  const int64_t r = blockIdx.x;
  const float* row = x + r * cols;
  float amax = 0.0f;
  for (int c = threadIdx.x; c < cols; c += kTokenThreads) amax = fmaxf(amax, fabsf(row[c]));
  const float s = detail::block_max<kTokenThreads>(amax) / 127.0f;
  for (int c = threadIdx.x; c < cols; c += kTokenThreads) {
    qx[r * cols + c] = s > 0.0f ? static_cast<int8_t>(roundf(row[c] / s)) : int8_t{0};
  }
  const int n_blocks = cols / kBlock;
  for (int b = threadIdx.x; b < n_blocks; b += kTokenThreads) dx[r * n_blocks + b] = s;
}

/// Grid: (ceil(rows / kWarps)). Block: (kThreads). Warp w of block b computes output column
/// (weight row) b * kWarps + w for every x row, kRowsPerPass x rows per pass.
template <DType kType>
__global__ void __launch_bounds__(kThreads)
gemv_int8_kernel(const std::byte* w,  // (rows, row_bytes) in kType
                 int64_t row_bytes,   // bytes per weight row
                 int rows,            // out_features
                 int cols,            // in_features, a multiple of 32
                 const int8_t* qx,    // (n_x, cols) int8 codes
                 const float* dx,     // (n_x, cols / 32) scales
                 int n_x,             // x rows (tokens)
                 float* y,            // (n_x, rows)
                 bool accumulate) {
  const int lane = threadIdx.x % detail::kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / detail::kWarpSize;
  if (row >= rows) return;  // warp-uniform; no barriers below
  const std::byte* w_row = w + row * row_bytes;
  const int n_groups = cols / kBlock;
  for (int x0 = 0; x0 < n_x; x0 += kRowsPerPass) {
    const int n_pass = min(kRowsPerPass, n_x - x0);
    float acc[kRowsPerPass];
#pragma unroll
    for (int b = 0; b < kRowsPerPass; ++b) acc[b] = 0.0f;
    for (int e0 = lane * kElemsPerLane; e0 < cols; e0 += kElemsPerWarpStep) {
      const detail::Codes8 c = detail::codes8<kType>(detail::load_weights8<kType>(w_row, e0));
#pragma unroll
      for (int b = 0; b < kRowsPerPass; ++b) {
        if (b < n_pass) {
          const int64_t r = x0 + b;
          const int2 xv = *reinterpret_cast<const int2*>(qx + r * cols + e0);
          acc[b] += c.dot_int8(xv.x, xv.y, dx[r * n_groups + e0 / kBlock]);
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

}  // namespace

void quantize_activations_int8(const float* x, int64_t n_rows, int64_t cols, ActivationGroup group, int8_t* qx,
                               float* dx, cudaStream_t stream) {
  const std::string where = "cuda::quantize_activations_int8: ";
  if (x == nullptr || qx == nullptr || dx == nullptr) throw InvalidArgument(where + "null device pointer (x, qx or dx)");
  if (n_rows < 0 || n_rows > INT_MAX || cols <= 0 || cols > INT_MAX || cols % kBlock != 0) {
    throw InvalidArgument(where + "need 0 <= n_rows <= INT32_MAX and 0 < cols <= INT32_MAX a multiple of 32, got n_rows=" +
                          std::to_string(n_rows) + " cols=" + std::to_string(cols));
  }
  if (n_rows == 0) return;
  if (group == ActivationGroup::Block32) {
    const int64_t n_blocks = n_rows * (cols / kBlock);
    const int64_t grid = (n_blocks + kWarps - 1) / kWarps;
    if (grid > INT_MAX) throw InvalidArgument(where + std::to_string(n_blocks) + " blocks exceed one launch");
    quantize_block32_kernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(x, n_blocks, qx, dx);
  } else {
    quantize_token_kernel<<<static_cast<unsigned>(n_rows), kTokenThreads, 0, stream>>>(x, static_cast<int>(cols), qx,
                                                                                         dx);
  }
  CUDA_CHECK(cudaGetLastError());
}

void gemv_int8(const DeviceMatrix& w, const int8_t* qx, const float* dx, float* y, int64_t n_rows, bool accumulate,
               cudaStream_t stream) {
  detail::check_matrix("gemv_int8", w);
  if (!has_int8_kernel(w.dtype)) {
    throw InvalidArgument("cuda::gemv_int8: '" + std::string(dtype_info(w.dtype).name) +
                          "' weights have no integer codes (block-quantized dtypes only)");
  }
  if (qx == nullptr || dx == nullptr || y == nullptr) {
    throw InvalidArgument("cuda::gemv_int8: null device pointer (qx, dx or y)");
  }
  if (n_rows < 0 || n_rows > INT_MAX) {
    throw InvalidArgument("cuda::gemv_int8: need 0 <= n_rows <= INT32_MAX, got " + std::to_string(n_rows));
  }
  if (n_rows == 0) return;
  const auto grid = static_cast<unsigned>((w.rows + kWarps - 1) / kWarps);
  const int rows = static_cast<int>(w.rows), cols = static_cast<int>(w.cols), n_x = static_cast<int>(n_rows);
  detail::dispatch_dtype(w.dtype, [&]<DType kType>() {
    if constexpr (has_int8_kernel(kType)) {
      gemv_int8_kernel<kType><<<grid, kThreads, 0, stream>>>(w.data, w.row_bytes, rows, cols, qx, dx, n_x, y,
                                                             accumulate);
    }
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace lio::cuda
