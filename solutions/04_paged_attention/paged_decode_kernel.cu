// Chapter 04, Task 6 — REFERENCE SOLUTION: decode attention over the paged KV pool (Kwon et al.
// 2023, "PagedAttention", section 4.1), f32, GQA, with the online softmax (Milakov & Gimelshein
// 2018). Its launcher is given (kernels/cuda/paged_decode.cu); its scalar twin, the test oracle,
// is cpu::paged_attention_reference.
//
// Work split (one block = one sequence's KV head g and up to 4 query heads of g's group,
// kPagedDecodeThreads = 128 threads, warp w = query head w of the block's slice of the group):
//   staging   per tile of 32 positions, warp w copies positions w, w + 4, ...: the lanes look up
//             the position's block in the table (one word, broadcast), then copy the K and V rows
//             of KV head g, lane l floats l, l + 32, ... (a row's head_dim floats are contiguous
//             in the pool: one coalesced read per row). One copy serves every head of the block.
//   scores    lane l of warp w scores position k0 + l for its head: the whole dot product of the
//             head's query (shared memory, every lane the same word: broadcast) with K row l of
//             the tile. No shuffles for the dot; the row stride head_dim + 1 puts the 32 lanes'
//             words, one per key, in 32 different banks.
//   softmax   the warp's max and sum over its 32 scores by xor shuffles (every lane gets the same
//             bits, so m and l agree across the warp without another word); base 2 (exp2f).
//   values    lane l owns dimensions l, l + 32, ... of the head's accumulator (head_dim / 32 of
//             them, in registers); for each key j of the tile, p_j comes from lane j by a shuffle
//             and the lanes add p_j times their dimensions of V row j (32 consecutive words: no
//             conflict).
// Why a block per (sequence, KV head) and not per (sequence, query head): a decode step reads
// the context once per block, and a block per query head would read a KV head's rows `group`
// times (3 for SmolLM2); staged in shared memory, a tile is read from HBM once and used by every
// head of the group. Why 32 keys a tile: one key per lane in the score phase; 35,072 B of shared
// memory a block at head_dim 128, under the 48 KiB a launch gets without opting in.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "paged_decode.h"

namespace lio::cuda {

namespace {

constexpr unsigned kFullWarp = 0xffffffffu;

/// The warp's max of x, in every lane (xor butterfly: each lane's result has the same bits).
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(kFullWarp, x, offset));
  return x;
}

/// The warp's sum of x, in every lane (xor butterfly: float addition commutes, so every lane
/// adds the same pairs and gets the same bits).
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(kFullWarp, x, offset);
  return x;
}

}  // namespace

