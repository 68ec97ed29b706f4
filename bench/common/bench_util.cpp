#include "bench_util.h"

#include <immintrin.h>
#include "lio/omp_compat.h"

#include <cstdlib>
#include <memory>
#include <string>

#include "lio/error.h"
#include "packed_matmul.h"

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

// ---- the compute probe: 10 independent chains of each ISA's multiply-add, `iters` rounds ------
constexpr int kChains = 10;

__attribute__((target("avx2,fma"))) float fma_avx2(int64_t iters) {
  __m256 acc[kChains];
  const __m256 a = _mm256_set1_ps(1.0000001f), b = _mm256_set1_ps(1e-7f);
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c));
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  __m256 t = acc[0];
  for (int c = 1; c < kChains; ++c) t = _mm256_add_ps(t, acc[c]);
  return _mm256_cvtss_f32(t);
}

__attribute__((target("avx2,fma"))) int dot_avx2(int64_t iters) {
  __m256i acc[kChains];
  const __m256i w = _mm256_set1_epi8(3), x = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_epi32(c);
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c)
      acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones));
  __m256i t = acc[0];
  for (int c = 1; c < kChains; ++c) t = _mm256_add_epi32(t, acc[c]);
  return _mm256_cvtsi256_si32(t);
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) float fma_avx512(int64_t iters) {
  __m512 acc[kChains];
  const __m512 a = _mm512_set1_ps(1.0000001f), b = _mm512_set1_ps(1e-7f);
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  __m512 t = acc[0];
  for (int c = 1; c < kChains; ++c) t = _mm512_add_ps(t, acc[c]);
  return _mm512_reduce_add_ps(t);
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) int dot_avx512(int64_t iters) {
  __m512i acc[kChains];
  const __m512i w = _mm512_set1_epi8(3), x = _mm512_set1_epi8(-2);
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_epi32(c);
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], w, x);
  __m512i t = acc[0];
  for (int c = 1; c < kChains; ++c) t = _mm512_add_epi32(t, acc[c]);
  return _mm512_reduce_add_epi32(t);
}

/// Ops per second of `run(iters)` on every thread at once, `ops_per_iter` ops per thread per
/// round; median of `repeats` timed passes of about 20 ms after one warm-up pass.
template <class Run>
double peak_rate(Run run, double ops_per_iter, int repeats) {
  int64_t iters = 1 << 16;
  std::vector<double> rates;
  volatile double sink = 0;
  for (int r = 0; r < repeats + 1; ++r) {
    const double t0 = now_s();
    double total = 0;
#pragma omp parallel reduction(+ : total)
    total += static_cast<double>(run(iters));
    const double dt = now_s() - t0;
    sink = sink + total;
    if (r == 0) {  // warm-up: size the passes to ~20 ms
      iters = std::max<int64_t>(1 << 12, static_cast<int64_t>(static_cast<double>(iters) * 0.02 / std::max(dt, 1e-6)));
      continue;
    }
    rates.push_back(ops_per_iter * static_cast<double>(iters) * omp_get_max_threads() / dt);
  }
  (void)sink;
  return median(rates);
}

}  // namespace

ComputePeak measure_compute_peak(int repeats) {
  ComputePeak p;
#if defined(__x86_64__)
  // The instruction set the engine's packed kernels pick (cpuid, LIO_CPU_ISA honoured).
  const cpu::CpuIsa isa = cpu::default_cpu_isa();
  if (isa == cpu::CpuIsa::Avx512) {
    p.isa = "avx512";
    p.f32_gflops = peak_rate(fma_avx512, 2.0 * 16 * kChains, repeats) * 1e-9;
    p.int8_gops = peak_rate(dot_avx512, 2.0 * 64 * kChains, repeats) * 1e-9;
    return p;
  }
  if (isa == cpu::CpuIsa::Avx2) {
    p.isa = "avx2";
    p.f32_gflops = peak_rate(fma_avx2, 2.0 * 8 * kChains, repeats) * 1e-9;
    p.int8_gops = peak_rate(dot_avx2, 2.0 * 32 * kChains, repeats) * 1e-9;
    return p;
  }
#endif
  p.isa = "scalar";
  return p;
}

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
