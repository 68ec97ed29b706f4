// packed_kernels_simd.h — internal: the packed matmul's SIMD kernels, written once over an
// instruction set. packed_kernels_avx2.cpp and packed_kernels_avx512.cpp each define an ISA
// traits struct (the vector types, width, loads, FMA, integer dot product, store) in an
// anonymous namespace and instantiate these templates with it under their own target flags.
//
// Why templates over a traits type: every function here depends on `Isa`, and each file's
// `Isa` has internal linkage, so every instantiation does too. The linker therefore never
// merges an AVX-512 copy of a function with the AVX2 one (the hazard packed_kernels.h
// describes): nothing in this header may be a non-template or an Isa-independent template
// that emits code.
//
// A panel is 16 weight rows (kPanelRows); a register holds Isa::kLanes of them, so a panel is
// kHalves = 16 / kLanes halves (AVX2: two 8-lane halves, rows 8h .. 8h + 7; AVX-512: one).
// Lane j of half h is weight row kLanes * h + j: no horizontal sum, so each output element
// gets exactly its scalar twin's operations (packed_matmul.cpp), in the same order.
//
// What an Isa provides (all static; F holds kLanes f32, I holds kLanes int32 = 4 bytes each):
//   kLanes, kMaxRowsInt8 (x rows a pass of the int8 kernel), kInt16Dots (4-bit, 5-bit and
//   Q6_K codes: a block's or half block's products summed as int16 by dot_i16<kSigned> /
//   add_i16, then widen_add into the int32 sums; else dot4 per 4 bytes), kBiasSignedCodes (S8 codes
//   are read as u + 128, vpdpbusd's unsigned operand, and the bias removed afterwards; else
//   the sign moves onto x), rows_for(float_kind, G) (x rows a pass of the f32 kernel over G
//   panels), group_for(float_kind, n) (panels walked together for n x rows);
//   zero, zero_i, set1, broadcast(const float*), fma(a, b, c) = a * b + c, mul, sub, to_float,
//   set1_i32, sub_i32; load_bytes (kLanes * 4 bytes), low_nibbles / high_nibbles (each byte's
//   4-bit halves); prepare_codes<kSigned>, dot4<kSigned>(isum, w, x) (isum += each lane's
//   four u8 w times s8 x products); lane_byte<kSigned>(v, t) (byte t of each lane as f32);
//   load_values<VK>(values, index) (kLanes float-panel values as f32, exact);
//   load_scales<kF16>(s) (kLanes scales as f32); store(w, out, r, p, h, acc) (y (+)= acc for
//   half h's real rows); amax(xb) (max |x| of a 32-element block, exact in any order);
//   round_block(xb, inv, q) (q = nearest-even(x * inv) as int8; returns the two 16-element
//   sums).
#pragma once

#include <cstdint>
#include <cstring>

#include "packed_kernels.h"

// Every loop over accumulators (panels g, halves h, x rows r: compile-time counts) is unrolled
// outright so the accumulator arrays become registers. Without it GCC 12 kept f32_rows' 12
// accumulators in a stack array, storing (and reloading) each one every k: the AVX2 f32
// kernel ran at ~30% of the FMA peak (perf annotate of bench_matmul, issue 64).
#define LIO_UNROLL _Pragma("GCC unroll 64")

