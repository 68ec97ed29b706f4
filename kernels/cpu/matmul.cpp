// matmul.cpp — y = x W^T for every weight dtype LIO reads, on the CPU, batch-invariant.
// (Q5_0/Q5_1 and LIO's Q3_0/Q3_1 blocks are 32 wide too; K-quants: a 32-element block is one
// Q4_K sub-block, or two 16-element Q6_K runs.)
//
// One kernel serves every row count, from a single decode row to a 512-row prefill chunk:
//   for each tile of kTileRows weight rows (split across OpenMP threads):
//     for each group of up to kGroupRows rows of x:
//       for each weight row j of the tile, for each 32-element block b of it:
//         decode the block ONCE into 4 x 8 f32 weights w = d * q + m (exactly dequantize_row's
//         values: d * q is exact in f32 and the sum rounds once), then for every row r of the
//         group:  part = w[0] * x_r[b, 0]; part = fma(w[k], x_r[b, k], part) for k = 1 .. 3
//                 acc_r = acc_r + part                                (8 lanes each)
//       y[r, j] = hsum(acc_r) (+ a scalar tail when cols % 32 != 0)
// So quantized weights are never expanded to an f32 matrix (a block lives in 4 registers),
// each weight block is read from memory and decoded once per group of rows (decode rows of
// many sequences share the read and the decode), and a row costs 4 multiply-adds and one add per 32 weights.
// The arithmetic per output element — which products, in which order, into which
// accumulator — depends only on that element's weight row and x row: never on how many rows
// are in the batch, which group or thread a row lands in, or where a sequence's chunk starts.
// That is the reduction order that makes a sequence's logits bitwise identical alone, in a
// batch of 64, or prefilled in chunks of 1, 7 or 64 (He et al. 2025, "Defeating
// Nondeterminism in LLM Inference", Thinking Machines: batch-invariant kernels). The price: no
// vendor GEMM for large prefill chunks (bench/results/batched.md has the measured cost).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu_ops.h"
#include "lio/error.h"

namespace lio::cpu {
namespace {

constexpr int64_t kGroupRows = 8;  // x rows sharing one decoded weight block (8 accumulators)
constexpr int64_t kTileRows = 16;  // weight rows per OpenMP work item (a tile stays in L1)
constexpr int64_t kB = kQuantBlockElems;  // 32

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  return _mm_cvtss_f32(lo);
}

/// One decoded 32-element weight block: w[k] holds elements 8k .. 8k+7, as f32.
struct DecodedBlock {
  __m256 w[4];
};

/// A 32-element block's 4-bit codes as 32 bytes, byte l = element l: qs[l] low nibbles are
/// elements 0..15, high nibbles 16..31 (Q4_0, Q4_1, and the low bits of Q5_0 / Q5_1).
inline __m256i nibble_codes(const uint8_t* qs) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask), _mm_and_si128(bytes, mask));
}

/// The 32 fifth bits of a Q5_0 / Q5_1 block as bytes: byte l is 0x10 when bit l of qh is set.
inline __m256i q5_high_bits(const uint8_t* qh_bytes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  // Byte l takes qh's byte l / 8 (the broadcast holds all 4 bytes in each 128-bit lane), then
  // tests bit l % 8 of it.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(qh)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

/// A Q5_0 / Q5_1 block's codes in [0, 31] as 32 bytes, byte l = element l.
inline __m256i q5_codes(const uint8_t* qs, const uint8_t* qh) {
  return _mm256_or_si256(nibble_codes(qs), q5_high_bits(qh));
}

/// A Q3_0 / Q3_1 block's codes in [0, 7] as 32 bytes, byte l = element l: qs read as one
/// uint64 broadcast to the four 64-bit lanes, lane k shifted right by 2k, holds element 8k + i's
/// low 2 bits in byte i; the third bit comes from qh as Q5's fifth does.
inline __m256i q3_codes(const uint8_t* qs, const uint8_t* qh) {
  uint64_t lo;
  std::memcpy(&lo, qs, 8);
  const __m256i low = _mm256_and_si256(
      _mm256_srlv_epi64(_mm256_set1_epi64x(static_cast<long long>(lo)), _mm256_setr_epi64x(0, 2, 4, 6)),
      _mm256_set1_epi8(3));
  // q5_high_bits gives 0x10 per set bit: shift the 16-bit lanes right by 2 to make it 0x04
  // (bytes hold 0 or 0x10, so nothing crosses a byte).
  return _mm256_or_si256(low, _mm256_srli_epi16(q5_high_bits(qh), 2));
}

/// Sub-block j (0..7) of a Q4_K super-block: its codes in [0, 15] as 32 bytes, byte l =
/// element l. Each 32-byte group of qs holds sub-blocks 2g (low nibbles) and 2g + 1 (high).
inline __m256i q4_k_codes(const BlockQ4_K& s, int j) {
  __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.qs + 32 * (j / 2)));
  if (j % 2 == 1) q = _mm256_srli_epi16(q, 4);
  return _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
}

