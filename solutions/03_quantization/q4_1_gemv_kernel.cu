// Chapter 03, Task 7 — REFERENCE SOLUTION: y = W x (+ y) over ggml's Q4_1 blocks, the decode
// step's matrix-vector product, each weight dequantized in registers and never written back. Its
// launcher is given (kernels/cuda/q4_1_gemv.cu); its test oracle is lio::dequantize_row and a
// product in double.
//
// Work split (one block = kQ4_1GemvWarps = 8 output rows, 256 threads; warp w = row 8 x + w):
//   staging   every thread copies floats t, t + 256, ... of x (all n_batch rows) into shared
//             memory, once for the block's 8 rows; one barrier.
//   weights   lane l of a warp reads 32-bit word l % 4 of the 16 code bytes of blocks l / 4,
//             l / 4 + 8, ...: a warp step covers 8 blocks (256 weights, 160 bytes of the row, one
//             coalesced read), the 4 lanes of a block together read each code byte once, and
//             each of them reads the block's d and m as one 32-bit word (the same word for the 4:
//             one transaction). Byte j of the word holds the codes of elements 4 (l % 4) + j (low
//             nibble) and 16 + 4 (l % 4) + j (high nibble).
//   x         the lane's 8 floats of each x row, as two float4 loads from shared memory. A float4
//             load is served 8 lanes at a time; lanes 0-3 and 4-7 of such a phase hold blocks b
//             and b + 1, whose low halves sit in the same 16 banks, so lanes of odd blocks load
//             the high half first: each phase then touches all 32 banks once.
//   math      sum over the lane's 8 elements of (d q + m) x = d (sum q x) + m (sum x): one
//             multiply per weight and two per 8, not two per weight.
//   reduce    each row's 32 lane partials by a warp's xor shuffles; lane 0 writes (or adds).
// Why a warp per row and 8 rows a block: a row of SmolLM2 (576 columns) is 18 blocks, 360 bytes;
// 32 lanes read it in 3 steps. x (2,304 bytes a row) is staged once per 8 rows, so the block
// reads 2,880 bytes of weights from HBM for 2,304 of x from L2. See the lesson for the numbers.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "q4_1_gemv.h"

namespace lio::cuda {

namespace {

constexpr unsigned kFullWarp = 0xffffffffu;
/// Q4_1 blocks one warp step covers: 4 lanes a block (one 32-bit word of codes each).
constexpr int kBlocksPerStep = 32 / 4;

/// The warp's sum of x, in every lane (xor butterfly).
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(kFullWarp, x, offset);
  return x;
}

/// IEEE f16 bits (the low 16 bits of `bits`) as float, exact.
__device__ __forceinline__ float f16_bits(uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xFFFFu)));
}

}  // namespace

/// Task 7 (chapter 03), the reference: one output row per warp, 8 a block, x staged once a block.
/// Contract: the doc comment of the stub, exercises/03_quantization/q4_1_gemv_kernel.cu; launch
/// shape: q4_1_gemv.h.
__global__ void __launch_bounds__(kQ4_1GemvThreads)
q4_1_gemv_kernel(const BlockQ4_1* __restrict__ w,  // (n_rows, n_cols / 32) Q4_1 blocks
                 const float* __restrict__ x,      // (n_batch, n_cols)
                 float* __restrict__ y,            // (n_batch, n_rows)
                 int n_rows, int n_cols, int n_batch, bool accumulate) {
  extern __shared__ float4 q4_1_gemv_smem[];  // float4: a 16-byte aligned base for the x loads
  float* xs = reinterpret_cast<float*>(q4_1_gemv_smem);  // (n_batch, n_cols)

  // Stage every row of x for the block's 8 rows: consecutive threads, consecutive floats.
  const int n_x = n_batch * n_cols;
  for (int i = static_cast<int>(threadIdx.x); i < n_x; i += kQ4_1GemvThreads) xs[i] = x[i];
  __syncthreads();

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int row = static_cast<int>(blockIdx.x) * kQ4_1GemvWarps + warp;
  // Warps past the last row (n_rows not a multiple of 8) leave whole, after the only barrier:
  // the shuffles below always run on full warps.
  if (row >= n_rows) return;
  const int n_blocks = n_cols / 32;
  const BlockQ4_1* w_row = w + static_cast<int64_t>(row) * n_blocks;
  const int word = lane % 4;  // which 4 of the block's 16 code bytes this lane reads

  auto dot_rows = [&]<int kBatch>() {
    float acc[kBatch];
#pragma unroll
    for (int r = 0; r < kBatch; ++r) acc[r] = 0.0f;
    for (int b = lane / 4; b < n_blocks; b += kBlocksPerStep) {
      const BlockQ4_1* blk = w_row + b;
      // d in the low 16 bits, m in the high (little-endian); both 4-byte aligned (20-byte blocks
      // from a 4-byte aligned base).
      const uint32_t dm = *reinterpret_cast<const uint32_t*>(blk);
      const uint32_t codes = *reinterpret_cast<const uint32_t*>(blk->qs + 4 * word);
      const float d = f16_bits(dm);
      const float m = f16_bits(dm >> 16);
      float q_lo[4], q_hi[4];  // codes of elements 4 word + j and 16 + 4 word + j
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        q_lo[j] = static_cast<float>((codes >> (8 * j)) & 0x0Fu);
        q_hi[j] = static_cast<float>((codes >> (8 * j + 4)) & 0x0Fu);
      }
      // Lanes of odd blocks load x's high half first (bank-conflict free phases, see the top).
      const int first = (b & 1) != 0 ? 16 : 0;
#pragma unroll
      for (int r = 0; r < kBatch; ++r) {
        const float* xb = xs + r * n_cols + 32 * b + 4 * word;
        const float4 f0 = *reinterpret_cast<const float4*>(xb + first);
        const float4 f1 = *reinterpret_cast<const float4*>(xb + (16 - first));
        const float4 lo = first == 0 ? f0 : f1;
        const float4 hi = first == 0 ? f1 : f0;
        const float qx = q_lo[0] * lo.x + q_lo[1] * lo.y + q_lo[2] * lo.z + q_lo[3] * lo.w +
                         q_hi[0] * hi.x + q_hi[1] * hi.y + q_hi[2] * hi.z + q_hi[3] * hi.w;
        const float sx = (lo.x + lo.y) + (lo.z + lo.w) + (hi.x + hi.y) + (hi.z + hi.w);
        acc[r] += d * qx + m * sx;
      }
    }
#pragma unroll
    for (int r = 0; r < kBatch; ++r) {
      const float sum = warp_sum(acc[r]);
      if (lane == 0) {
        float* out = y + static_cast<int64_t>(r) * n_rows + row;
        *out = accumulate ? *out + sum : sum;
      }
    }
  };

  // One exact-width copy of the body per batch the launcher admits: acc stays in registers.
  switch (n_batch) {
    case 1: dot_rows.template operator()<1>(); break;
    case 2: dot_rows.template operator()<2>(); break;
    case 3: dot_rows.template operator()<3>(); break;
    case 4: dot_rows.template operator()<4>(); break;
    case 5: dot_rows.template operator()<5>(); break;
    case 6: dot_rows.template operator()<6>(); break;
    case 7: dot_rows.template operator()<7>(); break;
    case 8: dot_rows.template operator()<8>(); break;
    default: break;  // launch_q4_1_gemv admits no other batch
  }
}

}  // namespace lio::cuda