namespace lio::cpu::packed::simd {

/// True for the float kinds (values stored as F32 / F16 / BF16), false for code kinds.
template <Kind K>
inline constexpr bool kFloatKind = K == Kind::F32 || K == Kind::F16 || K == Kind::BF16;

/// Halves (registers) per 16-row panel.
template <class Isa>
inline constexpr int kHalves = static_cast<int>(kPanelRows) / Isa::kLanes;

/// Four bytes of x as one int32 (broadcast as one dot4 operand).
template <class Isa>
inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

/// Half h's kLanes scales (which 0: d, 1: m) of a code block's scale record `s` (16 d, then
/// 16 m; f16 or f32 each).
template <class Isa, bool kF16>
inline typename Isa::F load_scales(const std::byte* s, int which, int h) {
  constexpr int kBytes = kF16 ? 2 : 4;
  return Isa::template load_scales<kF16>(s + (which * kPanelRows + h * Isa::kLanes) * kBytes);
}

/// Half h of chunk c (64 bytes: 4 code bytes per row) of a code block record.
template <class Isa>
inline typename Isa::I load_chunk(const std::byte* blk, int c, int h) {
  return Isa::load_bytes(blk + c * 64 + 4 * Isa::kLanes * h);
}

// ---- f32 activations -----------------------------------------------------------------------

/// G float panels from p0 times R x rows: G x kHalves x R accumulators, one FMA chain per output
/// element, k in order.
template <class Isa, Kind VK, int G, int R>
void f32_rows(const View& w, int64_t p0, const float* x, int64_t r0, const Out& out) {
  using F = typename Isa::F;
  constexpr int H = kHalves<Isa>;
  F acc[G][H][R];
  LIO_UNROLL for (int g = 0; g < G; ++g)
    LIO_UNROLL for (int h = 0; h < H; ++h)
      LIO_UNROLL for (int r = 0; r < R; ++r) acc[g][h][r] = Isa::zero();
  const int64_t cols = w.cols;
  const float* xr = x + r0 * cols;
  for (int64_t k = 0; k < cols; ++k) {
    LIO_UNROLL for (int g = 0; g < G; ++g) {
      const std::byte* values = w.panel(p0 + g);
      F wk[H];
      LIO_UNROLL for (int h = 0; h < H; ++h)
        wk[h] = Isa::template load_values<VK>(values, k * kPanelRows + Isa::kLanes * h);
      LIO_UNROLL for (int r = 0; r < R; ++r) {
        const F xv = Isa::broadcast(xr + r * cols + k);
        LIO_UNROLL for (int h = 0; h < H; ++h) acc[g][h][r] = Isa::fma(wk[h], xv, acc[g][h][r]);
      }
    }
  }
  LIO_UNROLL for (int g = 0; g < G; ++g)
    LIO_UNROLL for (int h = 0; h < H; ++h) {
      if (h > 0 && w.rows - (p0 + g) * kPanelRows <= Isa::kLanes * h) continue;  // padding only
      LIO_UNROLL for (int r = 0; r < R; ++r) Isa::store(w, out, r0 + r, p0 + g, h, acc[g][h][r]);
    }
}

/// Half h of G code panels from p0 times R f32 x rows: each weight decoded in registers to
/// exactly dequantize_row's value, fma(d, float(u) - z, m), then the same FMA chain as a float
/// panel's, k in order.
template <class Isa, Kind CK, bool kF16, Second kSecond, int G, int R>
void code_f32_rows(const View& w, int64_t p0, int h, const float* x, int64_t r0, const Out& out) {
  using F = typename Isa::F;
  using I = typename Isa::I;
  constexpr int64_t kCodeBytes = CK == Kind::U4 ? 256 : 512;
  F acc[G][R];
  LIO_UNROLL for (int g = 0; g < G; ++g)
    LIO_UNROLL for (int r = 0; r < R; ++r) acc[g][r] = Isa::zero();
  const int64_t cols = w.cols;
  const float* xr = x + r0 * cols;
  const F zf = Isa::set1(static_cast<float>(w.zero));
  for (int64_t b = 0; b < cols / kBlock; ++b) {
    const std::byte* blk[G];
    F d[G], m[G];
    LIO_UNROLL for (int g = 0; g < G; ++g) {
      blk[g] = w.panel(p0 + g) + b * w.block_bytes;
      d[g] = load_scales<Isa, kF16>(blk[g] + kCodeBytes, 0, h);
      m[g] =
          kSecond != Second::None ? load_scales<Isa, kF16>(blk[g] + kCodeBytes, 1, h) : Isa::zero();
    }
    // Element i of the block: U4 chunk (i % 16) / 4, byte i % 4, low nibble for i < 16; byte
    // codes chunk i / 4, byte i % 4.
    // Split scales (Q6_K): elements 16..31 take the second scale and no minimum.
    const auto step = [&](int64_t k, const I(&v)[G], int t) {
      const bool second = kSecond == Second::Split && k % kBlock >= 16;
      F wk[G];
      LIO_UNROLL for (int g = 0; g < G; ++g) {
        const F u = Isa::sub(Isa::template lane_byte<CK == Kind::S8>(v[g], t), zf);
        if constexpr (kSecond == Second::Split) {
          wk[g] = Isa::fma(second ? m[g] : d[g], u, Isa::zero());
        } else {
          wk[g] = Isa::fma(d[g], u, m[g]);
        }
      }
      LIO_UNROLL for (int r = 0; r < R; ++r) {
        const F xv = Isa::broadcast(xr + r * cols + k);
        LIO_UNROLL for (int g = 0; g < G; ++g) acc[g][r] = Isa::fma(wk[g], xv, acc[g][r]);
      }
    };
    if constexpr (CK == Kind::U4) {
      for (int half = 0; half < 2; ++half)
        for (int c = 0; c < 4; ++c) {
          I v[G];
          LIO_UNROLL for (int g = 0; g < G; ++g) {
            const I raw = load_chunk<Isa>(blk[g], c, h);
            v[g] = half == 0 ? Isa::low_nibbles(raw) : Isa::high_nibbles(raw);
          }
          for (int t = 0; t < 4; ++t) step(b * kBlock + 16 * half + 4 * c + t, v, t);
        }
    } else {
      for (int c = 0; c < 8; ++c) {
        I v[G];
        LIO_UNROLL for (int g = 0; g < G; ++g) v[g] = load_chunk<Isa>(blk[g], c, h);
        for (int t = 0; t < 4; ++t) step(b * kBlock + 4 * c + t, v, t);
      }
    }
  }
  LIO_UNROLL for (int g = 0; g < G; ++g)
    LIO_UNROLL for (int r = 0; r < R; ++r) Isa::store(w, out, r0 + r, p0 + g, h, acc[g][r]);
}

/// The f32 kernel for G panels of kind K: a float kind's values as stored, a code kind decoded
/// (half by half; the store skips padding rows).
template <class Isa, Kind K, bool kF16, Second kSecond, int G, int R>
void any_f32_rows(const View& w, int64_t p0, const float* x, int64_t r0, const Out& out) {
  if constexpr (kFloatKind<K>) {
    f32_rows<Isa, K, G, R>(w, p0, x, r0, out);
  } else {
    LIO_UNROLL for (int h = 0; h < kHalves<Isa>; ++h)
      code_f32_rows<Isa, K, kF16, kSecond, G, R>(w, p0, h, x, r0, out);
  }
}

/// The f32 kernel on panels [p0, p1) of kind K, Isa::group_for(rows) at a time, each group in
/// passes of Isa::rows_for(G) x rows.
template <class Isa, Kind K, bool kF16, Second kSecond>
void f32_panels_of(const View& w, int64_t p0, int64_t p1, const float* x, int64_t r0, int64_t r1,
                   const Out& out) {
  const int64_t group = Isa::group_for(kFloatKind<K>, r1 - r0);
  for (int64_t p = p0; p < p1; p += group)
    with_count<kMaxGroup>(p1 - p < group ? p1 - p : group, [&]<int G>() {
      for_row_passes<Isa::rows_for(kFloatKind<K>, G)>(r0, r1, [&]<int R>(int64_t r) {
        any_f32_rows<Isa, K, kF16, kSecond, G, R>(w, p, x, r, out);
      });
    });
}

/// Entry point: f32 x rows [r0, r1) times panels [p0, p1) of any kind (packed_kernels.h,
/// f32_panels).
template <class Isa>
void f32_panels(const View& w, int64_t p0, int64_t p1, const float* x, int64_t r0, int64_t r1,
                const Out& out) {
  with_layout(w, [&]<Kind K, bool kF16, Second kSecond>() {
    f32_panels_of<Isa, K, kF16, kSecond>(w, p0, p1, x, r0, r1, out);
  });
}

// ---- int8 activations ----------------------------------------------------------------------

/// Integer dot products of half h of one block: isum[r] += sum over the block's 32 elements of
/// u * qx (kSplit: elements 0..15 into isum, 16..31 into isum_hi). With Isa::kBiasSignedCodes
/// S8 codes are biased to u + 128 and the caller subtracts 128 * the codes' sum.
template <class Isa, Kind CK, bool kSplit, int R>
inline void block_dots(const std::byte* blk, int h, const int8_t* const* q, typename Isa::I* isum,
                       typename Isa::I* isum_hi) {
  using I = typename Isa::I;
  constexpr bool kSigned = CK == Kind::S8;
  if constexpr (CK == Kind::U4 && Isa::kInt16Dots) {  // the block's products summed in int16 first
    I s16[R];
    for (int c = 0; c < 4; ++c) {
      const I v = load_chunk<Isa>(blk, c, h);
      const I lo = Isa::low_nibbles(v), hi = Isa::high_nibbles(v);
      LIO_UNROLL for (int r = 0; r < R; ++r) {
        const I p = Isa::add_i16(Isa::dot_i16(lo, Isa::set1_i32(load_i32<Isa>(q[r] + 4 * c))),
                                 Isa::dot_i16(hi, Isa::set1_i32(load_i32<Isa>(q[r] + 16 + 4 * c))));
        s16[r] = c == 0 ? p : Isa::add_i16(s16[r], p);
      }
    }
    LIO_UNROLL for (int r = 0; r < R; ++r) isum[r] = Isa::widen_add(isum[r], s16[r]);
  } else if constexpr (CK == Kind::U4) {
    for (int c = 0; c < 4; ++c) {
      const I v = load_chunk<Isa>(blk, c, h);
      const I lo = Isa::low_nibbles(v), hi = Isa::high_nibbles(v);
      LIO_UNROLL for (int r = 0; r < R; ++r) {
        isum[r] =
            Isa::template dot4<false>(isum[r], lo, Isa::set1_i32(load_i32<Isa>(q[r] + 4 * c)));
        isum[r] =
            Isa::template dot4<false>(isum[r], hi, Isa::set1_i32(load_i32<Isa>(q[r] + 16 + 4 * c)));
      }
    }
  } else if constexpr (Isa::kInt16Dots && (CK == Kind::U8 || kSplit)) {
    // 5-bit codes (Q5_0 / Q5_1) and Q6_K's: each half block's 4 chunks summed in int16 first.
    for (int half = 0; half < 2; ++half) {
      I s16[R];
      for (int g = 4 * half; g < 4 * half + 4; ++g) {
        const I v = load_chunk<Isa>(blk, g, h);
        LIO_UNROLL for (int r = 0; r < R; ++r) {
          const I p = Isa::template dot_i16<kSigned>(v, Isa::set1_i32(load_i32<Isa>(q[r] + 4 * g)));
          s16[r] = g == 4 * half ? p : Isa::add_i16(s16[r], p);
        }
      }
      I* into = kSplit && half == 1 ? isum_hi : isum;  // split: elements 16..31 apart
      LIO_UNROLL for (int r = 0; r < R; ++r) into[r] = Isa::widen_add(into[r], s16[r]);
    }
  } else {
    for (int g = 0; g < 8; ++g) {
      const I v = Isa::template prepare_codes<kSigned>(load_chunk<Isa>(blk, g, h));
      I* into = kSplit && g >= 4 ? isum_hi : isum;  // split: elements 16..31 apart
      LIO_UNROLL for (int r = 0; r < R; ++r)
        into[r] =
            Isa::template dot4<kSigned>(into[r], v, Isa::set1_i32(load_i32<Isa>(q[r] + 4 * g)));
    }
  }
}

/// How far ahead of its reads a kernel asks for weight bytes (kPrefetchAhead bytes, a few 4 KiB
/// pages): the hardware prefetchers stop at every page boundary and a small matrix is read
/// cold from DRAM in a decode step, so each block's record asks for the record that far on
/// (past the thread's panels at their end: a prefetch never faults).
inline constexpr int64_t kPrefetchAhead = 4096;
template <class = void>
inline void prefetch_ahead(const std::byte* blk, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64)
    __builtin_prefetch(reinterpret_cast<const char*>(blk) + kPrefetchAhead + o, 0, 3);
}