/// Run k (0..3) of half h (0..1) of a Q6_K super-block: its codes q - 32 in [-32, 31] as 32
/// signed bytes. Element l takes its low 4 bits from ql[64h + 32(k % 2) + l] (low nibble for
/// k < 2, high for k >= 2) and its high 2 bits from bits 2k..2k+1 of qh[32h + l].
inline __m256i q6_k_codes(const BlockQ6_K& s, int h, int k) {
  __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.ql + 64 * h + 32 * (k % 2)));
  if (k >= 2) lo = _mm256_srli_epi16(lo, 4);
  lo = _mm256_and_si256(lo, _mm256_set1_epi8(0x0F));
  __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.qh + 32 * h));
  hb = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * k)), _mm256_set1_epi8(3));
  // hb <= 3 per byte, so shifting the 16-bit lanes by 4 never carries into the next byte.
  return _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hb, 4)), _mm256_set1_epi8(32));
}

/// 32 code bytes widened to f32, w[k] = elements 8k .. 8k+7 (kSigned: int8, else uint8).
template <bool kSigned>
inline void widen_codes(__m256i q, __m256* w) {
  const __m128i half[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
  for (int k = 0; k < 4; ++k) {
    const __m128i b8 = k % 2 == 0 ? half[k / 2] : _mm_srli_si128(half[k / 2], 8);
    w[k] = _mm256_cvtepi32_ps(kSigned ? _mm256_cvtepi8_epi32(b8) : _mm256_cvtepu8_epi32(b8));
  }
}

/// Decodes block b of a row of dtype D into the f32 values dequantize_row gives for them.
template <DType D>
inline DecodedBlock decode_block(const std::byte* row, int64_t b) {
  DecodedBlock blk;
  if constexpr (D == DType::Q4_1) {  // w = d * q + m
    const BlockQ4_1& q = reinterpret_cast<const BlockQ4_1*>(row)[b];
    widen_codes<false>(nibble_codes(q.qs), blk.w);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(q.d)), m = _mm256_set1_ps(_cvtsh_ss(q.m));
    for (int k = 0; k < 4; ++k) blk.w[k] = _mm256_fmadd_ps(d, blk.w[k], m);
  } else if constexpr (D == DType::Q4_0) {  // w = d * (q - 8)
    const BlockQ4_0& q = reinterpret_cast<const BlockQ4_0*>(row)[b];
    widen_codes<false>(nibble_codes(q.qs), blk.w);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(q.d)), eight = _mm256_set1_ps(8.0f);
    for (int k = 0; k < 4; ++k) blk.w[k] = _mm256_mul_ps(d, _mm256_sub_ps(blk.w[k], eight));
  } else if constexpr (D == DType::Q8_0) {  // w = d * q
    const BlockQ8_0& q = reinterpret_cast<const BlockQ8_0*>(row)[b];
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(q.d));
    for (int k = 0; k < 4; ++k)
      blk.w[k] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q.qs + 8 * k)))));
  } else if constexpr (D == DType::Q5_0 || D == DType::Q5_1 || D == DType::Q3_0 || D == DType::Q3_1) {
    // Q5: 4 low bits as Q4_*, bit 5 in qh; LIO's packed Q3: 2 low bits, bit 3 in qh. The _0
    // types centre their codes (q - 16, q - 4), the _1 types add a minimum.
    constexpr bool kQ5 = D == DType::Q5_0 || D == DType::Q5_1, kCentred = D == DType::Q5_0 || D == DType::Q3_0;
    using Block = std::conditional_t<
        D == DType::Q5_0, BlockQ5_0,
        std::conditional_t<D == DType::Q5_1, BlockQ5_1, std::conditional_t<D == DType::Q3_0, BlockQ3_0, BlockQ3_1>>>;
    const Block& q = reinterpret_cast<const Block*>(row)[b];
    if constexpr (kQ5) {
      widen_codes<false>(q5_codes(q.qs, q.qh), blk.w);  // q in [0, 31]
    } else {
      widen_codes<false>(q3_codes(q.qs, q.qh), blk.w);  // q in [0, 7]
    }
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(q.d));
    for (int k = 0; k < 4; ++k) {
      if constexpr (kCentred) {
        blk.w[k] = _mm256_mul_ps(_mm256_sub_ps(blk.w[k], _mm256_set1_ps(kQ5 ? 16.0f : 4.0f)), d);  // (q - c) * d
      } else {
        blk.w[k] = _mm256_fmadd_ps(blk.w[k], d, _mm256_set1_ps(_cvtsh_ss(q.m)));  // q * d + m
      }
    }
  } else if constexpr (D == DType::Q4_K) {  // sub-block j = b % 8 of super-block b / 8
    const BlockQ4_K& s = reinterpret_cast<const BlockQ4_K*>(row)[b / 8];
    const int j = static_cast<int>(b % 8);
    const KQuantScaleMin sm = q4_k_scale_min(s.scales, j);
    // w = (d * sc_j) * q - dmin * m_j: the product is exact in f32, so the FMA rounds as
    // dequantize_row's multiply-then-subtract does.
    const __m256 scale = _mm256_set1_ps(_cvtsh_ss(s.d) * static_cast<float>(sm.scale));
    const __m256 neg_min = _mm256_set1_ps(-(_cvtsh_ss(s.dmin) * static_cast<float>(sm.min)));
    widen_codes<false>(q4_k_codes(s, j), blk.w);
    for (int k = 0; k < 4; ++k) blk.w[k] = _mm256_fmadd_ps(scale, blk.w[k], neg_min);
  } else if constexpr (D == DType::Q6_K) {  // 32-element run k of half h of super-block b / 8
    const BlockQ6_K& s = reinterpret_cast<const BlockQ6_K*>(row)[b / 8];
    const int h = static_cast<int>(b % 8) / 4, k = static_cast<int>(b % 4);
    widen_codes<true>(q6_k_codes(s, h, k), blk.w);
    // Elements 0..15 use scales[8h + 2k], 16..31 scales[8h + 2k + 1]; value (d * sc) * q.
    const float d = _cvtsh_ss(s.d);
    const __m256 s0 = _mm256_set1_ps(d * static_cast<float>(s.scales[8 * h + 2 * k]));
    const __m256 s1 = _mm256_set1_ps(d * static_cast<float>(s.scales[8 * h + 2 * k + 1]));
    for (int i = 0; i < 4; ++i) blk.w[i] = _mm256_mul_ps(i < 2 ? s0 : s1, blk.w[i]);
  } else if constexpr (D == DType::F16) {
    const auto* h = reinterpret_cast<const uint16_t*>(row) + b * kB;
    for (int k = 0; k < 4; ++k)
      blk.w[k] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 8 * k)));
  } else if constexpr (D == DType::BF16) {
    const auto* h = reinterpret_cast<const uint16_t*>(row) + b * kB;
    for (int k = 0; k < 4; ++k) {
      const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 8 * k)));
      blk.w[k] = _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));  // bf16 = the top half of f32
    }
  } else {
    const auto* f = reinterpret_cast<const float*>(row) + b * kB;
    for (int k = 0; k < 4; ++k) blk.w[k] = _mm256_loadu_ps(f + 8 * k);
  }
  return blk;
}

