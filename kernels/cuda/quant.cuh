// quant.cuh — reading F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q4_K/Q6_K/Q3_0/Q3_1 weights inside CUDA
// kernels, and the host check every launcher taking a DeviceMatrix runs.
//
// Block layouts (ggml-common.h; lio/dtype.h mirrors them): a quantized row is a run of
// 32-element blocks. Q8_0 = {f16 d; int8 qs[32]} (34 bytes), x = d*q. Q4_0 = {f16 d;
// uint8 qs[16]} (18 bytes), x = d*(q - 8). Q4_1 = {f16 d, m; uint8 qs[16]} (20 bytes),
// x = d*q + m. In both 4-bit formats qs[j]'s low nibble is element j and its high nibble
// element j + 16. Q5_0 = {f16 d; uint8 qh[4]; uint8 qs[16]} (22 bytes), x = d*(q - 16), and
// Q5_1 = {f16 d, m; qh[4]; qs[16]} (24 bytes), x = d*q + m: qs as in Q4_*, bit 5 of element
// j in bit j of qh. Block sizes are even, so the f16 fields are 2-byte aligned in cudaMalloc'd
// rows (256-byte aligned bases, even row_bytes); quants are read byte by byte. The K-quants
// (lio/dtype.h: BlockQ4_K, 144 bytes, and BlockQ6_K, 210 bytes, per 256 elements) are read
// per 32-element sub-block: Q4_K as a Q4_1 block with scale d * sc_j and minimum -dmin * m_j,
// Q6_K as a Q8_0-like block of codes q - 32 with scale d * scales[16-element run]. LIO's packed
// Q3_0 = {f16 d; qh[4]; qs[8]} (14 bytes), x = d*(q - 4), and Q3_1 = {f16 d, m; qh[4]; qs[8]}
// (16 bytes), x = d*q + m, are read through lio::q3_code.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "device_matrix.h"
#include "lio/dtype.h"
#include "lio/error.h"

namespace lio::cuda::detail {

/// f16 bits at p (2-byte aligned) as float, exact. (Host-callable too, like every helper here,
/// so tests/unit/test_cuda_quant_host.cu checks them on machines without a GPU.)
__host__ __device__ __forceinline__ float load_f16(const std::byte* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(p)));
}

