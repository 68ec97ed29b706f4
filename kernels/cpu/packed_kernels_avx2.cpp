// packed_kernels_avx2.cpp — the packed matmul's AVX2 kernels (AVX2, FMA, F16C; this file alone
// is compiled with those flags and without AVX-512, see kernels/CMakeLists.txt): the kernels of
// packed_kernels_simd.h instantiated over Avx2, the intrinsics below. A 16-row panel is two
// 8-lane halves; lane j of a half is weight row 8h + j. Without VNNI a block's integer dot is
// pmaddubsw (u8 x s8 pairs into int16) then pmaddwd (pairs into int32): exact, since no pair
// sum exceeds int16 (4-bit codes: 2 x 15 x 127; Q5's: 2 x 31 x 127; signed bytes, with the sign
// moved onto x: 2 x 128 x 127 = 32,512 < 32,767, x in [-127, 127]).
#include <immintrin.h>

#include <utility>

#include "packed_kernels.h"
#include "packed_kernels_simd.h"

namespace lio::cpu::packed {
namespace {

/// AVX2's side of packed_kernels_simd.h (see there for what each member means).
struct Avx2 {
  using F = __m256;
  using I = __m256i;
  static constexpr int kLanes = 8;
  static constexpr int kMaxRowsInt8 = 4;  // 4 float + 4 int accumulators + 2 weight registers
  static constexpr bool kBiasSignedCodes = false;

  /// x rows per pass for G panels within the 16 registers.
  static constexpr int rows_for(bool float_kind, int g) {
    if (float_kind) return g == 1 ? 6 : g == 2 ? 3 : g == 3 ? 2 : 1;
    return g == 1 ? 4 : g == 2 ? 2 : 1;
  }
  /// Panels walked together for n x rows: enough for independent chains at small n, one at a
  /// time once a pass of that one panel fills its rows (the decoded or loaded weights reused
  /// most).
  static constexpr int64_t group_for(bool float_kind, int64_t n) {
    if (n >= (float_kind ? 6 : 4)) return 1;
    if (n >= (float_kind ? 3 : 2)) return 2;
    return kMaxGroup;
  }

  static F zero() { return _mm256_setzero_ps(); }
  static I zero_i() { return _mm256_setzero_si256(); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F to_float(I v) { return _mm256_cvtepi32_ps(v); }
  static I set1_i32(int32_t v) { return _mm256_set1_epi32(v); }
  static I sub_i32(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I load_bytes(const std::byte* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  static I low_nibbles(I v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
  static I high_nibbles(I v) {
    return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
  }

  template <bool kSigned>
  static I prepare_codes(I v) {
    return v;  // dot4 moves the sign
  }
  /// isum += the int32 lane sums of u8 w times s8 x, 4 bytes a lane (vpdpbusd's contract).
  template <bool kSigned>
  static I dot4(I isum, I w, I x) {
    if constexpr (kSigned) {  // |w| (0x80 reads as 128) times x with w's sign
      x = _mm256_sign_epi8(x, w);
      w = _mm256_sign_epi8(w, w);
    }
    return _mm256_add_epi32(isum,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
  }
  /// Small codes: several pmaddubsw results are summed as int16 and widened once, as long as
  /// no lane can pass 32,767 (then nothing saturates and the int32 sum is the same): a 4-bit
  /// block's 8 (8 x 2 x 15 x 127 = 30,480), 4 of Q5's 5-bit codes (4 x 2 x 31 x 127 = 31,496)
  /// or of Q6_K's codes q - 32 in [-32, 31] (4 x 2 x 32 x 127 = 32,512). Each saves a pmaddwd
  /// and turns an int32 add into an int16 one. Not Q8_0's bytes: one pair reaches 32,512.
  static constexpr bool kInt16Dots = true;
  /// Each int16 pair sum of u8 w times s8 x (kSigned: w's sign moved onto x first, as dot4).
  template <bool kSigned = false>
  static I dot_i16(I w, I x) {
    if constexpr (kSigned) {
      x = _mm256_sign_epi8(x, w);
      w = _mm256_sign_epi8(w, w);
    }
    return _mm256_maddubs_epi16(w, x);
  }
  static I add_i16(I a, I b) { return _mm256_add_epi16(a, b); }
  static I widen_add(I isum, I s16) {
    return _mm256_add_epi32(isum, _mm256_madd_epi16(s16, _mm256_set1_epi16(1)));
  }
  template <bool kSigned>
  static F lane_byte(I v, int t) {
    if constexpr (kSigned)
      return _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(v, 24 - 8 * t), 24));
    return _mm256_cvtepi32_ps(
        _mm256_and_si256(_mm256_srli_epi32(v, 8 * t), _mm256_set1_epi32(0xFF)));
  }

  template <Kind VK>
  static F load_values(const void* values, int64_t index) {
    if constexpr (VK == Kind::F32) {
      return _mm256_loadu_ps(static_cast<const float*>(values) + index);
    } else {
      const __m128i h = _mm_loadu_si128(
          reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(values) + index));
      if constexpr (VK == Kind::F16) return _mm256_cvtph_ps(h);
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));  // bf16
    }
  }
  template <bool kF16>
  static F load_scales(const std::byte* s) {
    if constexpr (kF16)
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
    return _mm256_loadu_ps(reinterpret_cast<const float*>(s));
  }