/// Element `c` of a row of dtype D (for the scalar tail of unblocked dtypes).
template <DType D>
inline float element(const std::byte* row, int64_t c) {
  if constexpr (D == DType::F32) return reinterpret_cast<const float*>(row)[c];
  if constexpr (D == DType::F16) return f16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]);
  if constexpr (D == DType::BF16) return bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]);
  return 0.0f;  // quantized dtypes have no tail (whole blocks are checked)
}

/// y[r * y_stride + j] (+)= W[j] . x_r for the R rows x_r = x + r * cols of one group.
template <DType D, int R>
void dot_group(const std::byte* wrow, const float* x, int64_t cols, float* y, int64_t y_stride, bool accumulate) {
  const int64_t n_blocks = cols / kB;
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const DecodedBlock blk = decode_block<D>(wrow, b);
    for (int r = 0; r < R; ++r) {
      const float* xb = x + r * cols + b * kB;
      // The block's partial sum first: its chain does not depend on the previous block's, so
      // blocks overlap in the FMA pipes; only the one add per block is serial.
      __m256 part = _mm256_mul_ps(blk.w[0], _mm256_loadu_ps(xb));
      part = _mm256_fmadd_ps(blk.w[1], _mm256_loadu_ps(xb + 8), part);
      part = _mm256_fmadd_ps(blk.w[2], _mm256_loadu_ps(xb + 16), part);
      part = _mm256_fmadd_ps(blk.w[3], _mm256_loadu_ps(xb + 24), part);
      acc[r] = _mm256_add_ps(acc[r], part);
    }
  }
  for (int r = 0; r < R; ++r) {
    float v = hsum(acc[r]);
    for (int64_t c = n_blocks * kB; c < cols; ++c) v += element<D>(wrow, c) * x[r * cols + c];
    float& out = y[r * y_stride];
    out = accumulate ? out + v : v;
  }
}