/// bf16 bits at p (2-byte aligned) as float, exact: the bits are the top half of an f32.
__host__ __device__ __forceinline__ float load_bf16(const std::byte* p) {
  const uint32_t bits = static_cast<uint32_t>(*reinterpret_cast<const unsigned short*>(p)) << 16;
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

/// Q5_0 / Q5_1 block bytes (22 / 24) and where qh starts (after d / after d and m).
template <DType kType>
inline constexpr int kQ5BlockBytes = kType == DType::Q5_0 ? 22 : 24;
template <DType kType>
inline constexpr int kQ5QhOffset = kType == DType::Q5_0 ? 2 : 4;

/// Q3_0 / Q3_1 block bytes (14 / 16) and where qh starts (qs follows it); LIO's packed 3-bit
/// blocks, lio/dtype.h.
template <DType kType>
inline constexpr int kQ3BlockBytes = kType == DType::Q3_0 ? 14 : 16;
template <DType kType>
inline constexpr int kQ3QhOffset = kType == DType::Q3_0 ? 2 : 4;

/// The 5-bit code of element j (0..31) of a Q5_0 / Q5_1 block whose 4 qh bytes start at qh
/// (the 16 qs bytes follow them): low 4 bits from qs[j % 16] (low nibble for j < 16), bit 5
/// from bit j of qh read little-endian.
__host__ __device__ __forceinline__ int q5_code(const std::byte* qh, int j) {
  const auto* b = reinterpret_cast<const uint8_t*>(qh);
  const int nibble = j < 16 ? (b[4 + j] & 0x0F) : (b[4 + j - 16] >> 4);
  return nibble | (((b[j / 8] >> (j % 8)) & 1) << 4);
}

/// Element `col` of a row of kType, dequantized with lio::dequantize_row's formula in f32.
/// Exact: d*q is exact in f32 (11 + 8 significant bits), so Q4_1's + m rounds once, FMA or not.
template <DType kType>
__host__ __device__ __forceinline__ float load_element(const std::byte* row, int col) {
  if constexpr (kType == DType::F32) {
    return reinterpret_cast<const float*>(row)[col];
  } else if constexpr (kType == DType::F16) {
    return load_f16(row + 2 * static_cast<int64_t>(col));
  } else if constexpr (kType == DType::BF16) {
    return load_bf16(row + 2 * static_cast<int64_t>(col));
  } else if constexpr (kType == DType::Q8_0) {
    const std::byte* block = row + static_cast<int64_t>(col / 32) * 34;
    return load_f16(block) * static_cast<float>(reinterpret_cast<const int8_t*>(block + 2)[col % 32]);
  } else if constexpr (kType == DType::Q5_0 || kType == DType::Q5_1) {
    const std::byte* block = row + static_cast<int64_t>(col / 32) * kQ5BlockBytes<kType>;
    const int j = col % 32;
    const int q = q5_code(block + kQ5QhOffset<kType>, j);
    if constexpr (kType == DType::Q5_0) {
      return static_cast<float>(q - 16) * load_f16(block);
    } else {
      return static_cast<float>(q) * load_f16(block) + load_f16(block + 2);
    }
  } else if constexpr (kType == DType::Q3_0 || kType == DType::Q3_1) {
    const std::byte* block = row + static_cast<int64_t>(col / 32) * kQ3BlockBytes<kType>;
    const auto* b = reinterpret_cast<const uint8_t*>(block + kQ3QhOffset<kType>);
    const int q = q3_code(b, b + 4, col % 32);
    if constexpr (kType == DType::Q3_0) {
      return static_cast<float>(q - 4) * load_f16(block);
    } else {
      return static_cast<float>(q) * load_f16(block) + load_f16(block + 2);
    }
  } else if constexpr (kType == DType::Q4_K) {
    const std::byte* sb = row + static_cast<int64_t>(col / 256) * 144;
    const int i = col % 256, j = i / 32;
    const KQuantScaleMin sm = q4_k_scale_min(reinterpret_cast<const uint8_t*>(sb + 4), j);
    const uint8_t byte = reinterpret_cast<const uint8_t*>(sb + 16)[32 * (j / 2) + i % 32];
    const int q = j % 2 == 0 ? (byte & 0x0F) : (byte >> 4);
    return (load_f16(sb) * static_cast<float>(sm.scale)) * static_cast<float>(q) -
           load_f16(sb + 2) * static_cast<float>(sm.min);
  } else if constexpr (kType == DType::Q6_K) {
    const std::byte* sb = row + static_cast<int64_t>(col / 256) * 210;
    const int i = col % 256, h = i / 128, k = (i % 128) / 32, l = i % 32;
    const uint8_t lo_byte = reinterpret_cast<const uint8_t*>(sb)[64 * h + 32 * (k % 2) + l];
    const int lo = k < 2 ? (lo_byte & 0x0F) : (lo_byte >> 4);
    const int hi = (reinterpret_cast<const uint8_t*>(sb + 128)[32 * h + l] >> (2 * k)) & 3;
    const int8_t sc = reinterpret_cast<const int8_t*>(sb + 192)[8 * h + 2 * k + l / 16];
    return (load_f16(sb + 208) * static_cast<float>(sc)) * static_cast<float>((lo | (hi << 4)) - 32);
  } else {
    static_assert(kType == DType::Q4_0 || kType == DType::Q4_1, "unsupported dtype");
    constexpr int kBlockBytes = kType == DType::Q4_0 ? 18 : 20;
    constexpr int kQsOffset = kType == DType::Q4_0 ? 2 : 4;
    const std::byte* block = row + static_cast<int64_t>(col / 32) * kBlockBytes;
    const int j = col % 32;
    const uint8_t byte = reinterpret_cast<const uint8_t*>(block + kQsOffset)[j % 16];
    const int q = j < 16 ? (byte & 0x0F) : (byte >> 4);
    if constexpr (kType == DType::Q4_0) {
      return load_f16(block) * static_cast<float>(q - 8);
    } else {
      return load_f16(block) * static_cast<float>(q) + load_f16(block + 2);
    }
  }
}

/// Weights per dot8() call: a gemv lane's step. 32 % 8 == 0, so they never straddle a block.
inline constexpr int kDot8Elems = 8;
static_assert(32 % kDot8Elems == 0, "a dot8 group never straddles a 32-element block");

/// The 8 weights at columns e0 .. e0+7 of a row (e0 % 8 == 0, all in range), decoded once so
/// that several activation rows can use them (gemv_batched reads each weight block once for up
/// to 8 tokens). Quantized dtypes keep the integer codes and the block's scale (and minimum), so
/// dot() applies the scale once per 8 products; float dtypes keep the values (d unused).
template <DType kType>
struct Weights8 {
  float q[kDot8Elems];  ///< codes as floats (Q8_0: -128..127; Q4_*: 0..15; Q5_0: -16..15;
                        ///< Q5_1: 0..31; Q6_K: -32..31; Q3_0: -4..3; Q3_1: 0..7) or the values
  float d = 1.0f;       ///< block scale (quantized dtypes; K-quants: the sub-block's d * sc)
  float m = 0.0f;       ///< block minimum (Q4_1, Q5_1, Q3_1; Q4_K: -dmin * m_j)

  /// Dot product with the 8 matching activations x: sum_j w_j x_j, w_j as
  /// lio::dequantize_row defines it (Q4_0: d*(q-8); Q4_1, Q5_1, Q4_K, Q3_1: d*q + m; Q8_0,
  /// Q5_0 (codes q - 16), Q6_K (codes q - 32), Q3_0 (codes q - 4): d*q).
  __host__ __device__ __forceinline__ float dot(const float (&x)[kDot8Elems]) const {
    if constexpr (kType == DType::Q8_0 || kType == DType::Q5_0 || kType == DType::Q6_K || kType == DType::Q3_0) {
      float sum = 0.0f;
      for (int j = 0; j < kDot8Elems; ++j) sum += q[j] * x[j];
      return d * sum;
    } else if constexpr (kType == DType::Q4_0 || kType == DType::Q4_1 || kType == DType::Q5_1 ||
                         kType == DType::Q4_K || kType == DType::Q3_1) {
      float sum_qx = 0.0f;
      float sum_x = 0.0f;
      for (int j = 0; j < kDot8Elems; ++j) {
        sum_qx += q[j] * x[j];
        sum_x += x[j];
      }
      if constexpr (kType == DType::Q4_0) {
        return d * (sum_qx - 8.0f * sum_x);  // sum d*(q-8)*x
      } else {
        return d * sum_qx + m * sum_x;  // sum (d*q + m)*x
      }
    } else {
      float sum = 0.0f;
      for (int j = 0; j < kDot8Elems; ++j) sum += q[j] * x[j];
      return sum;
    }
  }
};

/// Decodes the 8 weights at columns e0 .. e0+7 of `row` (e0 % 8 == 0, all in range): one read
/// of their bytes (8 nibbles / 8 int8 / 8 halves / 8 floats plus the block header).
template <DType kType>
__host__ __device__ __forceinline__ Weights8<kType> load_weights8(const std::byte* row, int e0) {
  Weights8<kType> w;
  if constexpr (kType == DType::Q8_0) {
    const std::byte* block = row + static_cast<int64_t>(e0 / 32) * 34;
    const int8_t* qs = reinterpret_cast<const int8_t*>(block + 2) + e0 % 32;
    for (int j = 0; j < kDot8Elems; ++j) w.q[j] = static_cast<float>(qs[j]);
    w.d = load_f16(block);
  } else if constexpr (kType == DType::Q4_0 || kType == DType::Q4_1) {
    constexpr int kBlockBytes = kType == DType::Q4_0 ? 18 : 20;
    constexpr int kQsOffset = kType == DType::Q4_0 ? 2 : 4;
    const std::byte* block = row + static_cast<int64_t>(e0 / 32) * kBlockBytes;
    const int j0 = e0 % 32;  // 0, 8: low nibbles of qs[j0..]; 16, 24: high nibbles of qs[j0-16..]
    const uint8_t* qs = reinterpret_cast<const uint8_t*>(block + kQsOffset) + j0 % 16;
    const int shift = j0 < 16 ? 0 : 4;
    for (int j = 0; j < kDot8Elems; ++j) w.q[j] = static_cast<float>((qs[j] >> shift) & 0x0F);
    w.d = load_f16(block);
    if constexpr (kType == DType::Q4_1) w.m = load_f16(block + 2);
  } else if constexpr (kType == DType::Q5_0 || kType == DType::Q5_1) {
    const std::byte* block = row + static_cast<int64_t>(e0 / 32) * kQ5BlockBytes<kType>;
    for (int j = 0; j < kDot8Elems; ++j) {
      const int q = q5_code(block + kQ5QhOffset<kType>, e0 % 32 + j);
      w.q[j] = static_cast<float>(kType == DType::Q5_0 ? q - 16 : q);
    }
    w.d = load_f16(block);
    if constexpr (kType == DType::Q5_1) w.m = load_f16(block + 2);
  } else if constexpr (kType == DType::Q3_0 || kType == DType::Q3_1) {
    const std::byte* block = row + static_cast<int64_t>(e0 / 32) * kQ3BlockBytes<kType>;
    const auto* b = reinterpret_cast<const uint8_t*>(block + kQ3QhOffset<kType>);
    for (int j = 0; j < kDot8Elems; ++j) {
      const int q = q3_code(b, b + 4, e0 % 32 + j);
      w.q[j] = static_cast<float>(kType == DType::Q3_0 ? q - 4 : q);
    }
    w.d = load_f16(block);
    if constexpr (kType == DType::Q3_1) w.m = load_f16(block + 2);
  } else if constexpr (kType == DType::Q4_K) {
    // 8 columns of one 32-element sub-block j: its codes, scale d * sc_j and minimum.
    const std::byte* sb = row + static_cast<int64_t>(e0 / 256) * 144;
    const int i = e0 % 256, j = i / 32;
    const KQuantScaleMin sm = q4_k_scale_min(reinterpret_cast<const uint8_t*>(sb + 4), j);
    const uint8_t* qs = reinterpret_cast<const uint8_t*>(sb + 16) + 32 * (j / 2) + i % 32;
    const int shift = j % 2 == 0 ? 0 : 4;
    for (int t = 0; t < kDot8Elems; ++t) w.q[t] = static_cast<float>((qs[t] >> shift) & 0x0F);
    w.d = load_f16(sb) * static_cast<float>(sm.scale);
    w.m = -(load_f16(sb + 2) * static_cast<float>(sm.min));
  } else if constexpr (kType == DType::Q6_K) {
    // 8 columns of one 16-element sub-block (16 % 8 == 0): one int8 scale for all of them.
    const std::byte* sb = row + static_cast<int64_t>(e0 / 256) * 210;
    const int i = e0 % 256, h = i / 128, k = (i % 128) / 32, l0 = i % 32;
    const uint8_t* ql = reinterpret_cast<const uint8_t*>(sb) + 64 * h + 32 * (k % 2) + l0;
    const uint8_t* qh = reinterpret_cast<const uint8_t*>(sb + 128) + 32 * h + l0;
    const int lo_shift = k < 2 ? 0 : 4;
    for (int t = 0; t < kDot8Elems; ++t) {
      const int q = ((ql[t] >> lo_shift) & 0x0F) | (((qh[t] >> (2 * k)) & 3) << 4);
      w.q[t] = static_cast<float>(q - 32);
    }
    w.d = load_f16(sb + 208) * static_cast<float>(reinterpret_cast<const int8_t*>(sb + 192)[8 * h + 2 * k + l0 / 16]);
  } else {
    for (int j = 0; j < kDot8Elems; ++j) w.q[j] = load_element<kType>(row, e0 + j);
  }
  return w;
}

/// Dot product of the 8 weights at columns e0 .. e0+7 of `row` (e0 % 8 == 0, all in range) with
/// x = the 8 matching activations. Quantized blocks: scale (and minimum) applied once per 8.
/// The inner step of gemv (one lane, one step); host-callable so tests can run it on the CPU.
/// (No #pragma unroll: the host compiler would warn; nvcc unrolls constant 8-trip loops anyway.)
template <DType kType>
__host__ __device__ __forceinline__ float dot8(const std::byte* row, int e0,
                                               const float (&x)[kDot8Elems]) {
  return load_weights8<kType>(row, e0).dot(x);
}

/// Issue 45's wide Q4_1 reader. Word `word` (0..3) of a Q4_1 block {f16 d, f16 m, uint8 qs[16]}
/// is qs bytes 4*word .. 4*word + 3: their low nibbles are elements 4*word .. +3 of the block,
/// their high nibbles elements 16 + 4*word .. +3. One 32-bit load reads the word, another d and m;
/// the 8 weights (d*q + m) are dotted with their activations x_lo (elements 4*word ..) and x_hi
/// (elements 16 + 4*word ..). Four lanes reading words 0..3 read each byte of the block once,
/// where dot8's lanes (8 consecutive columns each) read every qs byte twice, one byte at a time.
/// `block` must be 4-byte aligned (Q4_1's 20-byte blocks are, in a row that starts 4-aligned).
/// Host-callable: tests/unit/test_cuda_quant_host.cu checks the nibble order on the CPU.
__host__ __device__ __forceinline__ float q4_1_word_dot(const std::byte* block, int word, const float (&x_lo)[4],
                                                        const float (&x_hi)[4]) {
  uint32_t dm = 0, qs = 0;
#ifdef __CUDA_ARCH__
  dm = *reinterpret_cast<const uint32_t*>(block);
  qs = *reinterpret_cast<const uint32_t*>(block + 4 + 4 * word);
#else
  std::memcpy(&dm, block, sizeof dm);
  std::memcpy(&qs, block + 4 + 4 * word, sizeof qs);
#endif
  const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(dm & 0xFFFFu)));
  const float m = __half2float(__ushort_as_half(static_cast<unsigned short>(dm >> 16)));
  float sum_qx = 0.0f;
  float sum_x = 0.0f;
  for (int j = 0; j < 4; ++j) {
    sum_qx += static_cast<float>((qs >> (8 * j)) & 0x0Fu) * x_lo[j] +
              static_cast<float>((qs >> (8 * j + 4)) & 0x0Fu) * x_hi[j];
    sum_x += x_lo[j] + x_hi[j];
  }
  return d * sum_qx + m * sum_x;  // sum (d*q + m) x
}