/// Half h of code panel p times R int8 x rows from r0 (packed_kernels.h, int8_panels).
template <class Isa, Kind CK, bool kF16, Second kSecond, int R>
void int8_rows(const View& w, int64_t p, int h, const Int8Rows& x, int64_t r0, const Out& out) {
  using F = typename Isa::F;
  using I = typename Isa::I;
  constexpr bool kSplit = kSecond == Second::Split;
  const int64_t nb = w.cols / kBlock, code_bytes = CK == Kind::U4 ? 256 : 512;
  const int32_t zero = CK == Kind::S8 && Isa::kBiasSignedCodes ? 128 : w.zero;
  const std::byte* panel = w.panel(p);
  F acc[R];
  LIO_UNROLL for (int r = 0; r < R; ++r) acc[r] = Isa::zero();
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = panel + b * w.block_bytes;
    if (h == 0) prefetch_ahead(blk, w.block_bytes);
    const int8_t* q[R];
    I isum[R], isum_hi[kSplit ? R : 1];
    LIO_UNROLL for (int r = 0; r < R; ++r) {
      q[r] = x.qx + (r0 + r) * x.cols + b * kBlock;
      isum[r] = Isa::zero_i();
      if constexpr (kSplit) isum_hi[r] = Isa::zero_i();
    }
    block_dots<Isa, CK, kSplit, R>(blk, h, q, isum, isum_hi);
    const F d = load_scales<Isa, kF16>(blk + code_bytes, 0, h);
    const F m =
        kSecond != Second::None ? load_scales<Isa, kF16>(blk + code_bytes, 1, h) : Isa::zero();
    LIO_UNROLL for (int r = 0; r < R; ++r) {
      const int64_t at = (r0 + r) * nb + b;
      const F dx = Isa::set1(x.dx[at]);
      if constexpr (kSplit) {  // Q6_K (z = 0): each half at its own scale, any bias removed
        I lo = isum[r], hi = isum_hi[r];
        if (zero != 0) {
          lo = Isa::sub_i32(lo, Isa::set1_i32(zero * x.qsum_lo[at]));
          hi = Isa::sub_i32(hi, Isa::set1_i32(zero * (x.qsum[at] - x.qsum_lo[at])));
        }
        acc[r] = Isa::fma(Isa::mul(d, dx), Isa::to_float(lo), acc[r]);
        acc[r] = Isa::fma(Isa::mul(m, dx), Isa::to_float(hi), acc[r]);
      } else {
        if (zero != 0) isum[r] = Isa::sub_i32(isum[r], Isa::set1_i32(zero * x.qsum[at]));
        acc[r] = Isa::fma(Isa::mul(d, dx), Isa::to_float(isum[r]), acc[r]);
        if constexpr (kSecond == Second::Min) acc[r] = Isa::fma(m, Isa::set1(x.xs[at]), acc[r]);
      }
    }
  }
  LIO_UNROLL for (int r = 0; r < R; ++r) Isa::store(w, out, r0 + r, p, h, acc[r]);
}