  /// y (+)= acc for rows 8h .. 8h + 7 of the panel, only those below w.rows.
  static void store(const View& w, const Out& out, int64_t r, int64_t p, int h, F acc) {
    float* y = out.y + r * out.ld + p * kPanelRows + 8 * h;
    const int64_t n = w.rows - p * kPanelRows - 8 * h;
    if (n >= 8) {
      if (out.accumulate) acc = _mm256_add_ps(_mm256_loadu_ps(y), acc);
      _mm256_storeu_ps(y, acc);
      return;
    }
    alignas(32) float v[8];
    _mm256_store_ps(v, acc);
    for (int64_t j = 0; j < n; ++j) y[j] = out.accumulate ? y[j] + v[j] : v[j];
  }

  static float amax(const float* xb) {  // exact in any order
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m8 = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k)
      m8 = _mm256_max_ps(m8, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8 * k)));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  static int32_t hsum(__m256i v) {  // exact
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
  }
  static std::pair<int32_t, int32_t> round_block(const float* xb, float inv, int8_t* q) {
    __m256i iv[4];
    for (int k = 0; k < 4; ++k)  // cvtps2dq: nearest even
      iv[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * k), _mm256_set1_ps(inv)));
    // int32 -> int8 in element order: packs work per 128-bit lane, the permute puts the lanes'
    // 4-byte groups back in order.
    const __m256i p16a = _mm256_packs_epi32(iv[0], iv[1]), p16b = _mm256_packs_epi32(iv[2], iv[3]);
    const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b),
                                                   _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), p8);
    return {hsum(_mm256_add_epi32(iv[0], iv[1])), hsum(_mm256_add_epi32(iv[2], iv[3]))};
  }
};

}  // namespace

void avx2_f32_panels(const View& w, int64_t p0, int64_t p1, const float* x, int64_t r0, int64_t r1,
                     const Out& out) {
  simd::f32_panels<Avx2>(w, p0, p1, x, r0, r1, out);
}

void avx2_int8_panels(const View& w, int64_t p0, int64_t p1, const Int8Rows& x, int64_t r0,
                      int64_t r1, const Out& out) {
  simd::int8_panels<Avx2>(w, p0, p1, x, r0, r1, out);
}

void avx2_quantize_rows(const float* x, int64_t r0, int64_t r1, int64_t cols, int8_t* qx, float* dx,
                        int32_t* qsum, int32_t* qsum_lo, float* xs) {
  simd::quantize_rows<Avx2>(x, r0, r1, cols, qx, dx, qsum, qsum_lo, xs);
}

}  // namespace lio::cpu::packed