/// Float offset into x of lane `lane`'s float4 load number `load` (0, then 1) for block `b`:
/// x_lo (32b + 4w) and x_hi (32b + 16 + 4w), w = lane % 4, x_hi first for odd lane / 4 (see
/// q4_1_load_x_wide). Host-callable: tests/unit/test_cuda_quant_host.cu checks that every
/// 8-lane phase of either load reads 32 distinct shared-memory banks.
__host__ __device__ __forceinline__ int q4_1_wide_x_offset(int b, int lane, int load) {
  const int hi_first = (lane >> 2) & 1;
  return 32 * b + 4 * (lane & 3) + 16 * (hi_first ^ load);
}

#ifdef __CUDACC__
/// Lane `lane`'s x for its word (lane % 4) of block `b` (q4_1_word_dot's x_lo, x_hi: x[32b + 4w ..] and
/// x[32b + 16 + 4w ..]; x 16-byte aligned, staged in shared memory), read as two float4 loads in
/// an order free of bank conflicts: a float4 load is served 8 lanes at a time, and lanes 0-3 and
/// 4-7 of such a phase hold blocks b and b + 1, whose x_lo halves fall in the same 16 banks (a
/// 2-way conflict, issue 60 defect 8). Lanes of odd (lane / 4) load x_hi first, so each phase
/// reads 32 distinct banks.
__device__ __forceinline__ void q4_1_load_x_wide(const float* x, int b, int lane, float (&x_lo)[4], float (&x_hi)[4]) {
  const bool hi_first = ((lane >> 2) & 1) != 0;
  const float4 first = *reinterpret_cast<const float4*>(x + q4_1_wide_x_offset(b, lane, 0));
  const float4 second = *reinterpret_cast<const float4*>(x + q4_1_wide_x_offset(b, lane, 1));
  const float4 lo = hi_first ? second : first;
  const float4 hi = hi_first ? first : second;
  x_lo[0] = lo.x, x_lo[1] = lo.y, x_lo[2] = lo.z, x_lo[3] = lo.w;
  x_hi[0] = hi.x, x_hi[1] = hi.y, x_hi[2] = hi.z, x_hi[3] = hi.w;
}