/// Entry point: int8 x rows [r0, r1) times code panels [p0, p1) (packed_kernels.h,
/// int8_panels), half by half (halves of padding rows only skipped), Isa::kMaxRowsInt8 rows a
/// pass.
template <class Isa>
void int8_panels(const View& w, int64_t p0, int64_t p1, const Int8Rows& x, int64_t r0, int64_t r1,
                 const Out& out) {
  with_code_layout(w, [&]<Kind CK, bool kF16, Second kSecond>() {
    for (int64_t p = p0; p < p1; ++p)
      LIO_UNROLL for (int h = 0; h < kHalves<Isa>; ++h) {
        if (h > 0 && w.rows - p * kPanelRows <= Isa::kLanes * h) break;  // padding only
        for_row_passes<Isa::kMaxRowsInt8>(r0, r1, [&]<int R>(int64_t r) {
          int8_rows<Isa, CK, kF16, kSecond, R>(w, p, h, x, r, out);
        });
      }
  });
}

/// Entry point: x rows [r0, r1) rounded to int8 per 32-element block (packed_kernels.h,
/// quantize_rows).
template <class Isa>
void quantize_rows(const float* x, int64_t r0, int64_t r1, int64_t cols, int8_t* qx, float* dx,
                   int32_t* qsum, int32_t* qsum_lo, float* xs) {
  const int64_t nb = cols / kBlock;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + r * cols + b * kBlock;
      const float d = Isa::amax(xb) / 127.0f;
      const float inv = d > 0.0f ? 1.0f / d : 0.0f;
      const auto [sum_lo, sum_hi] = Isa::round_block(xb, inv, qx + r * cols + b * kBlock);
      const int32_t sum = sum_lo + sum_hi;
      qsum_lo[r * nb + b] = sum_lo;
      dx[r * nb + b] = d;
      qsum[r * nb + b] = sum;
      xs[r * nb + b] = d * static_cast<float>(sum);
    }
}

}  // namespace lio::cpu::packed::simd
