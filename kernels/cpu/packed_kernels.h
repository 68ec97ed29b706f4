// packed_kernels.h — internal: the per-ISA micro-kernels behind packed_matmul.h.
//
// Each instruction set has its own translation unit (packed_kernels_avx2.cpp,
// packed_kernels_avx512.cpp, compiled with that ISA's flags; packed_matmul.cpp holds the
// scalar twins), so a machine runs the best one it has whatever -march the library was built
// with. The kernels are written once, in packed_kernels_simd.h, as templates over an ISA traits
// struct that each of those files defines in an anonymous namespace: every instantiation then
// has internal linkage, so no function compiled under one ISA's flags is shared with another
// (the linker keeps one copy of an inline function with external linkage, and an AVX-512 copy
// would fault on an AVX2 machine). Besides those, these files use only plain pointers and
// intrinsics.
//
// Every kernel computes, for each output element (weight row j, x row r), exactly the sequence
// of IEEE operations its scalar twin in packed_matmul.cpp writes down (lane = weight row, so no
// horizontal sum reorders anything): the three ISAs give bitwise identical results, and so does
// a row alone or in any batch.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lio::cpu::packed {

/// Weight rows per panel: one AVX-512 register of f32 or int32 lanes, two AVX2 registers.
inline constexpr int64_t kPanelRows = 16;
/// Elements per quantized block (every packed quantized dtype's block is 32 wide).
inline constexpr int64_t kBlock = 32;

/// What a panel stores. Float kinds: k-major, each k holding the panel's 16 rows' values
/// (F32 4 bytes, F16 / BF16 2 bytes). Code kinds: per 32-element block, the codes in the
/// dot-product layout (see packed_matmul.cpp, "Layout"), then 16 scales d, then 16 minimums m
/// when the dtype has them.
enum class Kind : int { F32, F16, BF16, U4, U8, S8 };

/// A packed matrix as the kernels read it (no ownership).
struct View {
  Kind kind = Kind::F32;
  int64_t rows = 0;         ///< real weight rows (the last panel is padded with zeros)
  int64_t cols = 0;         ///< in_features
  int64_t n_panels = 0;     ///< ceil(rows / 16)
  int64_t panel_bytes = 0;  ///< bytes of one panel
  int64_t block_bytes = 0;  ///< code kinds: bytes of one (panel, block) record
  const std::byte* data = nullptr;
  bool scale_f16 = true;  ///< code kinds: d and m stored as f16 (else f32)
  bool has_min = false;   ///< code kinds: value = d * (u - z) + m; else m = 0
  /// Q6_K: elements 0..15 of a block take scale d, elements 16..31 a second scale d2 (stored
  /// where m would be; no minimum), and the int8 path sums each half apart.
  bool split_scales = false;
  int32_t zero = 0;  ///< code kinds: z (8 for Q4_0, 16 for Q5_0, 4 for Q3_0, else 0)
  /// First byte of panel p.
  const std::byte* panel(int64_t p) const { return data + p * panel_bytes; }
};

/// x rounded to int8 per 32-element block (ggml's Q8 activations): x[r][32b + i] ~ dx * qx.
/// All arrays are row-major with `cols` (qx) or `cols / 32` (the rest) per row.
struct Int8Rows {
  const int8_t* qx = nullptr;        ///< (n, cols) codes in [-127, 127]
  const float* dx = nullptr;         ///< (n, nb) each block's scale
  const int32_t* qsum = nullptr;     ///< (n, nb) each block's sum of codes
  const int32_t* qsum_lo = nullptr;  ///< (n, nb) the sum of each block's first 16 codes
  const float* xs = nullptr;         ///< (n, nb) dx * float(qsum): the minimum's multiplier
  int64_t cols = 0;
};

/// Panels the f32 kernels walk together (a decode row then still has this many independent FMA
/// chains in flight: one chain per output element, 4-cycle FMA latency, two FMA pipes).
inline constexpr int64_t kMaxGroup = 4;

/// What a code block's second 16 values are: nothing, minimums m, or (Q6_K) the scales of
/// elements 16..31.
enum class Second { None, Min, Split };

// ---- compile-time dispatch shared by the ISA files ---------------------------------------------
// Each ISA's kernels are templates over the layout (code kind, f16 scales, second values) and
// over counts (x rows per pass, panels per group); these turn run-time values into those
// template arguments. Instantiated with each file's own lambdas, so never shared across ISAs.

/// f.template operator()<N>() for n in [1, kMax].
template <int kMax, class F>
inline void with_count(int64_t n, F&& f) {
  if constexpr (kMax > 1) {
    if (n < kMax) return with_count<kMax - 1>(n, f);
  }
  f.template operator()<kMax>();
}

/// f.template operator()<R>(r) for passes of R = min(kMaxRows, rows left) x rows over [r0, r1).
template <int kMaxRows, class F>
inline void for_row_passes(int64_t r0, int64_t r1, F&& f) {
  for (int64_t r = r0; r < r1; r += kMaxRows)
    with_count<kMaxRows>(r1 - r < kMaxRows ? r1 - r : kMaxRows,
                         [&]<int R>() { f.template operator()<R>(r); });
}

