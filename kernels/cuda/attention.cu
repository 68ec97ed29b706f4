// attention.cu — causal grouped-query attention over the contiguous KV cache, on the GPU.
//
//   out[i, h] = sum_j softmax_j(scale * q[i, h] . k[j, g]) v[j, g],  j <= start_pos + i,
//   g = h / (n_heads / n_kv_heads)                      (Vaswani et al. 2017 eq. 1; GQA)
//
// Optimized kernel ("materialized scores"): one block per (query i, head h).
//   1. q[i, h] to shared memory; thread t scores keys t, t + 128, ... (a whole head_dim dot
//      product each, sequential like the CPU's) and stores them in shared memory (4 bytes/key);
//   2. block-wide max, then p_j = exp(s_j - max) in place and the block-wide sum l;
//   3. P.V: thread t owns output element t % head_dim for the keys j = t / head_dim (mod
//      groups); the groups' partial sums meet in shared memory; out = acc / l.
// It reads K and V once per (query, head) — fine for decode and the short prompts of these
// chapters, quadratic traffic for long prefill. Chapter 07 (FlashAttention, Dao et al. 2022)
// tiles keys through shared memory with an online softmax so nothing grows with the context.
// Naive kernel: one thread per (query, head), online softmax over the keys, as
// cpu::attention_reference.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "attention.h"
#include "online_softmax.cuh"
#include "lio/error.h"
#include "reduce.cuh"

namespace lio::cuda {

namespace {

constexpr int kAttnThreads = 128;
constexpr int kNaiveBlockThreads = 64;
constexpr size_t kDefaultSharedBytes = 48 * 1024;  // per-block limit without opt-in
// Upper bound of attention_kernel's static shared memory: `partial` plus the two block
// reductions' per-warp scratch (at most 32 floats each). The exact figure comes from
// cudaFuncGetAttributes when it matters.
constexpr size_t kStaticSharedBytesBound = (kAttnThreads + 2 * 32) * sizeof(float);

// ---- kernels --------------------------------------------------------------------------------

/// Grid: (n_q, n_heads). Block: (kAttnThreads).
/// Dynamic shared memory: (head_dim + start_pos + n_q) floats: q, then one score per key.
__global__ void __launch_bounds__(kAttnThreads)
attention_kernel(const float* q,        // (n_q, n_heads, head_dim)
                 const float* k_cache,  // (>= start_pos + n_q, n_kv_heads, head_dim)
                 const float* v_cache,  // same layout as k_cache
                 float* out,            // (n_q, n_heads, head_dim)
                 int start_pos,         // position of query 0
                 int n_heads,
                 int n_kv_heads,        // divides n_heads
                 int head_dim,
                 float scale) {
  extern __shared__ float shared[];
  __shared__ float partial[kAttnThreads];
  float* q_s = shared;              // (head_dim)
  float* p = shared + head_dim;     // (n_keys) scores, then probabilities (unnormalized)
  const int i = blockIdx.x;
  const int h = blockIdx.y;
  const int g = h / (n_heads / n_kv_heads);
  const int n_keys = start_pos + i + 1;  // causal: keys 0 .. start_pos + i
  const int64_t kv_stride = static_cast<int64_t>(n_kv_heads) * head_dim;
  const float* k_g = k_cache + static_cast<int64_t>(g) * head_dim;
  const float* v_g = v_cache + static_cast<int64_t>(g) * head_dim;
  const float* q_ih = q + (static_cast<int64_t>(i) * n_heads + h) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += kAttnThreads) q_s[d] = q_ih[d];
  __syncthreads();

  // 1. scores, one thread per key: each thread streams its key's head_dim floats (independent
  //    loads, many in flight) against q broadcast from shared memory.
  float local_max = -INFINITY;
  for (int j = threadIdx.x; j < n_keys; j += kAttnThreads) {
    const float* k_j = k_g + j * kv_stride;
    float dot = 0.0f;
#pragma unroll 8
    for (int d = 0; d < head_dim; ++d) dot += q_s[d] * k_j[d];
    const float s = dot * scale;
    p[j] = s;
    local_max = fmaxf(local_max, s);
  }
  // 2. softmax numerator and denominator (block_max's barrier publishes the scores)
  const float max_score = detail::block_max<kAttnThreads>(local_max);
  float local_sum = 0.0f;
  for (int j = threadIdx.x; j < n_keys; j += kAttnThreads) {
    const float e = expf(p[j] - max_score);
    p[j] = e;
    local_sum += e;
  }
  const float inv_sum = 1.0f / detail::block_sum<kAttnThreads>(local_sum);

