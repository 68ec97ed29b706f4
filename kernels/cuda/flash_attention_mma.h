// flash_attention_mma.h — FlashAttention-2 forward on tensor cores (flash_attention_mma.cu; bf16 in,
// f32 out), for chapter 07's kernel benchmark: one contiguous sequence, not the engine's path.
//
// Launcher conventions (README.md in this folder): device pointers, an explicit stream, shapes
// checked on the host (lio::InvalidArgument), launches checked (lio::cuda::CudaError).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lio::cuda {

/// FlashAttention-2 forward on tensor cores, for the kernel benchmark: one sequence of n tokens,
/// contiguous bf16 (uint16_t bits, as lio::f32_to_bf16) q (n_heads, n, head_dim) and k, v
/// (n_kv_heads, n, head_dim); query head h reads KV head h / (n_heads / n_kv_heads). out:
/// (n_heads, n, head_dim) f32 = softmax(scale q k^T [+ causal mask]) v; lse: (n_heads, n)
/// natural-log logsumexp of the scaled scores, or null. Work layout: a block of 4 warps per
/// (tile of 64 query rows, head), each warp 16 rows; K/V tiles of 64 keys in shared memory;
/// S = Q K^T and O += P V with nvcuda::wmma 16x16x16 (bf16 in, f32 accumulate); the online
/// softmax runs in f32 registers, P rounded to bf16 for the second product; causal tiles above
/// the diagonal are skipped. Error vs f32: P's bf16 rounding (~2^-9 relative per weight).
/// Preconditions (throw InvalidArgument): non-null, 16-byte-aligned q, k, v, out; 0 <= n <=
/// INT32_MAX (0 launches nothing); head_dim 64 or 128;
/// n_heads a positive multiple of n_kv_heads, n_heads <= 65535; scale finite. Throws
/// UnsupportedError on a GPU older than sm_80, CudaError if the launch fails.
void flash_attention_bf16(const uint16_t* q, const uint16_t* k, const uint16_t* v, float* out,
                          float* lse, int64_t n, int64_t n_heads, int64_t n_kv_heads,
                          int64_t head_dim, float scale, bool causal, cudaStream_t stream);

/// FLOPs of flash_attention_bf16() (the two matmuls, 2 FLOPs per multiply-add): 4 n^2 head_dim
/// n_heads, halved when causal (FlashAttention-2's benchmark convention, Dao 2023, sec. 4.1).
double flash_attention_bf16_flops(int64_t n, int64_t n_heads, int64_t head_dim, bool causal);

}  // namespace lio::cuda
