// packed_kernels_avx2.cpp — the packed matmul's AVX2 kernels (AVX2, FMA, F16C; this file alone
// is compiled with those flags and without AVX-512, see kernels/CMakeLists.txt). A 16-row panel
// is two 8-lane halves; lane j of a half is weight row 8h + j. Each kernel performs, per output
// element, exactly the operations of its scalar twin in packed_matmul.cpp. Without VNNI a
// block's integer dot is pmaddubsw (u8 x s8 pairs into int16) then pmaddwd (pairs into int32):
// exact, since no pair sum exceeds int16 (4-bit codes: 2 x 15 x 127; Q5's: 2 x 31 x 127; signed
// bytes, with the sign moved onto x: 2 x 128 x 127 = 32,512 < 32,767, x in [-127, 127]).
#include <immintrin.h>

#include <cstring>

#include "packed_kernels.h"

namespace lio::cpu::packed {
namespace {

constexpr int kMaxRowsInt8 = 4;  // 4 float + 4 int accumulators + 2 weight registers

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

/// y (+)= acc for rows 8h .. 8h + 7 of the panel, only those below w.rows.
inline void store_half(const View& w, const Out& out, int64_t r, int64_t p, int h, __m256 acc) {
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

template <Kind VK>
inline __m256 load_values(const void* values, int64_t index) {
  if constexpr (VK == Kind::F32) {
    return _mm256_loadu_ps(static_cast<const float*>(values) + index);
  } else {
    const __m128i h = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(values) + index));
    if constexpr (VK == Kind::F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

/// G float panels from p0 times R x rows: 2 G R accumulators (two 8-row halves a panel), one
/// FMA chain per output element.
template <Kind VK, int G, int R>
void f32_rows(const View& w, int64_t p0, const float* x, int64_t r0, const Out& out) {
  __m256 acc[G][2][R];
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) acc[g][0][r] = acc[g][1][r] = _mm256_setzero_ps();
  const int64_t cols = w.cols;
  const float* xr = x + r0 * cols;
  for (int64_t k = 0; k < cols; ++k) {
    for (int g = 0; g < G; ++g) {
      const std::byte* values = w.panel(p0 + g);
      const __m256 w0 = load_values<VK>(values, k * kPanelRows),
                   w1 = load_values<VK>(values, k * kPanelRows + 8);
      for (int r = 0; r < R; ++r) {
        const __m256 xv = _mm256_broadcast_ss(xr + r * cols + k);
        acc[g][0][r] = _mm256_fmadd_ps(w0, xv, acc[g][0][r]);
        acc[g][1][r] = _mm256_fmadd_ps(w1, xv, acc[g][1][r]);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    const int64_t p = p0 + g;
    for (int r = 0; r < R; ++r) {
      store_half(w, out, r0 + r, p, 0, acc[g][0][r]);
      if (w.rows - p * kPanelRows > 8) store_half(w, out, r0 + r, p, 1, acc[g][1][r]);
    }
  }
}

/// Half h's 8 scales (which 0: d, 1: m) as f32.
template <bool kF16>
inline __m256 load_scales(const std::byte* s, int which, int h) {
  if constexpr (kF16)
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + which * 32 + 16 * h)));
  return _mm256_loadu_ps(reinterpret_cast<const float*>(s + which * 64 + 32 * h));
}

/// isum += the int32 lane sums of u8 w times s8 x, 4 bytes a lane (vpdpbusd's contract).
template <bool kSigned>
inline __m256i dot4(__m256i isum, __m256i w, __m256i x) {
  if constexpr (kSigned) {  // |w| (0x80 reads as 128) times x with w's sign
    x = _mm256_sign_epi8(x, w);
    w = _mm256_sign_epi8(w, w);
  }
  return _mm256_add_epi32(isum,
                          _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
}

template <Kind CK, bool kF16, Second kSecond, int R>
void int8_rows(const View& w, int64_t p, int h, const Int8Rows& x, int64_t r0, const Out& out) {
  constexpr bool kSplit = kSecond == Second::Split;
  const int64_t nb = w.cols / kBlock, code_bytes = CK == Kind::U4 ? 256 : 512;
  const std::byte* panel = w.panel(p);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = panel + b * w.block_bytes;
    const int8_t* q[R];
    __m256i isum[R], isum_hi[kSplit ? R : 1];
    for (int r = 0; r < R; ++r) {
      q[r] = x.qx + (r0 + r) * x.cols + b * kBlock;
      isum[r] = _mm256_setzero_si256();
      if constexpr (kSplit) isum_hi[r] = _mm256_setzero_si256();
    }
    const auto chunk = [&](int g) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + g * 64 + 32 * h));
    };
    if constexpr (CK == Kind::U4) {
      const __m256i low4 = _mm256_set1_epi8(0x0F);
      for (int c = 0; c < 4; ++c) {
        const __m256i v = chunk(c);
        const __m256i lo = _mm256_and_si256(v, low4),
                      hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        for (int r = 0; r < R; ++r) {
          isum[r] = dot4<false>(isum[r], lo, _mm256_set1_epi32(load_i32(q[r] + 4 * c)));
          isum[r] = dot4<false>(isum[r], hi, _mm256_set1_epi32(load_i32(q[r] + 16 + 4 * c)));
        }
      }
    } else {
      for (int g = 0; g < 8; ++g) {
        const __m256i v = chunk(g);
        __m256i* into = kSplit && g >= 4 ? isum_hi : isum;  // split: elements 16..31 apart
        for (int r = 0; r < R; ++r)
          into[r] = dot4<CK == Kind::S8>(into[r], v, _mm256_set1_epi32(load_i32(q[r] + 4 * g)));
      }
    }
    const __m256 d = load_scales<kF16>(blk + code_bytes, 0, h);
    const __m256 m =
        kSecond != Second::None ? load_scales<kF16>(blk + code_bytes, 1, h) : _mm256_setzero_ps();
    for (int r = 0; r < R; ++r) {
      const int64_t at = (r0 + r) * nb + b;
      const __m256 dx = _mm256_set1_ps(x.dx[at]);
      if constexpr (kSplit) {  // Q6_K: z = 0, each half at its own scale
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum[r]), acc[r]);
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(m, dx), _mm256_cvtepi32_ps(isum_hi[r]), acc[r]);
      } else {
        if (w.zero != 0)
          isum[r] = _mm256_sub_epi32(isum[r], _mm256_set1_epi32(w.zero * x.qsum[at]));
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum[r]), acc[r]);
        if constexpr (kSecond == Second::Min)
          acc[r] = _mm256_fmadd_ps(m, _mm256_set1_ps(x.xs[at]), acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) store_half(w, out, r0 + r, p, h, acc[r]);
}

