// reduce.cuh — warp- and block-wide sums and maxima shared by the CUDA kernels.
//
// Butterfly reductions with __shfl_xor_sync: after log2(32) = 5 exchange steps every lane holds
// the result, so no broadcast is needed (CUDA C++ Programming Guide, "Warp Shuffle Functions").
#pragma once

#include <cuda_runtime.h>

namespace lio::cuda::detail {

inline constexpr int kWarpSize = 32;

/// Sum of v over the 32 lanes of a warp; every lane gets the result.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

/// Maximum of v over the 32 lanes of a warp; every lane gets the result.
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

/// Sum of v over a block of kBlockThreads threads (== blockDim.x, whole warps, at most 1024);
/// every thread gets the result. Every warp re-reduces the per-warp partials itself, so one
/// __syncthreads suffices inside; a trailing __syncthreads lets the caller reduce again at once.
template <int kBlockThreads>
__device__ __forceinline__ float block_sum(float v) {
  static_assert(kBlockThreads % kWarpSize == 0 && kBlockThreads <= 1024, "whole warps, <= 1024");
  constexpr int kWarps = kBlockThreads / kWarpSize;
  __shared__ float warp_partials[kWarps];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  v = warp_sum(v);
  if (lane == 0) warp_partials[warp] = v;
  __syncthreads();
  v = lane < kWarps ? warp_partials[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();  // warp_partials may be rewritten by the next call
  return v;
}

/// Maximum of v over a block of kBlockThreads threads; every thread gets the result.
/// Lanes past the warp count contribute -INFINITY, the identity of max.
template <int kBlockThreads>
__device__ __forceinline__ float block_max(float v) {
  static_assert(kBlockThreads % kWarpSize == 0 && kBlockThreads <= 1024, "whole warps, <= 1024");
  constexpr int kWarps = kBlockThreads / kWarpSize;
  __shared__ float warp_partials[kWarps];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  v = warp_max(v);
  if (lane == 0) warp_partials[warp] = v;
  __syncthreads();
  v = lane < kWarps ? warp_partials[lane] : -INFINITY;
  v = warp_max(v);
  __syncthreads();
  return v;
}

}  // namespace lio::cuda::detail
