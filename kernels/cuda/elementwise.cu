// elementwise.cu — SwiGLU on the GPU (out = silu(gate) * up, one thread per value), the bias
// add of a projection, and the row gather that picks the rows whose logits are wanted.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "cuda_ops.h"
#include "lio/error.h"

namespace lio::cuda {

namespace {

constexpr int kBlockThreads = 256;
constexpr unsigned kMaxBlocks = 65535;  // grid-stride beyond this many blocks

/// Grid: (min(ceil(n / kBlockThreads), kMaxBlocks)). Block: (kBlockThreads). Grid-stride loop.
/// silu(g) = g / (1 + e^-g): for g < -88, e^-g is +inf and the quotient -0, the right limit.
__global__ void swiglu_kernel(const float* gate,  // (n)
                              const float* up,    // (n)
                              float* out,         // (n), may alias gate or up
                              int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

/// Grid: (min(ceil(n_rows * dim / kBlockThreads), kMaxBlocks)). Block: (kBlockThreads).
/// Grid-stride over the n_rows * dim values; bias reads hit L1 (dim floats).
__global__ void add_bias_kernel(float* y,            // (n_rows, dim)
                                const float* bias,   // (dim)
                                int64_t n, int64_t dim) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    y[i] += bias[i % dim];
  }
}

/// Grid: (n_rows). Block: (kBlockThreads). Output row r is x row rows[r]; threads over dim
/// (coalesced on both sides).
__global__ void gather_rows_kernel(const float* x,       // (>= max(rows) + 1, dim)
                                   const int32_t* rows,  // (n_rows)
                                   int64_t dim,
                                   float* out) {         // (n_rows, dim)
  const int64_t r = blockIdx.x;
  const float* src = x + static_cast<int64_t>(rows[r]) * dim;
  float* dst = out + r * dim;
  for (int64_t i = threadIdx.x; i < dim; i += kBlockThreads) dst[i] = src[i];
}

}  // namespace

void swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  if (n < 0) throw InvalidArgument("cuda::swiglu: n must be >= 0, got " + std::to_string(n));
  if (n == 0) return;
  if (gate == nullptr || up == nullptr || out == nullptr) {
    throw InvalidArgument("cuda::swiglu: null device pointer (gate, up or out)");
  }
  const int64_t want_blocks = (n + kBlockThreads - 1) / kBlockThreads;
  const unsigned n_blocks = want_blocks > kMaxBlocks ? kMaxBlocks : static_cast<unsigned>(want_blocks);
  swiglu_kernel<<<n_blocks, kBlockThreads, 0, stream>>>(gate, up, out, n);
  CUDA_CHECK(cudaGetLastError());
}

void add_bias(float* y, const float* bias, int64_t n_rows, int64_t dim, cudaStream_t stream) {
  if (n_rows < 0 || dim <= 0) {
    throw InvalidArgument("cuda::add_bias: need n_rows >= 0 and dim > 0, got n_rows=" + std::to_string(n_rows) +
                          " dim=" + std::to_string(dim));
  }
  if (n_rows == 0) return;
  if (y == nullptr || bias == nullptr) throw InvalidArgument("cuda::add_bias: null device pointer (y or bias)");
  const int64_t n = n_rows * dim;
  const int64_t want_blocks = (n + kBlockThreads - 1) / kBlockThreads;
  const unsigned n_blocks = want_blocks > kMaxBlocks ? kMaxBlocks : static_cast<unsigned>(want_blocks);
  add_bias_kernel<<<n_blocks, kBlockThreads, 0, stream>>>(y, bias, n, dim);
  CUDA_CHECK(cudaGetLastError());
}

void gather_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t dim, float* out,
                 cudaStream_t stream) {
  if (n_rows < 0 || n_rows > INT32_MAX || dim <= 0) {
    throw InvalidArgument("cuda::gather_rows: need 0 <= n_rows <= INT32_MAX and dim > 0, got "
                          "n_rows=" + std::to_string(n_rows) + " dim=" + std::to_string(dim));
  }
  if (x == nullptr || rows == nullptr || out == nullptr) {
    throw InvalidArgument("cuda::gather_rows: null device pointer (x, rows or out)");
  }
  if (n_rows == 0) return;
  gather_rows_kernel<<<static_cast<unsigned>(n_rows), kBlockThreads, 0, stream>>>(x, rows, dim, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace lio::cuda