/// Lane `lane`'s part of a Q4_1 row's dot product with x (cols floats, a multiple of 32; x
/// 16-byte aligned, e.g. staged in shared memory): word lane % 4 of blocks lane / 4, + 8, + 16,
/// ... (q4_1_word_dot), so a warp step covers 8 blocks, 256 columns, as dot8's mapping does, and
/// reads each weight byte once; x through q4_1_load_x_wide (no bank conflicts). The row must be
/// 4-byte aligned. The caller sums over the warp.
__device__ __forceinline__ float q4_1_row_partial_wide(const std::byte* row, int cols, const float* x, int lane) {
  const int word = lane & 3;
  float acc = 0.0f;
  for (int b = lane >> 2; b * 32 < cols; b += 8) {
    float x_lo[4], x_hi[4];
    q4_1_load_x_wide(x, b, lane, x_lo, x_hi);
    acc += q4_1_word_dot(row + static_cast<int64_t>(b) * 20, word, x_lo, x_hi);
  }
  return acc;
}

/// q4_1_row_partial_wide for two rows of the same width at once (SwiGLU's gate and up rows): each
/// x word is read from shared memory once for both, halving the shared-memory traffic per weight
/// byte (8 floats of x per 4 bytes of codes for one row: about 6.4 bytes of x per byte of weight
/// read, near the shared-memory bandwidth on H100 / H200 at full HBM speed). Partial sums in
/// *acc_a and *acc_b (overwritten); the caller sums each over the warp.
__device__ __forceinline__ void q4_1_two_rows_partial_wide(const std::byte* row_a, const std::byte* row_b, int cols,
                                                           const float* x, int lane, float* acc_a, float* acc_b) {
  const int word = lane & 3;
  float a = 0.0f, c = 0.0f;
  for (int b = lane >> 2; b * 32 < cols; b += 8) {
    float x_lo[4], x_hi[4];
    q4_1_load_x_wide(x, b, lane, x_lo, x_hi);
    a += q4_1_word_dot(row_a + static_cast<int64_t>(b) * 20, word, x_lo, x_hi);
    c += q4_1_word_dot(row_b + static_cast<int64_t>(b) * 20, word, x_lo, x_hi);
  }
  *acc_a = a;
  *acc_b = c;
}
#endif

