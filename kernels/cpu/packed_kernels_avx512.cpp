// packed_kernels_avx512.cpp — the packed matmul's AVX-512 kernels (F, BW, VL, VNNI; this file
// alone is compiled with those flags, see kernels/CMakeLists.txt): the kernels of
// packed_kernels_simd.h instantiated over Avx512, the intrinsics below. Lane j of every
// register is weight row j of the panel (one half a panel); a block's integer dot is vpdpbusd
// (u8 x s8, four products a lane into int32: exact, so the order is free).
#include <immintrin.h>

#include <utility>

#include "packed_kernels.h"
#include "packed_kernels_simd.h"

namespace lio::cpu::packed {
namespace {

/// AVX-512's side of packed_kernels_simd.h (see there for what each member means).
struct Avx512 {
  using F = __m512;
  using I = __m512i;
  static constexpr int kLanes = 16;
  static constexpr int kMaxRowsInt8 = 8;  // 8 float + 8 int accumulators + 2 weight registers
  static constexpr bool kBiasSignedCodes = true;  // vpdpbusd's first operand is unsigned
  static constexpr bool kInt16Dots = false;  // vpdpbusd sums 4 products into int32 in one instruction

  /// x rows per pass for G panels: the accumulators (and, for codes, each panel's scales and
  /// decoded weights) within the 32 registers.
  static constexpr int rows_for(bool float_kind, int g) {
    if (float_kind) return g == 1 ? 16 : g == 2 ? 12 : g == 3 ? 8 : 6;
    return g == 1 ? 8 : g == 2 ? 6 : g == 3 ? 4 : 3;
  }
  /// Panels walked together for n x rows: float panels always kMaxGroup (6 rows a pass still
  /// fit); code panels one at a time once a pass fills 8 rows (each weight decoded once a pass).
  static constexpr int64_t group_for(bool float_kind, int64_t n) {
    return float_kind || n < 8 ? kMaxGroup : 1;
  }

  static F zero() { return _mm512_setzero_ps(); }
  static I zero_i() { return _mm512_setzero_si512(); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F to_float(I v) { return _mm512_cvtepi32_ps(v); }
  static I set1_i32(int32_t v) { return _mm512_set1_epi32(v); }
  static I sub_i32(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I load_bytes(const std::byte* p) {
    return _mm512_loadu_si512(reinterpret_cast<const void*>(p));
  }
  static I low_nibbles(I v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0F)); }
  static I high_nibbles(I v) {
    return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F));
  }

  /// S8 codes biased to u + 128 (int8_rows then subtracts 128 * the block's x code sum).
  template <bool kSigned>
  static I prepare_codes(I v) {
    if constexpr (kSigned) return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
    return v;
  }
  template <bool kSigned>
  static I dot4(I isum, I w, I x) {
    return _mm512_dpbusd_epi32(isum, w, x);
  }
  template <bool kSigned>
  static F lane_byte(I v, int t) {
    if constexpr (kSigned)
      return _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * t), 24));
    return _mm512_cvtepi32_ps(
        _mm512_and_si512(_mm512_srli_epi32(v, 8 * t), _mm512_set1_epi32(0xFF)));
  }

  template <Kind VK>
  static F load_values(const void* values, int64_t index) {
    if constexpr (VK == Kind::F32) {
      return _mm512_loadu_ps(static_cast<const float*>(values) + index);
    } else {
      const __m256i h = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(values) + index));
      if constexpr (VK == Kind::F16) return _mm512_cvtph_ps(h);
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));  // bf16
    }
  }
  template <bool kF16>
  static F load_scales(const std::byte* s) {
    if constexpr (kF16)
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
    return _mm512_loadu_ps(reinterpret_cast<const float*>(s));
  }

  /// y (+)= acc for the panel's real rows (h is always 0: one register a panel).
  static void store(const View& w, const Out& out, int64_t r, int64_t p, int /*h*/, F acc) {
    const int64_t n = w.rows - p * kPanelRows;
    const __mmask16 mask =
        n >= kPanelRows ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
    float* y = out.y + r * out.ld + p * kPanelRows;
    if (out.accumulate) acc = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y), acc);
    _mm512_mask_storeu_ps(y, mask, acc);
  }

  static float amax(const float* xb) {  // exact in any order
    return _mm512_reduce_max_ps(
        _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb)), _mm512_abs_ps(_mm512_loadu_ps(xb + 16))));
  }
  static std::pair<int32_t, int32_t> round_block(const float* xb, float inv, int8_t* q) {
    // cvtps2dq rounds to nearest even (MXCSR's default), as std::nearbyint does.
    const __m512i ia = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb), _mm512_set1_ps(inv)));
    const __m512i ic =
        _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 16), _mm512_set1_ps(inv)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(ia));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(ic));
    return {_mm512_reduce_add_epi32(ia), _mm512_reduce_add_epi32(ic)};
  }
};

}  // namespace

void avx512_f32_panels(const View& w, int64_t p0, int64_t p1, const float* x, int64_t r0,
                       int64_t r1, const Out& out) {
  simd::f32_panels<Avx512>(w, p0, p1, x, r0, r1, out);
}

void avx512_int8_panels(const View& w, int64_t p0, int64_t p1, const Int8Rows& x, int64_t r0,
                        int64_t r1, const Out& out) {
  simd::int8_panels<Avx512>(w, p0, p1, x, r0, r1, out);
}

void avx512_quantize_rows(const float* x, int64_t r0, int64_t r1, int64_t cols, int8_t* qx,
                          float* dx, int32_t* qsum, int32_t* qsum_lo, float* xs) {
  simd::quantize_rows<Avx512>(x, r0, r1, cols, qx, dx, qsum, qsum_lo, xs);
}

}  // namespace lio::cpu::packed