template <Kind CK, bool kF16, Second kSecond>
void int8_panel(const View& w, int64_t p0, int64_t p1, const Int8Rows& x, int64_t r0, int64_t r1,
                const Out& out) {
  for (int64_t p = p0; p < p1; ++p)
    for (int h = 0; h < (w.rows - p * kPanelRows > 8 ? 2 : 1); ++h)
      for_row_passes<kMaxRowsInt8>(
          r0, r1, [&]<int R>(int64_t r) { int8_rows<CK, kF16, kSecond, R>(w, p, h, x, r, out); });
}

template <bool kSigned>
inline __m256 lane_byte(__m256i v, int t) {
  if constexpr (kSigned)
    return _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(v, 24 - 8 * t), 24));
  return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 8 * t), _mm256_set1_epi32(0xFF)));
}

/// Half h (rows 8h .. 8h + 7) of G code panels from p0 times R f32 x rows: each weight decoded
/// in registers to exactly dequantize_row's value, fma(d, float(u) - z, m), then the same FMA
/// chain as a float panel's, k in order.
template <Kind CK, bool kF16, Second kSecond, int G, int R>
void code_f32_rows(const View& w, int64_t p0, int h, const float* x, int64_t r0, const Out& out) {
  constexpr int64_t kCodeBytes = CK == Kind::U4 ? 256 : 512;
  __m256 acc[G][R];
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) acc[g][r] = _mm256_setzero_ps();
  const int64_t cols = w.cols;
  const float* xr = x + r0 * cols;
  const __m256 zf = _mm256_set1_ps(static_cast<float>(w.zero));
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < cols / kBlock; ++b) {
    const std::byte* blk[G];
    __m256 d[G], m[G];
    for (int g = 0; g < G; ++g) {
      blk[g] = w.panel(p0 + g) + b * w.block_bytes;
      d[g] = load_scales<kF16>(blk[g] + kCodeBytes, 0, h);
      m[g] = kSecond != Second::None ? load_scales<kF16>(blk[g] + kCodeBytes, 1, h)
                                     : _mm256_setzero_ps();
    }
    // Split scales (Q6_K): elements 16..31 take the second scale and no minimum.
    const auto step = [&](int64_t k, const __m256i(&v)[G], int t) {
      const bool second = kSecond == Second::Split && k % kBlock >= 16;
      __m256 wk[G];
      for (int g = 0; g < G; ++g) {
        const __m256 u = _mm256_sub_ps(lane_byte<CK == Kind::S8>(v[g], t), zf);
        if constexpr (kSecond == Second::Split) {
          wk[g] = _mm256_fmadd_ps(second ? m[g] : d[g], u, _mm256_setzero_ps());
        } else {
          wk[g] = _mm256_fmadd_ps(d[g], u, m[g]);
        }
      }
      for (int r = 0; r < R; ++r) {
        const __m256 xv = _mm256_broadcast_ss(xr + r * cols + k);
        for (int g = 0; g < G; ++g) acc[g][r] = _mm256_fmadd_ps(wk[g], xv, acc[g][r]);
      }
    };
    const auto chunk = [&](int g, int c) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[g] + c * 64 + 32 * h));
    };
    if constexpr (CK == Kind::U4) {
      for (int half = 0; half < 2; ++half)
        for (int c = 0; c < 4; ++c) {
          __m256i v[G];
          for (int g = 0; g < G; ++g) {
            const __m256i raw = chunk(g, c);
            v[g] = _mm256_and_si256(half == 0 ? raw : _mm256_srli_epi16(raw, 4), low4);
          }
          for (int t = 0; t < 4; ++t) step(b * kBlock + 16 * half + 4 * c + t, v, t);
        }
    } else {
      for (int c = 0; c < 8; ++c) {
        __m256i v[G];
        for (int g = 0; g < G; ++g) v[g] = chunk(g, c);
        for (int t = 0; t < 4; ++t) step(b * kBlock + 4 * c + t, v, t);
      }
    }
  }
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) store_half(w, out, r0 + r, p0 + g, h, acc[g][r]);
}

