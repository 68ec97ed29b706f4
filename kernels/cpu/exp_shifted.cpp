// exp_shifted.cpp — x_j = exp(x_j - shift) over a span, vectorized: the exponentials of the
// online softmax (chapter 07's Task 2 calls it; see flash_attention.h). Cephes-style: exp(x) =
// 2^n e^r with n = round(x log2 e), r = x - n ln 2 (ln 2 split in two so n ln 2 is exact), e^r
// by a degree-6 polynomial (the Cephes expf coefficients), 2^n through the exponent bits. The
// AVX2 lanes and the scalar tail run the same operations in the same order, so an element's
// value never depends on where it sits in the span.
#include <algorithm>
#include <cmath>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LIO_EXP_AVX2 1
#endif

#include "flash_attention.h"

namespace lio::cpu {
namespace {

// ---- exp: Cephes-style range reduction + polynomial, vector and scalar twins ------------------
constexpr float kExpHi = 88.3762626647949f;   // 2^127.5: the largest n with a finite 2^n
constexpr float kExpLo = -87.3365447504f;     // below: the result underflows to 0 (returned as 0)
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;        // ln 2 split in two so n ln2 is exact
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

/// exp(x) by the same operations, in the same order, as the AVX2 lanes below.
inline float exp_scalar(float x) {
  if (x < kExpLo) return 0.0f;
  x = std::min(x, kExpHi);
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  float p = std::fma(kP0, r, kP1);
  p = std::fma(p, r, kP2);
  p = std::fma(p, r, kP3);
  p = std::fma(p, r, kP4);
  p = std::fma(p, r, kP5);
  p = std::fma(p, r * r, r + 1.0f);
  return std::ldexp(p, static_cast<int>(n));
}

#ifdef LIO_EXP_AVX2
inline __m256 exp_avx2(__m256 x) {
  const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(kExpLo), _CMP_LT_OQ);
  x = _mm256_min_ps(x, _mm256_set1_ps(kExpHi));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Hi), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Lo), r);
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(kP0), r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n through the exponent bits (n in [-126, 127] after the clamps; -127 only when underflow).
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}
#endif

}  // namespace

void exp_shifted(std::span<float> x, float shift) {
  float* p = x.data();
  const auto n = static_cast<int64_t>(x.size());
  int64_t j = 0;
#ifdef LIO_EXP_AVX2
  const __m256 vs = _mm256_set1_ps(shift);
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(p + j, exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(p + j), vs)));
#endif
  for (; j < n; ++j) p[j] = exp_scalar(p[j] - shift);
}

}  // namespace lio::cpu