template <DType D, int R>
void dot_tile(const WeightMatrix& w, int64_t j0, int64_t j1, const float* x, float* y, bool accumulate) {
  for (int64_t j = j0; j < j1; ++j) dot_group<D, R>(w.row(j), x, w.cols, y + j, w.rows, accumulate);
}

template <DType D>
void matmul_dtype(const WeightMatrix& w, const float* x, float* y, int64_t n, bool accumulate) {
  const int64_t n_tiles = (w.rows + kTileRows - 1) / kTileRows;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n_tiles; ++t) {
    const int64_t j0 = t * kTileRows, j1 = std::min(w.rows, j0 + kTileRows);
    for (int64_t r0 = 0; r0 < n; r0 += kGroupRows) {
      const float* xg = x + r0 * w.cols;
      float* yg = y + r0 * w.rows;
      // Same per-element arithmetic for every group size; R only sets how many share a block.
      switch (std::min(kGroupRows, n - r0)) {
        case 1: dot_tile<D, 1>(w, j0, j1, xg, yg, accumulate); break;
        case 2: dot_tile<D, 2>(w, j0, j1, xg, yg, accumulate); break;
        case 3: dot_tile<D, 3>(w, j0, j1, xg, yg, accumulate); break;
        case 4: dot_tile<D, 4>(w, j0, j1, xg, yg, accumulate); break;
        case 5: dot_tile<D, 5>(w, j0, j1, xg, yg, accumulate); break;
        case 6: dot_tile<D, 6>(w, j0, j1, xg, yg, accumulate); break;
        case 7: dot_tile<D, 7>(w, j0, j1, xg, yg, accumulate); break;
        default: dot_tile<D, 8>(w, j0, j1, xg, yg, accumulate); break;
      }
    }
  }
}

// ---- int8 activations (W4A8 / W8A8 / W3A8): Q4_1 / Q4_0 / Q5_0 / Q5_1 / Q4_K / Q6_K / Q8_0 / Q3_0 / Q3_1
// Each 32-element block of an x row is rounded to int8 with its own scale dx = max|x| / 127
// (ggml's block_q8_0/q8_1 for activations), and the block dot product runs in integers:
// _mm256_maddubs_epi16 multiplies 32 unsigned weight bytes by 32 signed x bytes into 16 int16
// pair sums (|31 * 127 * 2| and |128 * 127 * 2| fit int16), _mm256_madd_epi16 widens them to 8
// int32, which are converted once and scaled: acc = fma(d_w * dx, float(int dot), acc).
// Signed codes (Q8_0; Q6_K's q - 32) move their sign onto x first (maddubs wants one operand
// unsigned). K-quants: a 32-element block is one Q4_K sub-block (scale d * sc, minimum
// -dmin * m) or two Q6_K runs of 16 with their own scales, applied to int32 lanes 0..3 and 4..7.
// The offsets (Q4_1's m, Q4_0's -8) multiply the sum of the ROUNDED x (dx * sum(qx), ggml's
// block_q8_1.s), so the result is exactly W . x' and the error is w . (x' - x): weighting
// the rounding by the centred weights w rather than by d * q (in 0 .. 15d) cut the measured
// KL about fivefold.
// The per-element order is fixed as in the f32 path, so this path is batch-invariant too.

