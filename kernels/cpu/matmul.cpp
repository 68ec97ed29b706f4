// matmul.cpp — y = x W^T for every weight dtype LIO reads, on the CPU.
//
// Two paths, picked by the number of input rows n:
//   n == 1 (decode): a GEMV that streams each weight row once and dequantizes inside the
//     dot product (fused dequant-dot). Batch-1 decode is memory-bound: it must read every
//     weight byte per token, so the kernel's job is to keep the loads flowing.
//   n > 1 (prefill): tiles of kTileRows weight rows are dequantized to f32 once and
//     multiplied against all n rows with Eigen's GEMM, so the dequant cost is amortized
//     over n tokens and the arithmetic runs at GEMM speed (compute-bound).
// Both split the weight rows across OpenMP threads.
#include <immintrin.h>

#include <Eigen/Core>
#include <algorithm>
#include <string>
#include <vector>

#include "cpu_ops.h"
#include "lio/error.h"

namespace lio::cpu {
namespace {

constexpr int64_t kTileRows = 64;  // weight rows dequantized per GEMM tile (64 x 1536 f32 = 384 KiB max here)

// ---- fused dequant-dot: one weight row . x --------------------------------------------
// Each function is equivalent to: dequantize_row(dtype, row, tmp, n); return sum(tmp[i] * x[i]).
// x_block_sums[b] = sum of x over block b (precomputed once per GEMV; used by Q4_0/Q4_1).

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  return _mm_cvtss_f32(lo);
}
inline float half(uint16_t bits) { return _cvtsh_ss(bits); }

float dot_f32(const float* w, const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
         a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
  }
  float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) s += w[i] * x[i];
  return s;
}

// 16 packed nibble bytes -> the 32 quants as 4 x 8 floats, in element order.
inline void unpack_nibbles(const uint8_t* qs, __m256& q0, __m256& q1, __m256& q2, __m256& q3) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(bytes, mask);                     // elements 0..15
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);  // elements 16..31
  q0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
  q1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
  q2 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
  q3 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
}

inline __m256 dot_block_q4(const uint8_t* qs, const float* x) {
  __m256 q0, q1, q2, q3;
  unpack_nibbles(qs, q0, q1, q2, q3);
  __m256 acc = _mm256_mul_ps(q0, _mm256_loadu_ps(x));
  acc = _mm256_fmadd_ps(q1, _mm256_loadu_ps(x + 8), acc);
  acc = _mm256_fmadd_ps(q2, _mm256_loadu_ps(x + 16), acc);
  return _mm256_fmadd_ps(q3, _mm256_loadu_ps(x + 24), acc);
}

// Q4_1: sum_i (d q_i + m) x_i = d * sum_i q_i x_i + m * sum_i x_i.
float dot_q4_1(const std::byte* row, const float* x, const float* x_block_sums, int64_t n) {
  const auto* blocks = reinterpret_cast<const BlockQ4_1*>(row);
  __m256 acc = _mm256_setzero_ps();
  float acc_m = 0.0f;
  for (int64_t b = 0; b < n / kQuantBlockElems; ++b) {
    const __m256 s = dot_block_q4(blocks[b].qs, x + b * kQuantBlockElems);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half(blocks[b].d)), s, acc);
    acc_m += half(blocks[b].m) * x_block_sums[b];
  }
  return hsum(acc) + acc_m;
}

// Q4_0: sum_i d (q_i - 8) x_i = d * (sum_i q_i x_i - 8 sum_i x_i).
float dot_q4_0(const std::byte* row, const float* x, const float* x_block_sums, int64_t n) {
  const auto* blocks = reinterpret_cast<const BlockQ4_0*>(row);
  __m256 acc = _mm256_setzero_ps();
  float acc_off = 0.0f;
  for (int64_t b = 0; b < n / kQuantBlockElems; ++b) {
    const __m256 s = dot_block_q4(blocks[b].qs, x + b * kQuantBlockElems);
    const float d = half(blocks[b].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
    acc_off -= 8.0f * d * x_block_sums[b];
  }
  return hsum(acc) + acc_off;
}

float dot_q8_0(const std::byte* row, const float* x, int64_t n) {
  const auto* blocks = reinterpret_cast<const BlockQ8_0*>(row);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQuantBlockElems; ++b) {
    const float* xb = x + b * kQuantBlockElems;
    const __m256i q01 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blocks[b].qs)));
    const __m256i q02 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blocks[b].qs + 8)));
    const __m256i q03 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blocks[b].qs + 16)));
    const __m256i q04 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blocks[b].qs + 24)));
    __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(q01), _mm256_loadu_ps(xb));
    s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q02), _mm256_loadu_ps(xb + 8), s);
    s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q03), _mm256_loadu_ps(xb + 16), s);
    s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q04), _mm256_loadu_ps(xb + 24), s);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half(blocks[b].d)), s, acc);
  }
  return hsum(acc);
}

