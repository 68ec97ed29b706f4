// kv_append.cu — writes the new tokens' K and V rows into the paged KV pool at their slots:
// vLLM's reshape_and_cache (csrc/cache_kernels.cu), minus its layout change (our pool keeps
// (slot, n_kv_heads, head_dim) for K and V alike).
//
//   k_pool[slot_mapping[t] * kv_dim + i] = k[t * kv_dim + i],  v likewise;  slot < 0: skipped.
//
// Optimized kernel: one block per token, threads over the row, float4 when aligned (a row of
// SmolLM2's kv_dim = 192 floats is 48 float4 lanes). Naive kernel: one thread per element.
// Quantized pools (chapter 03, --kv-cache-dtype f16 | int8): one block per token, one warp per
// KV head; int8 takes the head's max|x| by a warp reduction, then every lane rounds its values.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "kv_append.h"
#include "quantized_kv.h"
#include "lio/error.h"
#include "reduce.cuh"

namespace lio::cuda {

namespace {

constexpr int kAppendThreads = 128;
constexpr int kNaiveBlockThreads = 256;

// ---- kernels ------------------------------------------------------------------------------------

/// Grid: (n_tokens). Block: (kAppendThreads). kVec4: kv_dim % 4 == 0 and all four arrays
/// 16-byte aligned, so every row start is too.
template <bool kVec4>
__global__ void __launch_bounds__(kAppendThreads)
kv_append_kernel(const float* k,               // (n_tokens, kv_dim)
                 const float* v,               // (n_tokens, kv_dim)
                 const int32_t* slot_mapping,  // (n_tokens) slot of each row, < 0 = skip
                 int kv_dim,
                 float* k_pool,                // (n_slots, kv_dim)
                 float* v_pool) {              // (n_slots, kv_dim)
  const int64_t t = blockIdx.x;
  const int32_t slot = slot_mapping[t];
  if (slot < 0) return;  // padding row
  const int64_t src = t * kv_dim;
  const int64_t dst = static_cast<int64_t>(slot) * kv_dim;
  if constexpr (kVec4) {
    const float4* k4 = reinterpret_cast<const float4*>(k + src);
    const float4* v4 = reinterpret_cast<const float4*>(v + src);
    float4* kp4 = reinterpret_cast<float4*>(k_pool + dst);
    float4* vp4 = reinterpret_cast<float4*>(v_pool + dst);
    for (int i = threadIdx.x; i < kv_dim / 4; i += kAppendThreads) {
      kp4[i] = k4[i];
      vp4[i] = v4[i];
    }
  } else {
    for (int i = threadIdx.x; i < kv_dim; i += kAppendThreads) {
      k_pool[dst + i] = k[src + i];
      v_pool[dst + i] = v[src + i];
    }
  }
}

/// Grid: (ceil(n_tokens * kv_dim / kNaiveBlockThreads)). Block: (kNaiveBlockThreads).
/// One thread per (token, element): the literal assignment.
__global__ void kv_append_naive_kernel(const float* k, const float* v,
                                       const int32_t* slot_mapping, int64_t n_tokens, int kv_dim,
                                       float* k_pool, float* v_pool) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_tokens * kv_dim) return;
  const int64_t t = idx / kv_dim;
  const int64_t i = idx % kv_dim;
  const int32_t slot = slot_mapping[t];
  if (slot < 0) return;
  k_pool[static_cast<int64_t>(slot) * kv_dim + i] = k[idx];
  v_pool[static_cast<int64_t>(slot) * kv_dim + i] = v[idx];
}

/// Grid: (n_tokens). Block: (kAppendThreads): warp w rounds KV heads w, w + 4, ... of the
/// token's K and V rows into the f16 or int8 pool (QuantizedKvLayer's layout).
template <KvQuant kType>
__global__ void __launch_bounds__(kAppendThreads)
kv_append_quantized_kernel(const float* k,               // (n_tokens, n_kv_heads * head_dim)
                           const float* v,               // (n_tokens, n_kv_heads * head_dim)
                           const int32_t* slot_mapping,  // (n_tokens), < 0 = skip
                           int n_kv_heads, int head_dim, QuantizedKvLayer pool) {
  constexpr int kWarps = kAppendThreads / detail::kWarpSize;
  const int64_t t = blockIdx.x;
  const int32_t slot = slot_mapping[t];
  if (slot < 0) return;  // padding row
  const int lane = threadIdx.x % detail::kWarpSize;
  const int kv_dim = n_kv_heads * head_dim;
  for (int g = threadIdx.x / detail::kWarpSize; g < n_kv_heads; g += kWarps) {
    const int64_t src = t * kv_dim + static_cast<int64_t>(g) * head_dim;
    const int64_t dst = static_cast<int64_t>(slot) * kv_dim + static_cast<int64_t>(g) * head_dim;
    if constexpr (kType == KvQuant::F16) {
      auto* kp = static_cast<__half*>(pool.k);
      auto* vp = static_cast<__half*>(pool.v);
      for (int d = lane; d < head_dim; d += detail::kWarpSize) {
        kp[dst + d] = __float2half_rn(k[src + d]);
        vp[dst + d] = __float2half_rn(v[src + d]);
      }
    } else {
      // quantize_row_int8 per head: s = max|x| / 127, code = round(x / s).
      float k_max = 0.0f, v_max = 0.0f;
      for (int d = lane; d < head_dim; d += detail::kWarpSize) {
        k_max = fmaxf(k_max, fabsf(k[src + d]));
        v_max = fmaxf(v_max, fabsf(v[src + d]));
      }
      const float k_scale = detail::warp_max(k_max) / 127.0f;
      const float v_scale = detail::warp_max(v_max) / 127.0f;
      auto* kp = static_cast<int8_t*>(pool.k);
      auto* vp = static_cast<int8_t*>(pool.v);
      for (int d = lane; d < head_dim; d += detail::kWarpSize) {
        kp[dst + d] = k_scale > 0.0f ? static_cast<int8_t>(roundf(k[src + d] / k_scale)) : int8_t{0};
        vp[dst + d] = v_scale > 0.0f ? static_cast<int8_t>(roundf(v[src + d] / v_scale)) : int8_t{0};
      }
      if (lane == 0) {
        const int64_t at = static_cast<int64_t>(slot) * n_kv_heads + g;
        pool.k_scales[at] = k_scale;
        pool.v_scales[at] = v_scale;
      }
    }
  }
}