/// x rows per pass for G panels within the 16 registers.
template <Kind K, int G>
inline constexpr int kRowsFor = (K == Kind::F32 || K == Kind::F16 || K == Kind::BF16)
                                    ? (G == 1   ? 6
                                       : G == 2 ? 3
                                       : G == 3 ? 2
                                                : 1)
                                    : (G == 1   ? 4
                                       : G == 2 ? 2
                                                : 1);

/// The f32 kernel on G panels from p0 for x rows [r0, r1), R rows a pass.
template <Kind K, bool kF16, Second kSecond, int G, int R>
void any_f32_rows(const View& w, int64_t p0, const float* x, int64_t r0, const Out& out) {
  if constexpr (K == Kind::F32 || K == Kind::F16 || K == Kind::BF16) {
    f32_rows<K, G, R>(w, p0, x, r0, out);
  } else {
    for (int h = 0; h < 2; ++h)
      code_f32_rows<K, kF16, kSecond, G, R>(w, p0, h, x, r0, out);  // store_half skips padding
  }
}

/// Panels walked together for n x rows: enough for independent chains at small n, one at a
/// time once a pass of that one panel fills its rows (the decoded or loaded weights reused most).
template <Kind K>
constexpr int64_t group_for(int64_t n) {
  constexpr bool kFloat = K == Kind::F32 || K == Kind::F16 || K == Kind::BF16;
  if (n >= (kFloat ? 6 : 4)) return 1;
  if (n >= (kFloat ? 3 : 2)) return 2;
  return kMaxGroup;
}

