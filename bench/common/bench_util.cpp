#include "bench_util.h"

#include <immintrin.h>
#include "lio/omp_compat.h"

#include <cstdlib>
#include <memory>
#include <string>

#include "lio/error.h"

namespace lio::bench {
namespace {
// Sums [begin, end) as `streams` sequential streams side by side (the range cut in `streams`
// equal parts), each with two independent vector accumulators so the loop is load-bound.
float sum_range(const float* p, int64_t begin, int64_t end, int streams) {
  const int64_t per = (end - begin) / streams / 32 * 32;
  float s = 0;
#if defined(__AVX2__)
  __m256 acc[32];
  for (int k = 0; k < 2 * streams; ++k) acc[k] = _mm256_setzero_ps();
  for (int64_t i = 0; i < per; i += 16) {
    for (int k = 0; k < streams; ++k) {
      const float* q = p + begin + k * per + i;
      acc[2 * k] = _mm256_add_ps(acc[2 * k], _mm256_load_ps(q));
      acc[2 * k + 1] = _mm256_add_ps(acc[2 * k + 1], _mm256_load_ps(q + 8));
    }
  }
  __m256 a = acc[0];
  for (int k = 1; k < 2 * streams; ++k) a = _mm256_add_ps(a, acc[k]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, a);
  for (float v : lanes) s += v;
#else
  for (int k = 0; k < streams; ++k)
    for (int64_t i = 0; i < per; ++i) s += p[begin + k * per + i];
#endif
  for (int64_t i = begin + streams * per; i < end; ++i) s += p[i];
  return s;
}
}  // namespace

double measure_read_bandwidth(int64_t buffer_bytes, int repeats, int streams) {
  if (streams < 1 || streams > 16) {
    throw InvalidArgument("read-bandwidth probe: streams must be in [1, 16], got " + std::to_string(streams));
  }
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
      total += sum_range(buf.get(), begin, end, streams);
    }
    const double dt = now_s() - t0;
    sink = sink + total;
    if (r > 0) rates.push_back(static_cast<double>(n) * sizeof(float) / dt);  // pass 0 warms up
  }
  (void)sink;
  return median(rates);
}

}  // namespace lio::bench
