// reduce.cuh — warp- and block-wide sums and maxima shared by the CUDA kernels.
//
// Butterfly reductions with __shfl_xor_sync: after log2(32) = 5 exchange steps every lane holds
// the result, so no broadcast is needed (CUDA C++ Programming Guide, "Warp Shuffle Functions").
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

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

// ---- argmax ---------------------------------------------------------------------------------

/// A candidate for the maximum of a row: its value and position. `index` == kNoIndex marks
/// "nothing seen yet", which loses to every real candidate (-inf included, NaN excluded).
struct ArgmaxCandidate {
  static constexpr int32_t kNoIndex = 0x7fffffff;
  float value = -INFINITY;
  int32_t index = kNoIndex;
};

/// True when `a` beats `b`: a larger value, or the same value at a lower index. NaN never
/// beats anything (every comparison with NaN is false), so NaN is never chosen over a number.
/// This is a strict total order on non-NaN candidates, so the winner does not depend on the
/// order of the comparisons: any reduction tree returns lio::argmax's answer (the FIRST index
/// of the maximum). Host-callable, so it is tested without a GPU.
__host__ __device__ __forceinline__ bool argmax_beats(ArgmaxCandidate a, ArgmaxCandidate b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

/// The better of `a` and `b` (see argmax_beats).
__host__ __device__ __forceinline__ ArgmaxCandidate argmax_combine(ArgmaxCandidate a, ArgmaxCandidate b) {
  return argmax_beats(b, a) ? b : a;
}

/// argmax_combine over the 32 lanes of a warp (butterfly, as warp_max); every lane gets it.
__device__ __forceinline__ ArgmaxCandidate warp_argmax(ArgmaxCandidate c) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    ArgmaxCandidate other;
    other.value = __shfl_xor_sync(0xffffffffu, c.value, offset);
    other.index = __shfl_xor_sync(0xffffffffu, c.index, offset);
    c = argmax_combine(c, other);
  }
  return c;
}

}  // namespace lio::cuda::detail
