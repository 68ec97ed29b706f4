// elementwise.cu — SwiGLU and GeGLU on the GPU (out = act(gate) * up, one thread per value), the
// bias add of a projection, the plain add and scale Gemma 3's post-norms and scaled embeddings
// need, and the row gather that picks the rows whose logits are wanted.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "elementwise.h"
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

/// As swiglu_kernel, with GELU in its tanh form (Hendrycks & Gimpel 2016, sec. 2; Gemma's
/// gelu_pytorch_tanh): 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))), cpu::geglu's formula.
__global__ void geglu_kernel(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f, kCoef = 0.044715f;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = gate[i];
    out[i] = 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kCoef * x * x * x))) * up[i];
  }
}

/// Grid-stride: x[i] += y[i] (y may alias x), or x[i] *= scale when y is null.
__global__ void add_or_scale_kernel(float* x, const float* y, float scale, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    x[i] = y != nullptr ? x[i] + y[i] : x[i] * scale;
  }
}

/// Grid-stride: x[i] = cap * tanh(x[i] * inv_cap).
__global__ void softcap_kernel(float* x, float cap, float inv_cap, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    x[i] = cap * tanhf(x[i] * inv_cap);
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

/// Blocks for a grid-stride launch over n values: ceil(n / kBlockThreads), at most kMaxBlocks.
unsigned grid_for(int64_t n) {
  const int64_t want_blocks = (n + kBlockThreads - 1) / kBlockThreads;
  return want_blocks > kMaxBlocks ? kMaxBlocks : static_cast<unsigned>(want_blocks);
}

}  // namespace

void swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  if (n < 0) throw InvalidArgument("cuda::swiglu: n must be >= 0, got " + std::to_string(n));
  if (n == 0) return;
  if (gate == nullptr || up == nullptr || out == nullptr) {
    throw InvalidArgument("cuda::swiglu: null device pointer (gate, up or out)");
  }
  swiglu_kernel<<<grid_for(n), kBlockThreads, 0, stream>>>(gate, up, out, n);
  CUDA_CHECK(cudaGetLastError());
}

void geglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  if (n < 0) throw InvalidArgument("cuda::geglu: n must be >= 0, got " + std::to_string(n));
  if (n == 0) return;
  if (gate == nullptr || up == nullptr || out == nullptr) {
    throw InvalidArgument("cuda::geglu: null device pointer (gate, up or out)");
  }
  geglu_kernel<<<grid_for(n), kBlockThreads, 0, stream>>>(gate, up, out, n);
  CUDA_CHECK(cudaGetLastError());
}

void add(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n < 0) throw InvalidArgument("cuda::add: n must be >= 0, got " + std::to_string(n));
  if (n == 0) return;
  if (x == nullptr || y == nullptr) throw InvalidArgument("cuda::add: null device pointer (x or y)");
  add_or_scale_kernel<<<grid_for(n), kBlockThreads, 0, stream>>>(x, y, 1.0f, n);
  CUDA_CHECK(cudaGetLastError());
}

void scale(float* x, float factor, int64_t n, cudaStream_t stream) {
  if (n < 0) throw InvalidArgument("cuda::scale: n must be >= 0, got " + std::to_string(n));
  if (n == 0) return;
  if (x == nullptr) throw InvalidArgument("cuda::scale: null device pointer");
  add_or_scale_kernel<<<grid_for(n), kBlockThreads, 0, stream>>>(x, nullptr, factor, n);
  CUDA_CHECK(cudaGetLastError());
}

void softcap(float* x, float cap, int64_t n, cudaStream_t stream) {
  if (n < 0 || !(cap > 0.0f)) {
    throw InvalidArgument("cuda::softcap: need n >= 0 and cap > 0, got n " + std::to_string(n) + ", cap " +
                          std::to_string(cap));
  }
  if (n == 0) return;
  if (x == nullptr) throw InvalidArgument("cuda::softcap: null device pointer");
  softcap_kernel<<<grid_for(n), kBlockThreads, 0, stream>>>(x, cap, 1.0f / cap, n);
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
  add_bias_kernel<<<grid_for(n), kBlockThreads, 0, stream>>>(y, bias, n, dim);
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