/// The 8 weights of a Weights8 as signed int8 codes c_j, four to an int32 (byte j % 4 of
/// word j / 4, little-endian: __dp4a's operand layout), with w_j = d * c_j + m. Q4_0's and Q5_0's
/// offsets (-8, -16) and Q6_K's (-32) are in the codes; Q4_1's, Q5_1's and Q4_K's minimum is m.
/// Every code fits int8 (Q8_0: -128..127; Q4_0: -8..7; Q4_1 / Q4_K: 0..15; Q5_0: -16..15;
/// Q5_1: 0..31; Q6_K: -32..31; Q3_0: -4..3; Q3_1: 0..7), so the integer dot product of chapter 03's W8A8 / W4A8 runs
/// on them and int8 activations with dp4a (four int8 products summed into an int32).
struct Codes8 {
  int32_t lo = 0;   ///< codes 0..3
  int32_t hi = 0;   ///< codes 4..7
  float d = 1.0f;   ///< scale
  float m = 0.0f;   ///< minimum (0 for the symmetric types)

  /// sum_j w_j * (dx * qx_j) for 8 int8 activation codes packed as Codes8 packs its own (x_lo:
  /// codes 0..3, x_hi: 4..7) with their block's scale dx: dx * (d * sum c_j qx_j + m * sum
  /// qx_j), the two sums exact in int32 (ggml's vec_dot_q4_1_q8_1 formula, Q8_1's s = dx *
  /// sum qx).
  __host__ __device__ __forceinline__ float dot_int8(int32_t x_lo, int32_t x_hi, float dx) const {
#ifdef __CUDA_ARCH__
    const int isum = __dp4a(hi, x_hi, __dp4a(lo, x_lo, 0));
    const int xsum = __dp4a(0x01010101, x_hi, __dp4a(0x01010101, x_lo, 0));
#else
    int isum = 0, xsum = 0;
    for (int j = 0; j < 4; ++j) {
      const int a_lo = static_cast<int8_t>(static_cast<uint32_t>(lo) >> (8 * j));
      const int a_hi = static_cast<int8_t>(static_cast<uint32_t>(hi) >> (8 * j));
      const int b_lo = static_cast<int8_t>(static_cast<uint32_t>(x_lo) >> (8 * j));
      const int b_hi = static_cast<int8_t>(static_cast<uint32_t>(x_hi) >> (8 * j));
      isum += a_lo * b_lo + a_hi * b_hi;
      xsum += b_lo + b_hi;
    }
#endif
    return dx * (d * static_cast<float>(isum) + m * static_cast<float>(xsum));
  }
};

