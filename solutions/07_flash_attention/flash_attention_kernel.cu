// Chapter 07, Task 6 — REFERENCE SOLUTION: the FlashAttention-2 forward kernel (Dao 2023,
// "FlashAttention-2", Algorithm 1, forward) over contiguous f32 Q, K and V. Its launcher is given
// (kernels/cuda/flash_forward.cu); its scalar twin, the test oracle, is cpu::attention_reference.
//
// Work split (one block = one query tile of one head, kFlashForwardThreads = 128 threads):
//   thread t owns query row t / 4 of the tile (Br = 32 rows) and the head_dim slice
//   d = t % 4, t % 4 + 4, t % 4 + 8, ...: its slice of Q and of the accumulator, and the row's
//   (m, l), live in registers for the whole kernel. A row's 4 lanes are adjacent in one warp.
//   Per key tile (Bc = 32 keys): all 128 threads copy K and V rows into shared memory; each
//   thread dots its Q slice with its slice of every key, the row's 4 lanes add their partial
//   dots with two shuffles (each lane then holds the row's 32 scores), and each lane folds the
//   tile into its (m, l, acc slice) with the online softmax: no lane needs another's scores.
// Interleaved slices (d = t % 4 + 4 c, not a contiguous quarter each): at every step the 4 lanes
// of a row read 4 adjacent floats of one K or V row, and every row of the warp reads the same
// 4 (broadcast): one shared-memory wavefront, no bank conflict. Contiguous quarters of 16 floats
// would put lanes 0 and 2 of a row in the same bank at head_dim 64.
//
// Shared-memory budget (flash_forward_smem_bytes): K and V tiles of Bc x head_dim f32 = 16 KiB
// at head_dim 64, 32 KiB at 128. Q never enters shared memory (registers hold it), nor does S
// (each lane holds its row's Bc scores in registers). Why Br = Bc = 32 (flash_forward.h):
//   - registers bound the occupancy first. At head_dim 128 a thread holds 32 Q floats, 32
//     accumulators and 32 scores, 128 registers with the rest (ptxas -v, sm_90, no spills; the
//     kernel's count is its widest head_dim's). 128 threads x 128 = 16 K of an SM's 64 K
//     registers: 4 blocks an SM, whose tiles take 4 x 32 KiB = 128 KiB of the H100/H200's
//     228 KiB: shared memory is not the limit.
//   - Bc = 64 would double the scores a thread holds (32 more registers: spills or fewer blocks)
//     and the tiles (64 KiB a block at head_dim 128, past the 48 KiB a launch gets without
//     opting in), for half the barriers. Br = 64 on the same 128 threads would give each thread
//     twice the Q and accumulator slices (another 64 registers at head_dim 128).
//   - Each K/V tile is read from HBM once per block and reused by its 32 rows; FA2's K/V traffic
//     is (N / Br) x 2 N d (section 8): Br = 32 reads K and V 4 times less often than Br = 8.
#include <cuda_runtime.h>

#include <cmath>

#include "flash_forward.h"

