// flash_forward.h — chapter 07's FlashAttention-2 forward kernel over contiguous f32 Q, K and V
// (Dao 2023, "FlashAttention-2", Algorithm 1, forward only), the chapter's first CUDA exercise.
//
// Two halves, two owners:
//   launch_flash_forward   GIVEN (flash_forward.cu): checks the shapes, picks the grid, the block
//                          and the dynamic shared memory below, opts in past 48 KiB, launches and
//                          checks the launch.
//   flash_forward_kernel   Task 6, the BODY is the learner's: exercises|solutions/
//                          07_flash_attention/flash_attention_kernel.cu (lio_ch07_cuda picks
//                          which; the lesson is docs/07_flash_attention.md, section 9, "Your
//                          kernel").
// Not on the engine's path: the engine's CUDA attention reads the paged pool (flash_attention.cu).
// This one reads a contiguous cache, as cpu::attention_reference does, which is its test oracle
// (tests/grade/07_flash_attention/test_task_6_cuda_flash_forward.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace lio::cuda {

// ---- the launch shape the kernel is given -------------------------------------------------------
// Each block owns one query tile of one head: kFlashForwardRows query rows, walked against key
// tiles of kFlashForwardKeys keys staged in shared memory.

/// Br: query rows of one thread block (the last tile of a head may hold fewer).
inline constexpr int kFlashForwardRows = 32;
/// Bc: keys of one K (and one V) tile in shared memory.
inline constexpr int kFlashForwardKeys = 32;
/// Threads of one block: 4 warps.
inline constexpr int kFlashForwardThreads = 128;
/// Largest head_dim the launcher accepts.
inline constexpr int64_t kFlashForwardMaxHeadDim = 128;
/// head_dim is a multiple of this (SmolLM2's 64, phi-2's 80, 96, 128 all are): 4 threads of a
/// row can each take whole float4s, and a kernel can keep one exact-width body per head_dim.
inline constexpr int64_t kFlashForwardHeadDimStep = 16;

/// Dynamic shared memory one block gets, in bytes: room for a K tile and a V tile of
/// kFlashForwardKeys rows x head_dim floats each (2 x 32 x 64 x 4 = 16 KiB at head_dim 64,
/// 32 KiB at 128). How the kernel lays them out is its own business.
constexpr size_t flash_forward_smem_bytes(int64_t head_dim) {
  return 2 * static_cast<size_t>(kFlashForwardKeys) * static_cast<size_t>(head_dim) * sizeof(float);
}

// ---- the launcher -------------------------------------------------------------------------------

/// Causal grouped-query attention of n_q query rows against a contiguous cache, on the device,
/// with the kernel of Task 6: out equals cpu::attention_reference(q, k, v, out, n_q, start_pos,
/// n_heads, n_kv_heads, head_dim, scale) to f32 rounding.
///   q:    (n_q, n_heads, head_dim) device pointer; row i is at position start_pos + i
///   k, v: (n_ctx, n_kv_heads, head_dim) device pointers, positions 0 .. n_ctx - 1; rows past
///         start_pos + n_q - 1 are never read (they may hold anything)
///   out:  (n_q, n_heads, head_dim) device pointer, written whole; must not overlap q, k or v
/// Query row i of head h attends to positions 0 .. start_pos + i of KV head
/// h / (n_heads / n_kv_heads) (Ainslie et al. 2023, GQA); scale is usually 1 / sqrt(head_dim).
/// Launch: grid (ceil(n_q / kFlashForwardRows), n_heads), block kFlashForwardThreads, dynamic
/// shared memory flash_forward_smem_bytes(head_dim), on `stream`. n_q == 0 launches nothing.
/// Throws InvalidArgument before any CUDA call when: n_q or start_pos < 0; n_heads or n_kv_heads
/// < 1, or n_heads not a multiple of n_kv_heads, or n_heads > 65,535 (the grid's y); head_dim not
/// a multiple of kFlashForwardHeadDimStep in 16 .. kFlashForwardMaxHeadDim; n_ctx < start_pos +
/// n_q, or n_ctx x n_kv_heads x head_dim past int64; start_pos + n_q > INT32_MAX (the kernel's
/// positions are int); scale not finite; a pointer null, or out overlapping q, k or v.
/// Throws CudaError if the launch fails.
void launch_flash_forward(const float* q, const float* k, const float* v, float* out, int64_t n_q,
                          int64_t start_pos, int64_t n_ctx, int64_t n_heads, int64_t n_kv_heads,
                          int64_t head_dim, float scale, cudaStream_t stream);

#ifdef __CUDACC__
/// Task 6: the kernel launch_flash_forward runs. Its contract (inputs, what must hold after each
/// key tile and at the end) is the doc comment in exercises/07_flash_attention/
/// flash_attention_kernel.cu, the learner's file; the reference is in solutions/.
__global__ void __launch_bounds__(kFlashForwardThreads)
flash_forward_kernel(const float* __restrict__ q,  // (n_q, n_heads, head_dim)
                     const float* __restrict__ k,  // (n_ctx, n_kv_heads, head_dim)
                     const float* __restrict__ v,  // (n_ctx, n_kv_heads, head_dim)
                     float* __restrict__ out,      // (n_q, n_heads, head_dim)
                     int n_q, int start_pos, int n_heads, int n_kv_heads, int head_dim,
                     float scale);
#endif

}  // namespace lio::cuda