/// The f32 kernel on panels [p0, p1) of kind K, group_for(rows) at a time.
template <Kind K, bool kF16, Second kSecond>
void f32_panels_of(const View& w, int64_t p0, int64_t p1, const float* x, int64_t r0, int64_t r1,
                   const Out& out) {
  const int64_t group = group_for<K>(r1 - r0);
  for (int64_t p = p0; p < p1; p += group)
    with_count<kMaxGroup>(p1 - p < group ? p1 - p : group, [&]<int G>() {
      for_row_passes<kRowsFor<K, G>>(
          r0, r1, [&]<int R>(int64_t r) { any_f32_rows<K, kF16, kSecond, G, R>(w, p, x, r, out); });
    });
}

inline float hmax(__m256 v) {  // exact in any order
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline int32_t hsum_epi32(__m256i v) {  // exact
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

}  // namespace

void avx2_f32_panels(const View& w, int64_t p0, int64_t p1, const float* x, int64_t r0, int64_t r1,
                     const Out& out) {
  with_layout(w, [&]<Kind K, bool kF16, Second kSecond>() {
    f32_panels_of<K, kF16, kSecond>(w, p0, p1, x, r0, r1, out);
  });
}

void avx2_int8_panels(const View& w, int64_t p0, int64_t p1, const Int8Rows& x, int64_t r0,
                      int64_t r1, const Out& out) {
  with_code_layout(w, [&]<Kind CK, bool kF16, Second kSecond>() {
    int8_panel<CK, kF16, kSecond>(w, p0, p1, x, r0, r1, out);
  });
}

void avx2_quantize_rows(const float* x, int64_t r0, int64_t r1, int64_t cols, int8_t* qx, float* dx,
                        int32_t* qsum, int32_t* qsum_lo, float* xs) {
  const int64_t nb = cols / kBlock;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + r * cols + b * kBlock;
      __m256 v[4];
      __m256 amax8 = _mm256_setzero_ps();
      for (int k = 0; k < 4; ++k) {
        v[k] = _mm256_loadu_ps(xb + 8 * k);
        amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign, v[k]));
      }
      const float amax = hmax(amax8);
      const float d = amax / 127.0f;
      const float inv = d > 0.0f ? 1.0f / d : 0.0f;
      __m256i iv[4];
      for (int k = 0; k < 4; ++k)
        iv[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], _mm256_set1_ps(inv)));  // nearest even
      // int32 -> int8 in element order: packs work per 128-bit lane, the permute puts the
      // lanes' 4-byte groups back in order.
      const __m256i p16a = _mm256_packs_epi32(iv[0], iv[1]),
                    p16b = _mm256_packs_epi32(iv[2], iv[3]);
      const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b),
                                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qx + r * cols + b * kBlock), p8);
      const int32_t sum_lo = hsum_epi32(_mm256_add_epi32(iv[0], iv[1]));
      const int32_t sum = sum_lo + hsum_epi32(_mm256_add_epi32(iv[2], iv[3]));
      qsum_lo[r * nb + b] = sum_lo;
      dx[r * nb + b] = d;
      qsum[r * nb + b] = sum;
      xs[r * nb + b] = d * static_cast<float>(sum);
    }
}

}  // namespace lio::cpu::packed