namespace lio::cuda {

/// Task 6 (chapter 07), the reference: one query tile of one head per block, FlashAttention-2's
/// forward pass. Contract: the doc comment of the stub, exercises/07_flash_attention/
/// flash_attention_kernel.cu; launch shape: flash_forward.h.
__global__ void __launch_bounds__(kFlashForwardThreads)
flash_forward_kernel(const float* __restrict__ q,  // (n_q, n_heads, head_dim)
                     const float* __restrict__ k,  // (n_ctx, n_kv_heads, head_dim)
                     const float* __restrict__ v,  // (n_ctx, n_kv_heads, head_dim)
                     float* __restrict__ out,      // (n_q, n_heads, head_dim)
                     int n_q, int start_pos, int n_heads, int n_kv_heads, int head_dim,
                     float scale) {
  constexpr int kThreadsPerRow = kFlashForwardThreads / kFlashForwardRows;  // 4
  constexpr int kWarps = kFlashForwardThreads / 32;
  constexpr int kBc = kFlashForwardKeys;
  static_assert(kFlashForwardThreads % kFlashForwardRows == 0, "whole threads per row");
  static_assert(32 % kThreadsPerRow == 0 && (kThreadsPerRow & (kThreadsPerRow - 1)) == 0,
                "a row's threads are a power-of-two group of lanes inside one warp");
  static_assert(kFlashForwardMaxHeadDim % kThreadsPerRow == 0, "whole dimensions per thread");

  extern __shared__ float flash_forward_smem[];         // flash_forward_smem_bytes(head_dim)
  float* k_tile = flash_forward_smem;                   // (kBc, head_dim)
  float* v_tile = flash_forward_smem + kBc * head_dim;  // (kBc, head_dim)

  const int h = blockIdx.y;
  const int g = h / (n_heads / n_kv_heads);  // the KV head this query head reads (GQA)
  const int row0 = blockIdx.x * kFlashForwardRows;
  const int rows_here = min(kFlashForwardRows, n_q - row0);
  const int r = threadIdx.x / kThreadsPerRow;  // this thread's row of the tile
  const int lane_in_row = threadIdx.x % kThreadsPerRow;
  const bool valid = r < rows_here;
  // A padding row (past n_q, in the head's last tile) runs as the tile's first row: it sees key 0,
  // stays finite and writes nothing. Every thread runs every tile, so the barriers and the
  // shuffles below always see whole warps.
  const int row = row0 + (valid ? r : 0);
  const int pos = start_pos + row;
  // Keys some row of the block sees: 0 .. the last row's position. No tile past it is loaded
  // (the causal skip of section 5); inside the last tile, keys past it are staged as zeros.
  const int key_end = start_pos + row0 + rows_here;
  // Scores in base 2: e^x = 2^(x log2 e), so the exponentials are exp2f (the SFU's EX2).
  const float scale_log2 = scale * 1.4426950408889634f;
  const float* q_row = q + (static_cast<int64_t>(row) * n_heads + h) * head_dim;

  // kDim == head_dim, known at compile time: the loops over a thread's dims unroll with
  // constant shared-memory offsets and no per-dimension guard. (A guarded 128-wide body for any
  // head_dim took 247 registers where this one takes 128, and the kernel's count is its widest
  // branch's.)
  auto attend = [&]<int kDim>() {
    constexpr int kSlice = kDim / kThreadsPerRow;  // dims of one thread
    static_assert(kDim % kThreadsPerRow == 0, "whole dimensions per thread");
    float q_reg[kSlice];  // q[row, h, lane_in_row + kThreadsPerRow * c]
    float acc[kSlice];    // the same dims of sum_j 2^(s_j - m) v_j
#pragma unroll
    for (int c = 0; c < kSlice; ++c) {
      const int d = lane_in_row + kThreadsPerRow * c;
      q_reg[c] = q_row[d];
      acc[c] = 0.0f;
    }
    float m = -INFINITY;  // running max of the row's base-2 scores
    float l = 0.0f;       // running sum of 2^(s_j - m)

    // key_end is the same for every thread of the block, so every thread reaches each barrier.
    for (int k0 = 0; k0 < key_end; k0 += kBc) {
      __syncthreads();  // every thread is done reading the previous tile
      // Stage keys k0 .. k0 + kBc - 1 of KV head g: warp w copies keys w, w + kWarps, ..., its
      // lanes consecutive floats of one key (a key's head_dim floats are contiguous: coalesced).
      for (int j = static_cast<int>(threadIdx.x) / 32; j < kBc; j += kWarps) {
        const int key = k0 + j;
        const int64_t at = (static_cast<int64_t>(key) * n_kv_heads + g) * kDim;
        for (int d = static_cast<int>(threadIdx.x) % 32; d < kDim; d += 32) {
          k_tile[j * kDim + d] = key < key_end ? k[at + d] : 0.0f;
          v_tile[j * kDim + d] = key < key_end ? v[at + d] : 0.0f;
        }
      }
      __syncthreads();

      // This row's kBc base-2 scores; -inf where the key lies past the row's position.
      float s[kBc];
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kBc; ++j) {
        float dot = 0.0f;
#pragma unroll
        for (int c = 0; c < kSlice; ++c) {
          const int d = lane_in_row + kThreadsPerRow * c;
          dot += q_reg[c] * k_tile[j * kDim + d];
        }
        // The row's lanes add their partial dots (xor butterfly): each gets the same sum, bit for
        // bit (float addition commutes), so (m, l) agree across the row's lanes without talking.
#pragma unroll
        for (int offset = 1; offset < kThreadsPerRow; offset *= 2) {
          dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        }
        s[j] = k0 + j <= pos ? dot * scale_log2 : -INFINITY;
        tile_max = fmaxf(tile_max, s[j]);
      }

      // Fold the tile (section 3, step 4). Key 0 is in the first tile and every row sees it, so
      // m_new is finite from the first tile on, and there 2^(m - m_new) = 2^-inf = 0.
      const float m_new = fmaxf(m, tile_max);
      const float rescale = exp2f(m - m_new);
      l *= rescale;
#pragma unroll
      for (int c = 0; c < kSlice; ++c) acc[c] *= rescale;
#pragma unroll
      for (int j = 0; j < kBc; ++j) {
        const float p = exp2f(s[j] - m_new);  // 0 for a masked key (2^-inf)
        l += p;
#pragma unroll
        for (int c = 0; c < kSlice; ++c) {
          const int d = lane_in_row + kThreadsPerRow * c;
          acc[c] += p * v_tile[j * kDim + d];
        }
      }
      m = m_new;
    }

    if (!valid) return;
    // l >= 1: the row's largest score contributed 2^0.
    float* out_row = out + (static_cast<int64_t>(row) * n_heads + h) * head_dim;
#pragma unroll
    for (int c = 0; c < kSlice; ++c) {
      const int d = lane_in_row + kThreadsPerRow * c;
      out_row[d] = acc[c] / l;
    }
  };

  // One exact-width copy of the body per head_dim the launcher admits (multiples of 16).
  switch (head_dim) {
    case 16: attend.template operator()<16>(); break;
    case 32: attend.template operator()<32>(); break;
    case 48: attend.template operator()<48>(); break;
    case 64: attend.template operator()<64>(); break;
    case 80: attend.template operator()<80>(); break;
    case 96: attend.template operator()<96>(); break;
    case 112: attend.template operator()<112>(); break;
    case 128: attend.template operator()<128>(); break;
    default: break;  // launch_flash_forward admits no other head_dim
  }
}

}  // namespace lio::cuda