/// Task 6 (chapter 04), the reference: one sequence's KV head and up to 4 of its query heads per
/// block, the context a tile at a time. Contract: the doc comment of the stub,
/// exercises/04_paged_attention/paged_decode_kernel.cu; launch shape: paged_decode.h.
__global__ void __launch_bounds__(kPagedDecodeThreads)
paged_decode_kernel(const float* __restrict__ q,               // (n_seqs, n_heads, head_dim)
                    const float* __restrict__ k_pool,          // (n_blocks, block_size, n_kv_heads, head_dim)
                    const float* __restrict__ v_pool,          // (n_blocks, block_size, n_kv_heads, head_dim)
                    float* __restrict__ out,                   // (n_seqs, n_heads, head_dim)
                    const int32_t* __restrict__ block_tables,  // (n_seqs, max_blocks_per_seq)
                    const int32_t* __restrict__ seq_lens,      // (n_seqs)
                    int max_blocks_per_seq, int block_size, int n_heads, int n_kv_heads,
                    int head_dim, float scale) {
  constexpr int kBc = kPagedDecodeKeys;
  static_assert(kBc == 32, "one key of a tile per lane of a warp");
  static_assert(kPagedDecodeMaxHeadDim % 32 == 0, "whole dimensions per lane");

  const int stride = head_dim + kPagedDecodeKeyPad;  // floats from one key of a tile to the next
  extern __shared__ float paged_decode_smem[];          // paged_decode_smem_bytes(head_dim)
  float* k_tile = paged_decode_smem;                    // (kBc, stride)
  float* v_tile = paged_decode_smem + kBc * stride;     // (kBc, stride)
  float* q_heads = paged_decode_smem + 2 * kBc * stride;  // (kPagedDecodeWarps, head_dim)

  const int seq = blockIdx.x;
  const int g = blockIdx.y;  // the KV head every head of this block reads
  const int group = n_heads / n_kv_heads;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int in_group = kPagedDecodeWarps * static_cast<int>(blockIdx.z) + warp;
  // A warp past the group's end (group 3: warp 3; group 6, second block: warps 2 and 3) copies
  // tiles with the others and reaches every barrier, but scores nothing and writes nothing.
  const bool serves = in_group < group;
  const int h = g * group + in_group;
  const int n_ctx = seq_lens[seq];  // the same for the whole block: every thread runs every tile
  const int32_t* table = block_tables + static_cast<int64_t>(seq) * max_blocks_per_seq;
  // Scores in base 2: e^x = 2^(x log2 e), so the exponentials are exp2f (the SFU's EX2).
  const float scale_log2 = scale * 1.4426950408889634f;

  auto attend = [&]<int kDim>() {
    constexpr int kPerLane = kDim / 32;  // dimensions of the accumulator one lane owns
    const int64_t q_row = (static_cast<int64_t>(seq) * n_heads + h) * kDim;
    float* my_q = q_heads + warp * kDim;
    if (serves) {
      for (int d = lane; d < kDim; d += 32) my_q[d] = q[q_row + d];
    }
    float acc[kPerLane];  // dims lane + 32 c of sum_j 2^(s_j - m) v_j
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) acc[c] = 0.0f;
    float m = -INFINITY;  // running max of the head's base-2 scores
    float l = 0.0f;       // running sum of 2^(s_j - m)

    for (int k0 = 0; k0 < n_ctx; k0 += kBc) {
      const int n_here = min(kBc, n_ctx - k0);  // positions of this tile: 1 .. 32
      __syncthreads();  // the previous tile is read by every warp (and my_q is written)
      // Stage: through the block table, position p sits at slot table[p / bs] * bs + p % bs.
      for (int j = warp; j < n_here; j += kPagedDecodeWarps) {
        const int pos = k0 + j;
        const int64_t slot =
            static_cast<int64_t>(table[pos / block_size]) * block_size + pos % block_size;
        const int64_t at = (slot * n_kv_heads + g) * kDim;
        for (int d = lane; d < kDim; d += 32) {
          k_tile[j * stride + d] = k_pool[at + d];
          v_tile[j * stride + d] = v_pool[at + d];
        }
      }
      __syncthreads();
      if (!serves) continue;

      // Lane `lane` scores position k0 + lane; a lane past the tile's end holds -inf.
      float s = -INFINITY;
      if (lane < n_here) {
        float dot = 0.0f;
#pragma unroll 8
        for (int d = 0; d < kDim; ++d) dot += my_q[d] * k_tile[lane * stride + d];
        s = dot * scale_log2;
      }
      // Lane 0's position is always in the tile, so m_new is finite; on the first tile
      // m = -inf and the rescale is 2^-inf = 0.
      const float m_new = fmaxf(m, warp_max(s));
      const float rescale = exp2f(m - m_new);
      const float p = exp2f(s - m_new);  // 0 past the tile's end
      l = l * rescale + warp_sum(p);
#pragma unroll
      for (int c = 0; c < kPerLane; ++c) acc[c] *= rescale;
      for (int j = 0; j < n_here; ++j) {
        const float p_j = __shfl_sync(kFullWarp, p, j);
#pragma unroll
        for (int c = 0; c < kPerLane; ++c) acc[c] += p_j * v_tile[j * stride + lane + 32 * c];
      }
      m = m_new;
    }

    if (!serves) return;
    // l >= 1: the largest score contributed 2^0.
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) out[q_row + lane + 32 * c] = acc[c] / l;
  };

  // One exact-width copy of the body per head_dim the launcher admits (multiples of 32).
  switch (head_dim) {
    case 32: attend.template operator()<32>(); break;
    case 64: attend.template operator()<64>(); break;
    case 96: attend.template operator()<96>(); break;
    case 128: attend.template operator()<128>(); break;
    default: break;  // launch_paged_decode admits no other head_dim
  }
}

}  // namespace lio::cuda
