// elementwise.cu — SwiGLU on the GPU: out = silu(gate) * up, one thread per value.
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

}  // namespace lio::cuda
