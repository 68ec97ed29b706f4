// packed_kernels_avx512.cpp — the packed matmul's AVX-512 kernels (F, BW, VL, VNNI; this file
// alone is compiled with those flags, see kernels/CMakeLists.txt). Lane j of every register is
// weight row j of the panel; each kernel performs, per output element, exactly the operations
// of its scalar twin in packed_matmul.cpp (the integer sums are exact, so their order is free).
#include <immintrin.h>

#include <cstring>

#include "packed_kernels.h"

namespace lio::cpu::packed {
namespace {

constexpr int kMaxRowsInt8 = 8;  // 8 float + 8 int accumulators + 2 weight registers

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline __mmask16 row_mask(const View& w, int64_t p) {
  const int64_t n = w.rows - p * kPanelRows;
  return n >= kPanelRows ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

/// y (+)= acc for the panel's real rows.
inline void store_row(const Out& out, int64_t r, int64_t p, __mmask16 mask, __m512 acc) {
  float* y = out.y + r * out.ld + p * kPanelRows;
  if (out.accumulate) acc = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y), acc);
  _mm512_mask_storeu_ps(y, mask, acc);
}

/// Stores G x R accumulators: panel p0 + g, x row r0 + r.
template <int G, int R>
inline void store_rows(const View& w, int64_t p0, int64_t r0, const Out& out,
                       const __m512 (&acc)[G][R]) {
  for (int g = 0; g < G; ++g) {
    const __mmask16 mask = row_mask(w, p0 + g);
    for (int r = 0; r < R; ++r) store_row(out, r0 + r, p0 + g, mask, acc[g][r]);
  }
}

/// 16 values of a float panel (F32, F16 or BF16) at `index`, as f32 (exact).
template <Kind VK>
inline __m512 load_values(const void* values, int64_t index) {
  if constexpr (VK == Kind::F32) {
    return _mm512_loadu_ps(static_cast<const float*>(values) + index);
  } else {
    const __m256i h = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(values) + index));
    if constexpr (VK == Kind::F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));  // bf16: the top half of f32
  }
}

/// G float panels from p0 times R x rows: G x R accumulators, one FMA chain per output element.
template <Kind VK, int G, int R>
void f32_rows(const View& w, int64_t p0, const float* x, int64_t r0, const Out& out) {
  __m512 acc[G][R];
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) acc[g][r] = _mm512_setzero_ps();
  const int64_t cols = w.cols;
  const float* xr = x + r0 * cols;
  for (int64_t k = 0; k < cols; ++k) {
    __m512 wk[G];
    for (int g = 0; g < G; ++g) wk[g] = load_values<VK>(w.panel(p0 + g), k * kPanelRows);
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_set1_ps(xr[r * cols + k]);
      for (int g = 0; g < G; ++g) acc[g][r] = _mm512_fmadd_ps(wk[g], xv, acc[g][r]);
    }
  }
  store_rows<G, R>(w, p0, r0, out, acc);
}

/// The block's 16 scales (which 0: d, 1: m) as f32.
template <bool kF16>
inline __m512 load_scales(const std::byte* s, int which) {
  if constexpr (kF16)
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + which * 32)));
  return _mm512_loadu_ps(reinterpret_cast<const float*>(s + which * 64));
}

/// Integer dot products of one block: isum[r] += sum over the block's 32 elements of u * qx
/// (kSplit: elements 0..15 into isum, 16..31 into isum_hi). S8 codes are biased to u + 128
/// (vpdpbusd multiplies unsigned by signed bytes); the caller subtracts 128 * the codes' sum.
template <Kind CK, bool kSplit, int R>
inline void block_dots(const std::byte* blk, const int8_t* const* q, __m512i* isum,
                       __m512i* isum_hi) {
  const auto chunk = [&](int g) {
    return _mm512_loadu_si512(reinterpret_cast<const void*>(blk + g * 64));
  };
  if constexpr (CK == Kind::U4) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int c = 0; c < 4; ++c) {
      const __m512i v = chunk(c);
      const __m512i lo = _mm512_and_si512(v, low4),
                    hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      for (int r = 0; r < R; ++r) {
        isum[r] = _mm512_dpbusd_epi32(isum[r], lo, _mm512_set1_epi32(load_i32(q[r] + 4 * c)));
        isum[r] = _mm512_dpbusd_epi32(isum[r], hi, _mm512_set1_epi32(load_i32(q[r] + 16 + 4 * c)));
      }
    }
  } else {
    for (int g = 0; g < 8; ++g) {
      __m512i v = chunk(g);
      if constexpr (CK == Kind::S8)
        v = _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
      __m512i* into = kSplit && g >= 4 ? isum_hi : isum;
      for (int r = 0; r < R; ++r)
        into[r] = _mm512_dpbusd_epi32(into[r], v, _mm512_set1_epi32(load_i32(q[r] + 4 * g)));
    }
  }
}