/// Packs 4 int8 values into an int32 (value j in byte j), dp4a's layout.
__host__ __device__ __forceinline__ int32_t pack_int8x4(int a, int b, int c, int e) {
  return static_cast<int32_t>((static_cast<uint32_t>(a) & 0xFFu) | ((static_cast<uint32_t>(b) & 0xFFu) << 8) |
                              ((static_cast<uint32_t>(c) & 0xFFu) << 16) | ((static_cast<uint32_t>(e) & 0xFFu) << 24));
}

/// The Codes8 of a quantized dtype's Weights8 (codes as floats, exact integers): Q4_0's -8 moves
/// into the codes; every other type's codes are already what w = d * c + m needs.
template <DType kType>
__host__ __device__ __forceinline__ Codes8 codes8(const Weights8<kType>& w) {
  static_assert(kType != DType::F32 && kType != DType::F16 && kType != DType::BF16, "quantized dtypes only");
  constexpr int kOffset = kType == DType::Q4_0 ? -8 : 0;
  int c[kDot8Elems];
  for (int j = 0; j < kDot8Elems; ++j) c[j] = static_cast<int>(w.q[j]) + kOffset;
  Codes8 out;
  out.lo = pack_int8x4(c[0], c[1], c[2], c[3]);
  out.hi = pack_int8x4(c[4], c[5], c[6], c[7]);
  out.d = w.d;
  out.m = w.m;
  return out;
}