  // 3. P.V
  float* out_ih = out + (static_cast<int64_t>(i) * n_heads + h) * head_dim;
  if (head_dim <= kAttnThreads) {
    const int n_groups = kAttnThreads / head_dim;
    const int group = threadIdx.x / head_dim;
    const int d = threadIdx.x % head_dim;
    float acc = 0.0f;
    if (group < n_groups) {
      for (int j = group; j < n_keys; j += n_groups) acc += p[j] * v_g[j * kv_stride + d];
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    if (group == 0) {
      float total = 0.0f;
      for (int k = 0; k < n_groups; ++k) total += partial[k * head_dim + d];
      out_ih[d] = total * inv_sum;
    }
  } else {
    for (int d = threadIdx.x; d < head_dim; d += kAttnThreads) {
      float acc = 0.0f;
      for (int j = 0; j < n_keys; ++j) acc += p[j] * v_g[j * kv_stride + d];
      out_ih[d] = acc * inv_sum;
    }
  }
}

/// Grid: (ceil(n_q * n_heads / kNaiveBlockThreads)). Block: (kNaiveBlockThreads).
/// One thread per (query, head); `out` doubles as the running accumulator.
__global__ void attention_naive_kernel(const float* q, const float* k_cache, const float* v_cache,
                                       float* out, int n_q, int start_pos, int n_heads,
                                       int n_kv_heads, int head_dim, float scale) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(n_q) * n_heads) return;
  const int i = static_cast<int>(idx / n_heads);
  const int h = static_cast<int>(idx % n_heads);
  const int g = h / (n_heads / n_kv_heads);
  const int64_t kv_stride = static_cast<int64_t>(n_kv_heads) * head_dim;
  online_softmax_attend(q + idx * head_dim, k_cache + static_cast<int64_t>(g) * head_dim,
                        v_cache + static_cast<int64_t>(g) * head_dim, kv_stride, start_pos + i + 1,
                        [](int j) { return static_cast<int64_t>(j); }, head_dim, scale,
                        out + idx * head_dim);
}

// ---- host launchers -------------------------------------------------------------------------

/// Static shared memory of attention_kernel (`partial` + the reductions' scratch), as the
/// compiler laid it out. A block's dynamic allowance is the limit minus this: without opt-in,
/// 48 KiB - static (CUDA C++ Programming Guide, "Shared Memory").
size_t static_shared_bytes() {
  cudaFuncAttributes attributes{};
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, attention_kernel));
  return attributes.sharedSizeBytes;
}

void check_attention_args(const char* op, const float* q, const float* k_cache,
                          const float* v_cache, const float* out, int64_t n_q, int64_t start_pos,
                          int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale) {
  const std::string where = std::string("cuda::") + op + ": ";
  if (q == nullptr || k_cache == nullptr || v_cache == nullptr || out == nullptr) {
    throw InvalidArgument(where + "null device pointer (q, k_cache, v_cache or out)");
  }
  if (n_q < 0 || start_pos < 0 || n_kv_heads <= 0 || n_heads <= 0 || n_heads % n_kv_heads != 0 ||
      head_dim <= 0) {
    throw InvalidArgument(where + "need n_q >= 0, start_pos >= 0, head_dim > 0 and n_heads a "
                          "positive multiple of n_kv_heads > 0, got n_q=" + std::to_string(n_q) +
                          " start_pos=" + std::to_string(start_pos) + " n_heads=" +
                          std::to_string(n_heads) + " n_kv_heads=" + std::to_string(n_kv_heads) +
                          " head_dim=" + std::to_string(head_dim));
  }
  // Every index the kernels form, (position * n_kv_heads + g) * head_dim included, stays in int64;
  // the int arguments themselves must fit.
  if (start_pos + n_q > INT_MAX || n_heads > 65535 || n_heads * head_dim > INT_MAX) {
    throw InvalidArgument(where + "sizes exceed one launch: start_pos + n_q=" +
                          std::to_string(start_pos + n_q) + " n_heads=" + std::to_string(n_heads) +
                          " head_dim=" + std::to_string(head_dim));
  }
  if (!std::isfinite(scale)) throw InvalidArgument(where + "scale must be finite");
}

}  // namespace