template <Kind CK, bool kF16, Second kSecond, int R>
void int8_rows(const View& w, int64_t p, const Int8Rows& x, int64_t r0, const Out& out) {
  constexpr bool kSplit = kSecond == Second::Split;
  const int64_t nb = w.cols / kBlock, code_bytes = CK == Kind::U4 ? 256 : 512;
  const int32_t zero = CK == Kind::S8 ? 128 : w.zero;
  const std::byte* panel = w.panel(p);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = panel + b * w.block_bytes;
    const int8_t* q[R];
    __m512i isum[R], isum_hi[kSplit ? R : 1];
    for (int r = 0; r < R; ++r) {
      q[r] = x.qx + (r0 + r) * x.cols + b * kBlock;
      isum[r] = _mm512_setzero_si512();
      if constexpr (kSplit) isum_hi[r] = _mm512_setzero_si512();
    }
    block_dots<CK, kSplit, R>(blk, q, isum, isum_hi);
    const __m512 d = load_scales<kF16>(blk + code_bytes, 0);
    const __m512 m =
        kSecond != Second::None ? load_scales<kF16>(blk + code_bytes, 1) : _mm512_setzero_ps();
    for (int r = 0; r < R; ++r) {
      const int64_t at = (r0 + r) * nb + b;
      const __m512 dx = _mm512_set1_ps(x.dx[at]);
      if constexpr (kSplit) {  // Q6_K (z = 0): remove the bias of each half
        const __m512i lo = _mm512_sub_epi32(isum[r], _mm512_set1_epi32(zero * x.qsum_lo[at]));
        const __m512i hi =
            _mm512_sub_epi32(isum_hi[r], _mm512_set1_epi32(zero * (x.qsum[at] - x.qsum_lo[at])));
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(lo), acc[r]);
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(m, dx), _mm512_cvtepi32_ps(hi), acc[r]);
      } else {
        if (zero != 0) isum[r] = _mm512_sub_epi32(isum[r], _mm512_set1_epi32(zero * x.qsum[at]));
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(isum[r]), acc[r]);
        if constexpr (kSecond == Second::Min)
          acc[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(x.xs[at]), acc[r]);
      }
    }
  }
  const __mmask16 mask = row_mask(w, p);
  for (int r = 0; r < R; ++r) store_row(out, r0 + r, p, mask, acc[r]);
}

template <Kind CK, bool kF16, Second kSecond>
void int8_panel(const View& w, int64_t p0, int64_t p1, const Int8Rows& x, int64_t r0, int64_t r1,
                const Out& out) {
  for (int64_t p = p0; p < p1; ++p)
    for_row_passes<kMaxRowsInt8>(
        r0, r1, [&]<int R>(int64_t r) { int8_rows<CK, kF16, kSecond, R>(w, p, x, r, out); });
}

template <bool kSigned>
inline __m512 lane_byte(__m512i v, int t) {
  if constexpr (kSigned)
    return _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * t), 24));
  return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * t), _mm512_set1_epi32(0xFF)));
}

/// G code panels from p0 times R f32 x rows: each weight decoded in registers to exactly
/// dequantize_row's value, fma(d, float(u) - z, m), then the same FMA chain as a float panel's,
/// k in order.
template <Kind CK, bool kF16, Second kSecond, int G, int R>
void code_f32_rows(const View& w, int64_t p0, const float* x, int64_t r0, const Out& out) {
  constexpr int64_t kCodeBytes = CK == Kind::U4 ? 256 : 512;
  __m512 acc[G][R];
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) acc[g][r] = _mm512_setzero_ps();
  const int64_t cols = w.cols;
  const float* xr = x + r0 * cols;
  const __m512 zf = _mm512_set1_ps(static_cast<float>(w.zero));
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < cols / kBlock; ++b) {
    const std::byte* blk[G];
    __m512 d[G], m[G];
    for (int g = 0; g < G; ++g) {
      blk[g] = w.panel(p0 + g) + b * w.block_bytes;
      d[g] = load_scales<kF16>(blk[g] + kCodeBytes, 0);
      m[g] =
          kSecond != Second::None ? load_scales<kF16>(blk[g] + kCodeBytes, 1) : _mm512_setzero_ps();
    }
    // Element i of the block: U4 chunk (i % 16) / 4, byte i % 4, low nibble for i < 16; byte
    // codes chunk i / 4, byte i % 4.
    // Split scales (Q6_K): elements 16..31 take the second scale and no minimum.
    const auto step = [&](int64_t k, const __m512i(&v)[G], int t) {
      const bool second = kSecond == Second::Split && k % kBlock >= 16;
      __m512 wk[G];
      for (int g = 0; g < G; ++g) {
        const __m512 u = _mm512_sub_ps(lane_byte<CK == Kind::S8>(v[g], t), zf);
        if constexpr (kSecond == Second::Split) {
          wk[g] = _mm512_fmadd_ps(second ? m[g] : d[g], u, _mm512_setzero_ps());
        } else {
          wk[g] = _mm512_fmadd_ps(d[g], u, m[g]);
        }
      }
      for (int r = 0; r < R; ++r) {
        const __m512 xv = _mm512_set1_ps(xr[r * cols + k]);
        for (int g = 0; g < G; ++g) acc[g][r] = _mm512_fmadd_ps(wk[g], xv, acc[g][r]);
      }
    };
    if constexpr (CK == Kind::U4) {
      for (int half = 0; half < 2; ++half)
        for (int c = 0; c < 4; ++c) {
          __m512i v[G];
          for (int g = 0; g < G; ++g) {
            const __m512i raw = _mm512_loadu_si512(reinterpret_cast<const void*>(blk[g] + c * 64));
            v[g] = _mm512_and_si512(half == 0 ? raw : _mm512_srli_epi16(raw, 4), low4);
          }
          for (int t = 0; t < 4; ++t) step(b * kBlock + 16 * half + 4 * c + t, v, t);
        }
    } else {
      for (int c = 0; c < 8; ++c) {
        __m512i v[G];
        for (int g = 0; g < G; ++g)
          v[g] = _mm512_loadu_si512(reinterpret_cast<const void*>(blk[g] + c * 64));
        for (int t = 0; t < 4; ++t) step(b * kBlock + 4 * c + t, v, t);
      }
    }
  }
  store_rows<G, R>(w, p0, r0, out, acc);
}