// ---- host launchers -----------------------------------------------------------------------------

void check_kv_append_args(const char* op, const float* k, const float* v,
                          const int32_t* slot_mapping, int64_t n_tokens, int64_t kv_dim,
                          const float* k_pool, const float* v_pool) {
  const std::string where = std::string("cuda::") + op + ": ";
  if (k == nullptr || v == nullptr || slot_mapping == nullptr || k_pool == nullptr ||
      v_pool == nullptr) {
    throw InvalidArgument(where + "null device pointer (k, v, slot_mapping, k_pool or v_pool)");
  }
  if (n_tokens < 0 || n_tokens > INT_MAX || kv_dim <= 0 || kv_dim > INT_MAX) {
    throw InvalidArgument(where + "need 0 <= n_tokens <= INT32_MAX and 0 < kv_dim <= INT32_MAX, "
                          "got n_tokens=" + std::to_string(n_tokens) + " kv_dim=" +
                          std::to_string(kv_dim));
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void kv_append(const float* k, const float* v, const int32_t* slot_mapping, int64_t n_tokens,
               int64_t kv_dim, float* k_pool, float* v_pool, cudaStream_t stream) {
  check_kv_append_args("kv_append", k, v, slot_mapping, n_tokens, kv_dim, k_pool, v_pool);
  if (n_tokens == 0) return;
  const bool vec4 = kv_dim % 4 == 0 && aligned16(k) && aligned16(v) && aligned16(k_pool) &&
                    aligned16(v_pool);
  const auto n_blocks = static_cast<unsigned>(n_tokens);
  const int dim = static_cast<int>(kv_dim);
  if (vec4) {
    kv_append_kernel<true><<<n_blocks, kAppendThreads, 0, stream>>>(k, v, slot_mapping, dim,
                                                                   k_pool, v_pool);
  } else {
    kv_append_kernel<false><<<n_blocks, kAppendThreads, 0, stream>>>(k, v, slot_mapping, dim,
                                                                    k_pool, v_pool);
  }
  CUDA_CHECK(cudaGetLastError());
}

void kv_append_naive(const float* k, const float* v, const int32_t* slot_mapping,
                     int64_t n_tokens, int64_t kv_dim, float* k_pool, float* v_pool,
                     cudaStream_t stream) {
  check_kv_append_args("kv_append_naive", k, v, slot_mapping, n_tokens, kv_dim, k_pool, v_pool);
  if (n_tokens == 0) return;
  const int64_t n_blocks = (n_tokens * kv_dim + kNaiveBlockThreads - 1) / kNaiveBlockThreads;
  if (n_blocks > INT_MAX) {
    throw InvalidArgument("cuda::kv_append_naive: " + std::to_string(n_tokens * kv_dim) +
                          " elements exceed one launch");
  }
  kv_append_naive_kernel<<<static_cast<unsigned>(n_blocks), kNaiveBlockThreads, 0, stream>>>(
      k, v, slot_mapping, n_tokens, static_cast<int>(kv_dim), k_pool, v_pool);
  CUDA_CHECK(cudaGetLastError());
}

void kv_append_quantized(const float* k, const float* v, const int32_t* slot_mapping, int64_t n_tokens,
                         int64_t n_kv_heads, int64_t head_dim, const QuantizedKvLayer& pool, cudaStream_t stream) {
  const std::string where = "cuda::kv_append_quantized: ";
  const bool int8 = pool.type == KvQuant::Int8;
  if (k == nullptr || v == nullptr || slot_mapping == nullptr || pool.k == nullptr || pool.v == nullptr ||
      (int8 && (pool.k_scales == nullptr || pool.v_scales == nullptr))) {
    throw InvalidArgument(where + "null device pointer (k, v, slot_mapping, the pool's K / V, or an int8 "
                          "pool's scales)");
  }
  if (n_tokens < 0 || n_tokens > INT_MAX || n_kv_heads <= 0 || head_dim <= 0 || n_kv_heads > INT_MAX / head_dim) {
    throw InvalidArgument(where + "need 0 <= n_tokens <= INT32_MAX, n_kv_heads > 0, head_dim > 0 and "
                          "n_kv_heads * head_dim <= INT32_MAX, got n_tokens=" + std::to_string(n_tokens) +
                          " n_kv_heads=" + std::to_string(n_kv_heads) + " head_dim=" + std::to_string(head_dim));
  }
  if (n_tokens == 0) return;
  const auto grid = static_cast<unsigned>(n_tokens);
  const int nh = static_cast<int>(n_kv_heads), hd = static_cast<int>(head_dim);
  if (int8) {
    kv_append_quantized_kernel<KvQuant::Int8><<<grid, kAppendThreads, 0, stream>>>(k, v, slot_mapping, nh, hd, pool);
  } else {
    kv_append_quantized_kernel<KvQuant::F16><<<grid, kAppendThreads, 0, stream>>>(k, v, slot_mapping, nh, hd, pool);
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace lio::cuda
