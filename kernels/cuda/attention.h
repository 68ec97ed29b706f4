// attention.h — causal GQA attention over a contiguous KV cache on the GPU (attention.cu; chapter
// 01's contract), its decode step, and the naive twin. The engine's paged path is
// paged_attention.h and flash_attention_cuda.h.
//
// Launcher conventions (README.md in this folder): device pointers, an explicit stream, shapes
// checked on the host (lio::InvalidArgument), launches checked (lio::cuda::CudaError).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lio::cuda {

/// Causal grouped-query attention for a chunk of queries against a contiguous KV cache — the
/// contract of cpu::attention_reference. q: (n_q, n_heads, head_dim) for positions start_pos ..
/// start_pos + n_q - 1; k_cache, v_cache: (>= start_pos + n_q, n_kv_heads, head_dim);
/// query i attends to cache positions 0 .. start_pos + i; query head h reads KV head
/// h / (n_heads / n_kv_heads) (Ainslie et al. 2023). out: (n_q, n_heads, head_dim), must not
/// overlap q or the cache. softmax(scale * q.k) v, max-subtracted, in f32.
/// One block per (query, head): scores for all its keys go to shared memory (4 bytes per
/// key), then max, exp and sum, then P.V. Plain "materialize the scores" attention; chapter 07
/// replaces it with FlashAttention's tiled online softmax (Dao et al. 2022).
/// Preconditions (throw InvalidArgument): non-null pointers, n_q >= 0 (0 launches nothing),
/// start_pos >= 0, n_kv_heads > 0, n_heads a multiple of n_kv_heads, head_dim > 0, scale
/// finite, sizes within INT32_MAX, and start_pos + n_q <= attention_max_keys(head_dim)
/// ((keys + head_dim) * 4 bytes of shared memory per block: 8192 keys = 32 KiB; Hopper's
/// opt-in limit of 227 KiB holds ~58K keys). Throws CudaError if the launch fails.
void attention(const float* q, const float* k_cache, const float* v_cache, float* out,
               int64_t n_q, int64_t start_pos, int64_t n_heads, int64_t n_kv_heads,
               int64_t head_dim, float scale, cudaStream_t stream);

/// The most keys (start_pos + n_q) attention() handles at this head_dim on the current device:
/// its opt-in shared memory per block, less the kernel's static shared memory, in floats, less
/// head_dim. Throws InvalidArgument if head_dim <= 0, CudaError if the device query fails.
int64_t attention_max_keys(int64_t head_dim);

/// Same contract as attention() (without the shared-memory limit); one thread per
/// (query, head), walking the keys once with the running-max ("online") softmax of
/// cpu::attention_reference (Milakov & Gimelshein 2018). The reference attention() is tested
/// against.
void attention_naive(const float* q, const float* k_cache, const float* v_cache, float* out,
                     int64_t n_q, int64_t start_pos, int64_t n_heads, int64_t n_kv_heads,
                     int64_t head_dim, float scale, cudaStream_t stream);

/// The decode step: ONE query (n_heads, head_dim) over cache positions 0 .. n_ctx-1 (its own
/// K/V included, at n_ctx-1) — the contract of cpu::decode_attention; equals
/// attention(q, k, v, out, 1, n_ctx - 1, ...). Throws InvalidArgument if n_ctx < 1, else as
/// attention().
void decode_attention(const float* q, const float* k_cache, const float* v_cache, float* out,
                      int64_t n_ctx, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                      float scale, cudaStream_t stream);

}  // namespace lio::cuda