/// Calls f.template operator()<kType>() for the runtime dtype: the one switch from a
/// DeviceMatrix's dtype to a kernel instantiation.
template <typename F>
void dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F32: f.template operator()<DType::F32>(); return;
    case DType::F16: f.template operator()<DType::F16>(); return;
    case DType::BF16: f.template operator()<DType::BF16>(); return;
    case DType::Q8_0: f.template operator()<DType::Q8_0>(); return;
    case DType::Q4_0: f.template operator()<DType::Q4_0>(); return;
    case DType::Q4_1: f.template operator()<DType::Q4_1>(); return;
    case DType::Q5_0: f.template operator()<DType::Q5_0>(); return;
    case DType::Q5_1: f.template operator()<DType::Q5_1>(); return;
    case DType::Q4_K: f.template operator()<DType::Q4_K>(); return;
    case DType::Q6_K: f.template operator()<DType::Q6_K>(); return;
    case DType::Q3_0: f.template operator()<DType::Q3_0>(); return;
    case DType::Q3_1: f.template operator()<DType::Q3_1>(); return;
  }
  throw InvalidArgument("cuda: unsupported weight dtype id " +
                        std::to_string(static_cast<uint32_t>(dtype)));
}

/// Throws InvalidArgument unless `w` is a usable matrix: non-null data, 0 < rows, cols <=
/// INT32_MAX, cols a whole number of blocks, row_bytes == dtype_row_bytes(dtype, cols).
inline void check_matrix(const char* op, const DeviceMatrix& w) {
  const std::string where = std::string("cuda::") + op + ": ";
  if (w.data == nullptr) throw InvalidArgument(where + "null weight data");
  if (w.rows <= 0 || w.rows > INT_MAX || w.cols <= 0 || w.cols > INT_MAX) {
    throw InvalidArgument(where + "need 0 < rows, cols <= INT32_MAX, got rows=" +
                          std::to_string(w.rows) + " cols=" + std::to_string(w.cols));
  }
  const int64_t want = dtype_row_bytes(w.dtype, w.cols);  // throws on a partial block
  if (w.row_bytes != want) {
    throw InvalidArgument(where + "row_bytes " + std::to_string(w.row_bytes) + " != " +
                          std::to_string(want) + " for " + std::string(dtype_info(w.dtype).name) +
                          " x " + std::to_string(w.cols));
  }
}

/// The 8 activations x[e0 .. e0+7] a lane multiplies with its 8 weights (dot8): two 16-byte
/// loads when x is staged in shared memory (kStaged; x + e0 is 16-byte aligned there, and lanes
/// 32 bytes apart meet 2-way bank conflicts instead of the 8-way of scalar loads at an 8-float
/// stride), else 8 scalar loads through L1/L2.
template <bool kStaged>
__device__ __forceinline__ void load_x8(const float* x, int e0, float (&x8)[kDot8Elems]) {
  if constexpr (kStaged) {
    const float4 lo = *reinterpret_cast<const float4*>(x + e0);
    const float4 hi = *reinterpret_cast<const float4*>(x + e0 + 4);
    x8[0] = lo.x; x8[1] = lo.y; x8[2] = lo.z; x8[3] = lo.w;
    x8[4] = hi.x; x8[5] = hi.y; x8[6] = hi.z; x8[7] = hi.w;
  } else {
#pragma unroll
    for (int j = 0; j < kDot8Elems; ++j) x8[j] = x[e0 + j];
  }
}

}  // namespace lio::cuda::detail