float dot_f16(const std::byte* row, const float* x, int64_t n) {
  const auto* h = reinterpret_cast<const uint16_t*>(row);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 w = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i)));
    acc = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + i), acc);
  }
  float s = hsum(acc);
  for (; i < n; ++i) s += f16_to_f32(h[i]) * x[i];
  return s;
}
#else
// Portable fallback: dequantize the row into a scratch buffer, then dot.
float dot_generic(DType dtype, const std::byte* row, const float* x, int64_t n) {
  thread_local std::vector<float> tmp;
  tmp.resize(static_cast<size_t>(n));
  dequantize_row(dtype, row, tmp.data(), n);
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += tmp[i] * x[i];
  return s;
}
#endif

float dot_row(const WeightMatrix& w, int64_t r, const float* x, const float* x_block_sums) {
  const std::byte* row = w.row(r);
  const int64_t n = w.cols;
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  switch (w.dtype) {
    case DType::F32: return dot_f32(reinterpret_cast<const float*>(row), x, n);
    case DType::Q4_1: return dot_q4_1(row, x, x_block_sums, n);
    case DType::Q4_0: return dot_q4_0(row, x, x_block_sums, n);
    case DType::Q8_0: return dot_q8_0(row, x, n);
    case DType::F16: return dot_f16(row, x, n);
    case DType::BF16: {
      thread_local std::vector<float> tmp;
      tmp.resize(static_cast<size_t>(n));
      dequantize_row(w.dtype, row, tmp.data(), n);
      return dot_f32(tmp.data(), x, n);
    }
  }
  return 0.0f;
#else
  (void)x_block_sums;
  return dot_generic(w.dtype, row, x, n);
#endif
}

void gemv(const WeightMatrix& w, const float* x, float* y) {
  // Per-block sums of x, shared by every row (the "+ m * sum(x)" term of Q4_1/Q4_0).
  thread_local std::vector<float> x_block_sums;
  const bool blocked = w.dtype == DType::Q4_0 || w.dtype == DType::Q4_1;
  if (blocked) {
    const int64_t n_blocks = w.cols / kQuantBlockElems;
    x_block_sums.resize(static_cast<size_t>(n_blocks));
    for (int64_t b = 0; b < n_blocks; ++b) {
      float s = 0.0f;
      for (int64_t i = 0; i < kQuantBlockElems; ++i) s += x[b * kQuantBlockElems + i];
      x_block_sums[static_cast<size_t>(b)] = s;
    }
  }
  const float* sums = blocked ? x_block_sums.data() : nullptr;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < w.rows; ++r) y[r] = dot_row(w, r, x, sums);
}

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void gemm(const WeightMatrix& w, const float* x, float* y, int64_t n) {
  const int64_t n_tiles = (w.rows + kTileRows - 1) / kTileRows;
  Eigen::Map<const RowMajor> X(x, n, w.cols);
  // Y is (n, rows) row-major; each tile writes a column block of it.
  Eigen::Map<RowMajor> Y(y, n, w.rows);
#pragma omp parallel
  {
    std::vector<float> tile;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < n_tiles; ++t) {
      const int64_t r0 = t * kTileRows;
      const int64_t nr = std::min(kTileRows, w.rows - r0);
      const float* wt;
      if (w.dtype == DType::F32) {
        wt = reinterpret_cast<const float*>(w.row(r0));
      } else {
        tile.resize(static_cast<size_t>(nr * w.cols));
        for (int64_t r = 0; r < nr; ++r)
          dequantize_row(w.dtype, w.row(r0 + r), tile.data() + r * w.cols, w.cols);
        wt = tile.data();
      }
      Eigen::Map<const RowMajor> W(wt, nr, w.cols);
      Y.middleCols(r0, nr).noalias() = X * W.transpose();
    }
  }
}

}  // namespace

void matmul(const WeightMatrix& w, const float* x, float* y, int64_t n) {
  if (w.data == nullptr || x == nullptr || y == nullptr || n <= 0) {
    throw InvalidArgument("matmul: null pointer or n <= 0 for weight '" + w.name + "'");
  }
  if (n == 1) {
    gemv(w, x, y);
  } else {
    gemm(w, x, y, n);
  }
}

}  // namespace lio::cpu