/// x rounded to int8 per 32-element block. qx: (n, cols); dx, qsum: (n, cols / 32).
struct QuantizedRows {
  std::vector<int8_t> qx;
  std::vector<float> dx;
  std::vector<float> qsum;
};

/// Int8 rows as the kernel reads them (qx may point into the caller's memory).
struct Int8RowsView {
  const int8_t* qx;    ///< (n, cols)
  const float* dx;     ///< (n, cols / 32) each block's scale
  const float* qsum;   ///< (n, cols / 32) each block's sum of codes
};

QuantizedRows quantize_rows(const float* x, int64_t n, int64_t cols) {
  const int64_t nb = cols / kB;
  QuantizedRows q{std::vector<int8_t>(static_cast<size_t>(n * cols)), std::vector<float>(static_cast<size_t>(n * nb)),
                  std::vector<float>(static_cast<size_t>(n * nb))};
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + r * cols + b * kB;
      float amax = 0.0f;
      for (int64_t i = 0; i < kB; ++i) amax = std::max(amax, std::fabs(xb[i]));
      const float d = amax / 127.0f;
      const float inv = d > 0.0f ? 1.0f / d : 0.0f;
      int sum = 0;
      for (int64_t i = 0; i < kB; ++i) {
        const int v = static_cast<int>(std::nearbyint(xb[i] * inv));
        q.qx[static_cast<size_t>(r * cols + b * kB + i)] = static_cast<int8_t>(v);
        sum += v;
      }
      q.dx[static_cast<size_t>(r * nb + b)] = d;
      q.qsum[static_cast<size_t>(r * nb + b)] = static_cast<float>(sum);
    }
  return q;
}

/// Weights codes with signed values (Q8_0, Q6_K's q - 32) take x's sign trick; the others are
/// unsigned codes with an offset (Q4_0, Q5_0, Q3_0) or a minimum (Q4_1, Q5_1, Q4_K, Q3_1).
template <DType D>
inline constexpr bool kSignedCodes = D == DType::Q8_0 || D == DType::Q6_K;

