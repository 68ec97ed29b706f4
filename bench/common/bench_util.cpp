#include "bench_util.h"

#include <immintrin.h>
#include <omp.h>

#include <cstdlib>
#include <memory>

namespace lio::bench {
namespace {
// Sums [begin, end) with 4 independent vector accumulators so the loop is load-bound.
float sum_range(const float* p, int64_t begin, int64_t end) {
#if defined(__AVX2__)
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = begin;
  for (; i + 32 <= end; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  float s = 0;
  for (float v : lanes) s += v;
  for (; i < end; ++i) s += p[i];
  return s;
#else
  float s = 0;
  for (int64_t i = begin; i < end; ++i) s += p[i];
  return s;
#endif
}
}  // namespace

double measure_read_bandwidth(int64_t buffer_bytes, int repeats) {
  const int64_t n = buffer_bytes / static_cast<int64_t>(sizeof(float)) / 64 * 64;
  std::unique_ptr<float[], decltype(&std::free)> buf(
      static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(n) * sizeof(float))), &std::free);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<float>(i & 1023);  // first touch per thread
  std::vector<double> rates;
  volatile float sink = 0;
  for (int r = 0; r < repeats + 1; ++r) {
    const double t0 = now_s();
    float total = 0;
#pragma omp parallel reduction(+ : total)
    {
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t chunk = (n / nt) / 64 * 64;
      const int64_t begin = t * chunk, end = t == nt - 1 ? n : begin + chunk;
      total += sum_range(buf.get(), begin, end);
    }
    const double dt = now_s() - t0;
    sink = sink + total;
    if (r > 0) rates.push_back(static_cast<double>(n) * sizeof(float) / dt);  // pass 0 warms up
  }
  (void)sink;
  return median(rates);
}

}  // namespace lio::bench