int64_t attention_max_keys(int64_t head_dim) {
  if (head_dim <= 0) throw InvalidArgument("cuda::attention_max_keys: head_dim must be > 0");
  int device = 0;
  int optin_bytes = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const int64_t dynamic_floats =
      (static_cast<int64_t>(optin_bytes) - static_cast<int64_t>(static_shared_bytes())) /
      static_cast<int64_t>(sizeof(float));
  return std::max<int64_t>(0, dynamic_floats - head_dim);
}

void attention(const float* q, const float* k_cache, const float* v_cache, float* out,
               int64_t n_q, int64_t start_pos, int64_t n_heads, int64_t n_kv_heads,
               int64_t head_dim, float scale, cudaStream_t stream) {
  check_attention_args("attention", q, k_cache, v_cache, out, n_q, start_pos, n_heads, n_kv_heads,
                       head_dim, scale);
  if (n_q == 0) return;
  const int64_t n_keys = start_pos + n_q;
  const size_t shared_bytes = static_cast<size_t>(head_dim + n_keys) * sizeof(float);
  // Short contexts (up to ~12K keys) fit the default allowance: no device queries per launch.
  if (shared_bytes + kStaticSharedBytesBound > kDefaultSharedBytes) {
    const int64_t max_keys = attention_max_keys(head_dim);
    if (n_keys > max_keys) {
      throw InvalidArgument("cuda::attention: " + std::to_string(n_keys) + " keys of head_dim " +
                            std::to_string(head_dim) + " need more shared memory than this device "
                            "gives one block (at most " + std::to_string(max_keys) + " keys); use "
                            "attention_naive (or chapter 07's FlashAttention) for longer contexts");
    }
    // Raise the kernel's allowance to everything the device offers (not just this launch's
    // need), so the attribute only ever grows and concurrent launchers cannot lower it.
    const size_t allowance = static_cast<size_t>(max_keys + head_dim) * sizeof(float);
    if (shared_bytes > kDefaultSharedBytes - static_shared_bytes()) {
      CUDA_CHECK(cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(allowance)));
    }
  }
  const dim3 grid(static_cast<unsigned>(n_q), static_cast<unsigned>(n_heads));
  attention_kernel<<<grid, kAttnThreads, shared_bytes, stream>>>(
      q, k_cache, v_cache, out, static_cast<int>(start_pos), static_cast<int>(n_heads),
      static_cast<int>(n_kv_heads), static_cast<int>(head_dim), scale);
  CUDA_CHECK(cudaGetLastError());
}

void attention_naive(const float* q, const float* k_cache, const float* v_cache, float* out,
                     int64_t n_q, int64_t start_pos, int64_t n_heads, int64_t n_kv_heads,
                     int64_t head_dim, float scale, cudaStream_t stream) {
  check_attention_args("attention_naive", q, k_cache, v_cache, out, n_q, start_pos, n_heads,
                       n_kv_heads, head_dim, scale);
  if (n_q == 0) return;
  const int64_t n_threads = n_q * n_heads;
  const int64_t n_blocks_wanted = (n_threads + kNaiveBlockThreads - 1) / kNaiveBlockThreads;
  if (n_blocks_wanted > INT_MAX) {  // gridDim.x <= 2^31 - 1
    throw InvalidArgument("cuda::attention_naive: " + std::to_string(n_threads) +
                          " (query, head) pairs exceed one launch");
  }
  const unsigned n_blocks = static_cast<unsigned>(n_blocks_wanted);
  attention_naive_kernel<<<n_blocks, kNaiveBlockThreads, 0, stream>>>(
      q, k_cache, v_cache, out, static_cast<int>(n_q), static_cast<int>(start_pos),
      static_cast<int>(n_heads), static_cast<int>(n_kv_heads), static_cast<int>(head_dim), scale);
  CUDA_CHECK(cudaGetLastError());
}

void decode_attention(const float* q, const float* k_cache, const float* v_cache, float* out,
                      int64_t n_ctx, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                      float scale, cudaStream_t stream) {
  if (n_ctx < 1) {
    throw InvalidArgument("cuda::decode_attention: n_ctx must be >= 1 (the new token's own K/V "
                          "is in the cache), got " + std::to_string(n_ctx));
  }
  attention(q, k_cache, v_cache, out, 1, n_ctx - 1, n_heads, n_kv_heads, head_dim, scale, stream);
}

}  // namespace lio::cuda