template <DType D, int R>
void dot_group_i8(const std::byte* wrow, const int8_t* qx, const float* dx, const float* qsum, int64_t cols, float* y, int64_t y_stride, bool accumulate) {
  const int64_t nb = cols / kB;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R];
  float off[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
    off[r] = 0.0f;
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i w8;                 // the block's 32 codes, byte l = element l
    float dw, mw = 0.0f;        // scale; minimum (Q4_1, Q5_1, Q4_K)
    float dw_hi = 0.0f;         // Q6_K: the scale of elements 16..31 (dw: 0..15)
    if constexpr (D == DType::Q8_0) {
      const BlockQ8_0& q = reinterpret_cast<const BlockQ8_0*>(wrow)[b];
      w8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.qs));
      dw = _cvtsh_ss(q.d);
    } else if constexpr (D == DType::Q4_1) {
      const BlockQ4_1& q = reinterpret_cast<const BlockQ4_1*>(wrow)[b];
      w8 = nibble_codes(q.qs);
      dw = _cvtsh_ss(q.d);
      mw = _cvtsh_ss(q.m);
    } else if constexpr (D == DType::Q4_0) {
      const BlockQ4_0& q = reinterpret_cast<const BlockQ4_0*>(wrow)[b];
      w8 = nibble_codes(q.qs);
      dw = _cvtsh_ss(q.d);
    } else if constexpr (D == DType::Q5_1) {  // codes 0..31: 31 * 127 * 2 fits int16
      const BlockQ5_1& q = reinterpret_cast<const BlockQ5_1*>(wrow)[b];
      w8 = q5_codes(q.qs, q.qh);
      dw = _cvtsh_ss(q.d);
      mw = _cvtsh_ss(q.m);
    } else if constexpr (D == DType::Q5_0) {
      const BlockQ5_0& q = reinterpret_cast<const BlockQ5_0*>(wrow)[b];
      w8 = q5_codes(q.qs, q.qh);
      dw = _cvtsh_ss(q.d);
    } else if constexpr (D == DType::Q3_0 || D == DType::Q3_1) {  // codes 0..7
      using Block = std::conditional_t<D == DType::Q3_0, BlockQ3_0, BlockQ3_1>;
      const Block& q = reinterpret_cast<const Block*>(wrow)[b];
      w8 = q3_codes(q.qs, q.qh);
      dw = _cvtsh_ss(q.d);
      if constexpr (D == DType::Q3_1) mw = _cvtsh_ss(q.m);
    } else if constexpr (D == DType::Q4_K) {  // sub-block b % 8: scale d * sc, minimum -dmin * m
      const BlockQ4_K& s = reinterpret_cast<const BlockQ4_K*>(wrow)[b / 8];
      const int j = static_cast<int>(b % 8);
      const KQuantScaleMin sm = q4_k_scale_min(s.scales, j);
      dw = _cvtsh_ss(s.d) * static_cast<float>(sm.scale);
      mw = -(_cvtsh_ss(s.dmin) * static_cast<float>(sm.min));
      w8 = q4_k_codes(s, j);
    } else {  // Q6_K: run k of half h; codes q - 32, two 16-element scales
      static_assert(D == DType::Q6_K, "no int8 kernel for this dtype");
      const BlockQ6_K& s = reinterpret_cast<const BlockQ6_K*>(wrow)[b / 8];
      const int h = static_cast<int>(b % 8) / 4, k = static_cast<int>(b % 4);
      w8 = q6_k_codes(s, h, k);
      const float d = _cvtsh_ss(s.d);
      dw = d * static_cast<float>(s.scales[8 * h + 2 * k]);
      dw_hi = d * static_cast<float>(s.scales[8 * h + 2 * k + 1]);
    }
    const __m256i w_abs = kSignedCodes<D> ? _mm256_sign_epi8(w8, w8) : w8;
    for (int r = 0; r < R; ++r) {
      __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + r * cols + b * kB));
      if constexpr (kSignedCodes<D>) xv = _mm256_sign_epi8(xv, w8);  // move w's sign onto x
      // int32 lanes 0..3 hold elements 0..15, lanes 4..7 elements 16..31.
      const __m256i p32 = _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, xv), ones);
      const float scale = dw * dx[r * nb + b];
      if constexpr (D == DType::Q6_K) {
        const __m256 sv = _mm256_setr_m128(_mm_set1_ps(scale), _mm_set1_ps(dw_hi * dx[r * nb + b]));
        acc[r] = _mm256_fmadd_ps(sv, _mm256_cvtepi32_ps(p32), acc[r]);
      } else {
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(p32), acc[r]);
      }
      if constexpr (D == DType::Q4_1 || D == DType::Q5_1 || D == DType::Q4_K || D == DType::Q3_1)
        off[r] += mw * (dx[r * nb + b] * qsum[r * nb + b]);
      if constexpr (D == DType::Q3_0) off[r] += -4.0f * scale * qsum[r * nb + b];
      if constexpr (D == DType::Q4_0) off[r] += -8.0f * scale * qsum[r * nb + b];
      if constexpr (D == DType::Q5_0) off[r] += -16.0f * scale * qsum[r * nb + b];
    }
  }
  for (int r = 0; r < R; ++r) {
    const float v = hsum(acc[r]) + off[r];
    float& out = y[r * y_stride];
    out = accumulate ? out + v : v;
  }
}