/// The f32 kernel for panels of kind K: a float kind's values as stored, a code kind decoded.
template <Kind K, bool kF16, Second kSecond, int G, int R>
void any_f32_rows(const View& w, int64_t p0, const float* x, int64_t r0, const Out& out) {
  if constexpr (K == Kind::F32 || K == Kind::F16 || K == Kind::BF16) {
    f32_rows<K, G, R>(w, p0, x, r0, out);
  } else {
    code_f32_rows<K, kF16, kSecond, G, R>(w, p0, x, r0, out);
  }
}

/// x rows per pass for G panels: the accumulators (and, for codes, each panel's scales and
/// decoded weights) within the 32 registers.
template <Kind K, int G>
inline constexpr int kRowsFor = (K == Kind::F32 || K == Kind::F16 || K == Kind::BF16)
                                    ? (G == 1   ? 16
                                       : G == 2 ? 12
                                       : G == 3 ? 8
                                                : 6)
                                    : (G == 1   ? 8
                                       : G == 2 ? 6
                                       : G == 3 ? 4
                                                : 3);

/// Panels walked together for n x rows: float panels always kMaxGroup (6 rows a pass still fit);
/// code panels one at a time once a pass fills 8 rows (each weight decoded once per pass).
template <Kind K>
constexpr int64_t group_for(int64_t n) {
  return K == Kind::F32 || K == Kind::F16 || K == Kind::BF16 || n < 8 ? kMaxGroup : 1;
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

}  // namespace

void avx512_f32_panels(const View& w, int64_t p0, int64_t p1, const float* x, int64_t r0,
                       int64_t r1, const Out& out) {
  with_layout(w, [&]<Kind K, bool kF16, Second kSecond>() {
    f32_panels_of<K, kF16, kSecond>(w, p0, p1, x, r0, r1, out);
  });
}

void avx512_int8_panels(const View& w, int64_t p0, int64_t p1, const Int8Rows& x, int64_t r0,
                        int64_t r1, const Out& out) {
  with_code_layout(w, [&]<Kind CK, bool kF16, Second kSecond>() {
    int8_panel<CK, kF16, kSecond>(w, p0, p1, x, r0, r1, out);
  });
}

void avx512_quantize_rows(const float* x, int64_t r0, int64_t r1, int64_t cols, int8_t* qx,
                          float* dx, int32_t* qsum, int32_t* qsum_lo, float* xs) {
  const int64_t nb = cols / kBlock;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + r * cols + b * kBlock;
      const __m512 a = _mm512_loadu_ps(xb), c = _mm512_loadu_ps(xb + 16);
      const float amax = _mm512_reduce_max_ps(
          _mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(c)));  // exact in any order
      const float d = amax / 127.0f;
      const float inv = d > 0.0f ? 1.0f / d : 0.0f;
      // cvtps2dq rounds to nearest even (MXCSR's default), as std::nearbyint does.
      const __m512i ia = _mm512_cvtps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(inv)));
      const __m512i ic = _mm512_cvtps_epi32(_mm512_mul_ps(c, _mm512_set1_ps(inv)));
      int8_t* out = qx + r * cols + b * kBlock;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtsepi32_epi8(ia));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), _mm512_cvtsepi32_epi8(ic));
      const int32_t sum_lo = _mm512_reduce_add_epi32(ia),
                    sum = sum_lo + _mm512_reduce_add_epi32(ic);
      qsum_lo[r * nb + b] = sum_lo;
      dx[r * nb + b] = d;
      qsum[r * nb + b] = sum;
      xs[r * nb + b] = d * static_cast<float>(sum);
    }
}

}  // namespace lio::cpu::packed
