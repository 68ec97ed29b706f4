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

/// Reduces v over a block of kBlockThreads threads (== blockDim.x, whole warps, at most 1024)
/// with `warp_reduce` (warp_sum or warp_max); lanes past the warp count contribute `identity`.
/// Every thread gets the result. Every warp re-reduces the per-warp partials itself, so one
/// __syncthreads suffices inside; a trailing one lets the caller reduce again at once.
/// All threads of the block must call it (it contains barriers).
template <int kBlockThreads, typename WarpReduce>
__device__ __forceinline__ float block_reduce(float v, WarpReduce warp_reduce, float identity) {
  static_assert(kBlockThreads % kWarpSize == 0 && kBlockThreads <= 1024, "whole warps, <= 1024");
  constexpr int kWarps = kBlockThreads / kWarpSize;
  __shared__ float warp_partials[kWarps];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  v = warp_reduce(v);
  if (lane == 0) warp_partials[warp] = v;
  __syncthreads();
  v = lane < kWarps ? warp_partials[lane] : identity;
  v = warp_reduce(v);
  __syncthreads();  // warp_partials may be rewritten by the next call
  return v;
}

/// Sum of v over the block; every thread gets the result (see block_reduce).
template <int kBlockThreads>
__device__ __forceinline__ float block_sum(float v) {
  return block_reduce<kBlockThreads>(v, [](float x) { return warp_sum(x); }, 0.0f);
}

/// Maximum of v over the block; every thread gets the result (see block_reduce).
template <int kBlockThreads>
__device__ __forceinline__ float block_max(float v) {
  return block_reduce<kBlockThreads>(v, [](float x) { return warp_max(x); }, -INFINITY);
}

}  // namespace lio::cuda::detail