template <DType D>
void matmul_i8_dtype(const WeightMatrix& w, const Int8RowsView& q, float* y, int64_t n, bool accumulate) {
  const int64_t n_tiles = (w.rows + kTileRows - 1) / kTileRows;
  const int64_t nb = w.cols / kB;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n_tiles; ++t) {
    const int64_t j0 = t * kTileRows, j1 = std::min(w.rows, j0 + kTileRows);
    for (int64_t r0 = 0; r0 < n; r0 += kGroupRows) {
      const int8_t* qg = q.qx + r0 * w.cols;
      const float* dg = q.dx + r0 * nb;
      const float* sg = q.qsum + r0 * nb;
      float* yg = y + r0 * w.rows;
      for (int64_t j = j0; j < j1; ++j) {
        const std::byte* wr = w.row(j);
        switch (std::min(kGroupRows, n - r0)) {
          case 1: dot_group_i8<D, 1>(wr, qg, dg, sg, w.cols, yg + j, w.rows, accumulate); break;
          case 2: dot_group_i8<D, 2>(wr, qg, dg, sg, w.cols, yg + j, w.rows, accumulate); break;
          case 3: dot_group_i8<D, 3>(wr, qg, dg, sg, w.cols, yg + j, w.rows, accumulate); break;
          case 4: dot_group_i8<D, 4>(wr, qg, dg, sg, w.cols, yg + j, w.rows, accumulate); break;
          case 5: dot_group_i8<D, 5>(wr, qg, dg, sg, w.cols, yg + j, w.rows, accumulate); break;
          case 6: dot_group_i8<D, 6>(wr, qg, dg, sg, w.cols, yg + j, w.rows, accumulate); break;
          case 7: dot_group_i8<D, 7>(wr, qg, dg, sg, w.cols, yg + j, w.rows, accumulate); break;
          default: dot_group_i8<D, 8>(wr, qg, dg, sg, w.cols, yg + j, w.rows, accumulate); break;
        }
      }
    }
  }
}

/// The integer kernel for w's dtype (has_int8_kernel(w) is checked by the callers).
void matmul_i8(const WeightMatrix& w, const Int8RowsView& q, float* y, int64_t n, bool accumulate) {
  switch (w.dtype) {
    case DType::Q4_1: return matmul_i8_dtype<DType::Q4_1>(w, q, y, n, accumulate);
    case DType::Q4_0: return matmul_i8_dtype<DType::Q4_0>(w, q, y, n, accumulate);
    case DType::Q5_0: return matmul_i8_dtype<DType::Q5_0>(w, q, y, n, accumulate);
    case DType::Q5_1: return matmul_i8_dtype<DType::Q5_1>(w, q, y, n, accumulate);
    case DType::Q4_K: return matmul_i8_dtype<DType::Q4_K>(w, q, y, n, accumulate);
    case DType::Q6_K: return matmul_i8_dtype<DType::Q6_K>(w, q, y, n, accumulate);
    case DType::Q8_0: return matmul_i8_dtype<DType::Q8_0>(w, q, y, n, accumulate);
    case DType::Q3_0: return matmul_i8_dtype<DType::Q3_0>(w, q, y, n, accumulate);
    case DType::Q3_1: return matmul_i8_dtype<DType::Q3_1>(w, q, y, n, accumulate);
    default: break;
  }
  throw InvalidArgument("matmul: no integer kernel for " + std::string(dtype_info(w.dtype).name) + " weights");
}

void matmul_simd(const WeightMatrix& w, const float* x, float* y, int64_t n, bool accumulate) {
  switch (w.dtype) {
    case DType::F32: return matmul_dtype<DType::F32>(w, x, y, n, accumulate);
    case DType::F16: return matmul_dtype<DType::F16>(w, x, y, n, accumulate);
    case DType::BF16: return matmul_dtype<DType::BF16>(w, x, y, n, accumulate);
    case DType::Q8_0: return matmul_dtype<DType::Q8_0>(w, x, y, n, accumulate);
    case DType::Q4_0: return matmul_dtype<DType::Q4_0>(w, x, y, n, accumulate);
    case DType::Q4_1: return matmul_dtype<DType::Q4_1>(w, x, y, n, accumulate);
    case DType::Q5_0: return matmul_dtype<DType::Q5_0>(w, x, y, n, accumulate);
    case DType::Q5_1: return matmul_dtype<DType::Q5_1>(w, x, y, n, accumulate);
    case DType::Q4_K: return matmul_dtype<DType::Q4_K>(w, x, y, n, accumulate);
    case DType::Q6_K: return matmul_dtype<DType::Q6_K>(w, x, y, n, accumulate);
    case DType::Q3_0: return matmul_dtype<DType::Q3_0>(w, x, y, n, accumulate);
    case DType::Q3_1: return matmul_dtype<DType::Q3_1>(w, x, y, n, accumulate);
  }
  throw UnsupportedError("cpu matmul: no kernel for " + std::string(dtype_info(w.dtype).name) + " weights");
}
#endif

}  // namespace