/// f.template operator()<CK, kF16, kSecond>() for w's code layout (w.kind U4, U8 or S8).
template <class F>
inline void with_code_layout(const View& w, F&& f) {
  const auto scales = [&]<Kind CK>() {
    if constexpr (CK == Kind::S8) {
      if (w.split_scales) return f.template operator()<CK, false, Second::Split>();
    }
    if (w.scale_f16) {
      if (w.has_min) return f.template operator()<CK, true, Second::Min>();
      return f.template operator()<CK, true, Second::None>();
    }
    if (w.has_min) return f.template operator()<CK, false, Second::Min>();
    f.template operator()<CK, false, Second::None>();
  };
  if (w.kind == Kind::U4) return scales.template operator()<Kind::U4>();
  if (w.kind == Kind::U8) return scales.template operator()<Kind::U8>();
  scales.template operator()<Kind::S8>();
}

/// f.template operator()<K, kF16, kSecond>() for w's layout: a float kind as <K, true, None>, a
/// code kind as with_code_layout.
template <class F>
inline void with_layout(const View& w, F&& f) {
  if (w.kind == Kind::F32) return f.template operator()<Kind::F32, true, Second::None>();
  if (w.kind == Kind::F16) return f.template operator()<Kind::F16, true, Second::None>();
  if (w.kind == Kind::BF16) return f.template operator()<Kind::BF16, true, Second::None>();
  with_code_layout(w, f);
}

/// Output of a panel kernel: y[r * ld + j] for x rows r and weight rows j of the panel.
struct Out {
  float* y = nullptr;
  int64_t ld = 0;           ///< floats between consecutive x rows' outputs
  bool accumulate = false;  ///< y += result (else y = result)
};

// ---- one ISA's entry points (scalar_*, avx2_*, avx512_*) ---------------------------------------
// f32_panels: x rows [r0, r1) (f32, cols each) times panels [p0, p1), any kind; y for rows
//   j < w.rows. Per output element: acc = 0; acc = fma(W[j][k], x[k], acc) for k = 0 .. cols - 1,
//   W[j][k] the stored float, or for codes fma(d, float(u) - z, m) (exactly dequantize_row's
//   value).
// int8_panels: int8 x rows [r0, r1) times code panels [p0, p1). Per output element and block b:
//   isum = sum_i u_i qx_i - z qsum (exact); acc = fma(d * dx, float(isum), acc);
//   with a minimum: acc = fma(m, xs, acc). Split scales (Q6_K): isum_lo over elements 0..15 and
//   isum_hi over 16..31, acc = fma(d * dx, float(isum_lo), acc); acc = fma(d2 * dx, float(isum_hi),
//   acc).
// quantize_rows: x rows [r0, r1) (cols % 32 == 0) rounded per 32-element block: dx = max|x| / 127,
//   qx = nearest-even(x * (1 / dx)) (0 when dx = 0), qsum = sum qx, qsum_lo = the first 16's sum,
//   xs = dx * float(qsum).
// Every output: y = acc, or y = y + acc when out.accumulate.
void scalar_f32_panels(const View& w, int64_t p0, int64_t p1, const float* x, int64_t r0,
                       int64_t r1, const Out& out);
void scalar_int8_panels(const View& w, int64_t p0, int64_t p1, const Int8Rows& x, int64_t r0,
                        int64_t r1, const Out& out);
/// The reference decoding: code panel p's values W[j][k] as f32, k-major (values[k * 16 + j]).
void scalar_decode_panel(const View& w, int64_t p, float* values);
void scalar_quantize_rows(const float* x, int64_t r0, int64_t r1, int64_t cols, int8_t* qx,
                          float* dx, int32_t* qsum, int32_t* qsum_lo, float* xs);
#if defined(__x86_64__)
void avx2_f32_panels(const View& w, int64_t p0, int64_t p1, const float* x, int64_t r0, int64_t r1,
                     const Out& out);
void avx2_int8_panels(const View& w, int64_t p0, int64_t p1, const Int8Rows& x, int64_t r0,
                      int64_t r1, const Out& out);
void avx2_quantize_rows(const float* x, int64_t r0, int64_t r1, int64_t cols, int8_t* qx, float* dx,
                        int32_t* qsum, int32_t* qsum_lo, float* xs);
void avx512_f32_panels(const View& w, int64_t p0, int64_t p1, const float* x, int64_t r0,
                       int64_t r1, const Out& out);
void avx512_int8_panels(const View& w, int64_t p0, int64_t p1, const Int8Rows& x, int64_t r0,
                        int64_t r1, const Out& out);
void avx512_quantize_rows(const float* x, int64_t r0, int64_t r1, int64_t cols, int8_t* qx,
                          float* dx, int32_t* qsum, int32_t* qsum_lo, float* xs);
#endif

}  // namespace lio::cpu::packed
