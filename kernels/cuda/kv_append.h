// kv_append.h — writing each token's K and V into the paged pool on the GPU (kv_append.cu): f32,
// f16 or int8 (quantized_kv.h), and the naive twin.
//
// Launcher conventions (README.md in this folder): device pointers, an explicit stream, shapes
// checked on the host (lio::InvalidArgument), launches checked (lio::cuda::CudaError).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "quantized_kv.h"

namespace lio::cuda {

/// Writes each token's K and V row into the paged pool at its slot — vLLM's
/// reshape_and_cache (csrc/cache_kernels.cu) without the layout change:
///   k_pool[slot_mapping[t] * kv_dim + i] = k[t * kv_dim + i]   (and v likewise)
/// for t < n_tokens, i < kv_dim. A slot < 0 means "skip this row" (padding), as in vLLM.
/// k, v: (n_tokens, kv_dim); slot_mapping: (n_tokens) int32; k_pool, v_pool: one layer of the
/// pool, (n_slots, kv_dim) = (n_blocks, block_size, n_kv_heads, head_dim); device pointers;
/// the rows must not overlap the pool. Slots must be distinct (two rows writing one slot race)
/// and below n_slots: neither is checked here (ForwardBatch::validate checks them on the host).
/// One block per token, float4 copies when kv_dim % 4 == 0 and every pointer is 16-byte aligned.
/// Preconditions (throw InvalidArgument): non-null pointers, 0 <= n_tokens <= INT32_MAX (0
/// launches nothing), 0 < kv_dim <= INT32_MAX. Throws CudaError if the launch fails.
void kv_append(const float* k, const float* v, const int32_t* slot_mapping, int64_t n_tokens,
               int64_t kv_dim, float* k_pool, float* v_pool, cudaStream_t stream);

/// Same contract as kv_append(); one thread per (token, element), the literal assignment.
void kv_append_naive(const float* k, const float* v, const int32_t* slot_mapping,
                     int64_t n_tokens, int64_t kv_dim, float* k_pool, float* v_pool,
                     cudaStream_t stream);

/// kv_append() into an f16 or int8 pool: each token's K and V rows, (n_tokens, n_kv_heads *
/// head_dim) f32, rounded into `pool` at slot_mapping[t] (slot < 0: skipped).
///   F16:  bits = __float2half_rn(x) (IEEE round to nearest even, as lio::f32_to_f16);
///   Int8: per (token, KV head) vector x of head_dim values, s = max|x| / 127 and
///         code_d = round(x_d / s) (half away from zero), 0 when s == 0 — chapter 03's
///         quantize_row_int8 applied per head (kv_pool.h), so CPU and CUDA pools hold the
///         same codes (every step is exact IEEE arithmetic: no fast-math).
/// One block per token, one warp per KV head (its max|x| a warp reduction). Non-finite inputs
/// are not checked (the CPU path throws on them): they give garbage codes for that head.
/// Preconditions (throw InvalidArgument): non-null k, v, slot_mapping, pool.k, pool.v (and the
/// scales for Int8), 0 <= n_tokens <= INT32_MAX, 0 < n_kv_heads, 0 < head_dim, n_kv_heads *
/// head_dim <= INT32_MAX. Throws CudaError if the launch fails.
void kv_append_quantized(const float* k, const float* v, const int32_t* slot_mapping, int64_t n_tokens,
                         int64_t n_kv_heads, int64_t head_dim, const QuantizedKvLayer& pool, cudaStream_t stream);

}  // namespace lio::cuda