// Dequantize-then-dot, one row at a time: the fallback without AVX2 (one order for any n too).
void matmul_scalar(const WeightMatrix& w, const float* x, float* y, int64_t n, bool accumulate) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t j = 0; j < w.rows; ++j) {
    dequantize_row(w.dtype, w.row(j), row.data(), w.cols);
    for (int64_t r = 0; r < n; ++r) {
      float s = 0.0f;
      for (int64_t c = 0; c < w.cols; ++c) s += row[static_cast<size_t>(c)] * x[r * w.cols + c];
      float& out = y[r * w.rows + j];
      out = accumulate ? out + s : s;
    }
  }
}

bool has_int8_kernel(const WeightMatrix& w) {
  return dtype_info(w.dtype).block_elems > 1;  // every quantized dtype; F32 / F16 / BF16 have none
}

void matmul_int8(const WeightMatrix& w, const int8_t* qx, const float* sx, float* y, int64_t n, bool accumulate) {
  if (w.data == nullptr || qx == nullptr || sx == nullptr || y == nullptr || n <= 0) {
    throw InvalidArgument("matmul_int8: null pointer or n <= 0 for weight '" + w.name + "'");
  }
  if (!has_int8_kernel(w) || w.cols % dtype_info(w.dtype).block_elems != 0) {
    throw InvalidArgument("matmul_int8: weight '" + w.name + "' (" + std::string(dtype_info(w.dtype).name) + ", " +
                          std::to_string(w.cols) + " columns) has no integer kernel: want Q8_0, Q4_0, Q4_1, Q5_0, "
                          "Q5_1, Q4_K, Q6_K, Q3_0 or Q3_1 with whole blocks");
  }
  const int64_t nb = w.cols / kB;
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  // The per-block kernel with every block of row r at the token's one scale.
  std::vector<float> dx(static_cast<size_t>(n * nb)), qsum(static_cast<size_t>(n * nb));
#pragma omp parallel for schedule(static) if (n > 1)
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      int sum = 0;
      for (int64_t i = 0; i < kB; ++i) sum += qx[r * w.cols + b * kB + i];
      dx[static_cast<size_t>(r * nb + b)] = sx[r];
      qsum[static_cast<size_t>(r * nb + b)] = static_cast<float>(sum);
    }
  const Int8RowsView q{qx, dx.data(), qsum.data()};
  return matmul_i8(w, q, y, n, accumulate);
#else
  // Portable fallback: the decoded weights times the decoded x, one row at a time.
  (void)nb;
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t j = 0; j < w.rows; ++j) {
    dequantize_row(w.dtype, w.row(j), row.data(), w.cols);
    for (int64_t r = 0; r < n; ++r) {
      float s = 0.0f;
      for (int64_t c = 0; c < w.cols; ++c) s += row[static_cast<size_t>(c)] * static_cast<float>(qx[r * w.cols + c]);
      float& out = y[r * w.rows + j];
      out = accumulate ? out + sx[r] * s : sx[r] * s;
    }
  }
#endif
}

void matmul(const WeightMatrix& w, const float* x, float* y, int64_t n, bool accumulate,
            MatmulActivations activations) {
  if (activations == MatmulActivations::Int8PerToken) {
    throw InvalidArgument("matmul: per-token int8 activations are rounded by the caller; call matmul_int8");
  }
  if (w.data == nullptr || x == nullptr || y == nullptr || n <= 0) {
    throw InvalidArgument("matmul: null pointer or n <= 0 for weight '" + w.name + "'");
  }
  const int64_t block_elems = dtype_info(w.dtype).block_elems;
  if (block_elems > 1 && w.cols % block_elems != 0) {
    throw InvalidArgument("matmul: weight '" + w.name + "' (" + std::string(dtype_info(w.dtype).name) + ") has " +
                          std::to_string(w.cols) + " columns, not a multiple of its " +
                          std::to_string(block_elems) + "-element block");
  }
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  if (activations == MatmulActivations::Int8 && has_int8_kernel(w)) {
    const QuantizedRows rows = quantize_rows(x, n, w.cols);
    const Int8RowsView q{rows.qx.data(), rows.dx.data(), rows.qsum.data()};
    return matmul_i8(w, q, y, n, accumulate);
  }
  matmul_simd(w, x, y, n, accumulate);
#else
  (void)activations;
  matmul_scalar(w, x, y, n, accumulate);  // portable fallback: one order for every batch too
#endif
}

}  // namespace lio::cpu
