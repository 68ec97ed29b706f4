// rmsnorm.cu — RMSNorm on the GPU (Zhang & Sennrich 2019, eq. 4):
//   out[r][j] = x[r][j] / sqrt(mean_j(x[r][j]^2) + eps) * weight[j].
//
// Optimized kernel: one block of kRmsnormBlockThreads per row. Each thread sums the squares
// of a strided slice (float4 loads when the row allows), the block combines the partial sums
// with warp shuffles and one shared-memory exchange, then every thread scales its slice.
// The row is read twice; the second read hits L1/L2 (a 4096-wide row is 16 KiB).
// Naive kernel: one thread per row, sequential double sum — the CPU algorithm, kept as the
// reference the optimized kernel is tested against.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "rmsnorm.h"
#include "lio/error.h"
#include "reduce.cuh"

namespace lio::cuda {

namespace {

// 8 warps per row: enough loads in flight to stream a row, small enough that a 576-wide row
// (SmolLM2) still gives every thread work.
constexpr int kRmsnormBlockThreads = 256;
// Rows per block for the naive kernel (one thread each).
constexpr int kNaiveBlockThreads = 128;

// ---- kernels --------------------------------------------------------------------------------

/// Grid: (n_rows). Block: (kRmsnormBlockThreads).
/// kVec4: rows are read/written as float4 (dim % 4 == 0 and all pointers 16-byte aligned).
/// x and out may alias: each element is read (twice) before the same thread overwrites it.
template <bool kVec4>
__global__ void __launch_bounds__(kRmsnormBlockThreads)
rmsnorm_kernel(const float* x,       // (n_rows, dim)
               const float* weight,  // (dim)
               float* out,           // (n_rows, dim)
               int dim,              // elements per row
               float eps) {
  const int64_t row = blockIdx.x;
  const float* x_row = x + row * dim;
  float* out_row = out + row * dim;

  float sum_sq = 0.0f;
  if constexpr (kVec4) {
    const float4* x4 = reinterpret_cast<const float4*>(x_row);
    for (int j = threadIdx.x; j < dim / 4; j += kRmsnormBlockThreads) {
      const float4 v = x4[j];
      sum_sq += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
  } else {
    for (int j = threadIdx.x; j < dim; j += kRmsnormBlockThreads) sum_sq += x_row[j] * x_row[j];
  }
  sum_sq = detail::block_sum<kRmsnormBlockThreads>(sum_sq);
  // IEEE sqrt and division (nvcc's defaults), not rsqrtf (2 ulp), to stay close to the CPU op.
  const float scale = 1.0f / sqrtf(sum_sq / static_cast<float>(dim) + eps);

  if constexpr (kVec4) {
    const float4* x4 = reinterpret_cast<const float4*>(x_row);
    const float4* w4 = reinterpret_cast<const float4*>(weight);
    float4* out4 = reinterpret_cast<float4*>(out_row);
    for (int j = threadIdx.x; j < dim / 4; j += kRmsnormBlockThreads) {
      const float4 v = x4[j];
      const float4 w = w4[j];
      out4[j] = make_float4(v.x * scale * w.x, v.y * scale * w.y, v.z * scale * w.z,
                            v.w * scale * w.w);
    }
  } else {
    for (int j = threadIdx.x; j < dim; j += kRmsnormBlockThreads) {
      out_row[j] = x_row[j] * scale * weight[j];
    }
  }
}

/// Grid: (ceil(n_rows / kNaiveBlockThreads)). Block: (kNaiveBlockThreads). One thread per row.
/// Equivalent scalar loop of rmsnorm_kernel, with the sum in double as cpu::rmsnorm does.
__global__ void rmsnorm_naive_kernel(const float* x,       // (n_rows, dim)
                                     const float* weight,  // (dim)
                                     float* out,           // (n_rows, dim)
                                     int n_rows,
                                     int dim,
                                     float eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= n_rows) return;
  const float* x_row = x + row * dim;
  float* out_row = out + row * dim;
  double sum_sq = 0.0;
  for (int j = 0; j < dim; ++j) sum_sq += static_cast<double>(x_row[j]) * x_row[j];
  const float scale = static_cast<float>(1.0 / sqrt(sum_sq / dim + eps));
  for (int j = 0; j < dim; ++j) out_row[j] = x_row[j] * scale * weight[j];
}

// ---- host launchers -------------------------------------------------------------------------

/// Throws InvalidArgument unless the arguments meet rmsnorm()'s preconditions.
void check_rmsnorm_args(const char* op, const float* x, const float* weight, const float* out,
                        int64_t n_rows, int64_t dim, float eps) {
  const std::string where = std::string("cuda::") + op + ": ";
  if (x == nullptr || weight == nullptr || out == nullptr) {
    throw InvalidArgument(where + "null device pointer (x, weight or out)");
  }
  if (n_rows < 0 || n_rows > INT_MAX || dim <= 0 || dim > INT_MAX) {
    throw InvalidArgument(where + "need 0 <= n_rows <= INT32_MAX and 0 < dim <= INT32_MAX, got "
                          "n_rows=" + std::to_string(n_rows) + " dim=" + std::to_string(dim));
  }
  if (!(eps >= 0.0f) || !std::isfinite(eps)) {
    throw InvalidArgument(where + "eps must be finite and >= 0, got " + std::to_string(eps));
  }
}

bool aligned_16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void rmsnorm(const float* x, const float* weight, float* out, int64_t n_rows, int64_t dim,
             float eps, cudaStream_t stream) {
  check_rmsnorm_args("rmsnorm", x, weight, out, n_rows, dim, eps);
  if (n_rows == 0) return;
  const dim3 grid(static_cast<unsigned>(n_rows));
  const dim3 block(kRmsnormBlockThreads);
  const bool vec4 = dim % 4 == 0 && aligned_16(x) && aligned_16(weight) && aligned_16(out);
  if (vec4) {
    rmsnorm_kernel<true><<<grid, block, 0, stream>>>(x, weight, out, static_cast<int>(dim), eps);
  } else {
    rmsnorm_kernel<false><<<grid, block, 0, stream>>>(x, weight, out, static_cast<int>(dim), eps);
  }
  CUDA_CHECK(cudaGetLastError());
}

void rmsnorm_naive(const float* x, const float* weight, float* out, int64_t n_rows,
                   int64_t dim, float eps, cudaStream_t stream) {
  check_rmsnorm_args("rmsnorm_naive", x, weight, out, n_rows, dim, eps);
  if (n_rows == 0) return;
  const dim3 grid(static_cast<unsigned>((n_rows + kNaiveBlockThreads - 1) / kNaiveBlockThreads));
  const dim3 block(kNaiveBlockThreads);
  rmsnorm_naive_kernel<<<grid, block, 0, stream>>>(x, weight, out, static_cast<int>(n_rows),
                                                   static_cast<int>(dim), eps);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace lio::cuda
