// bench_matmul — the CPU matmul kernel (kernels/cpu/matmul.cpp) on SmolLM2's MLP shapes:
// f32 vs int8 activations, for 1 .. 128 rows (one decode row, decode batches, a prefill chunk).
// Google Benchmark; reports GFLOP/s (2 * rows * out * in per call) and the weight bandwidth.
// Weights are Q4_1 / Q8_0 blocks quantized from N(0, 1) values (not zeros: see STYLE.md).
//   build/bin/bench_matmul --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "cpu_ops.h"
#include "lio/dtype.h"

namespace {

struct Matrix {
  std::vector<std::byte> bytes;
  lio::WeightMatrix w;
};

Matrix make(lio::DType dtype, int64_t rows, int64_t cols) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(cols));
  Matrix m;
  const int64_t rb = lio::dtype_row_bytes(dtype, cols);
  m.bytes.resize(static_cast<size_t>(rows * rb));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = dist(rng);
    lio::quantize_row(dtype, row.data(), m.bytes.data() + r * rb, cols);
  }
  m.w = lio::WeightMatrix{"w", dtype, rows, cols, rb, m.bytes.data()};
  return m;
}

void BM_Matmul(benchmark::State& state, lio::DType dtype, lio::cpu::MatmulActivations act) {
  const int64_t n = state.range(0), rows = 1536, cols = 576;  // ffn_up / ffn_gate of SmolLM2
  static const Matrix q41 = make(lio::DType::Q4_1, rows, cols);
  static const Matrix q80 = make(lio::DType::Q8_0, rows, cols);
  const Matrix& m = dtype == lio::DType::Q4_1 ? q41 : q80;
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * cols)), y(static_cast<size_t>(n * rows));
  for (float& v : x) v = dist(rng);
  for (auto _ : state) {
    lio::cpu::matmul(m.w, x.data(), y.data(), n, false, act);
    benchmark::DoNotOptimize(y.data());
  }
  const double flops = 2.0 * static_cast<double>(n * rows * cols);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight_GB/s"] =
      benchmark::Counter(static_cast<double>(m.w.size_bytes()) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

constexpr auto kF32 = lio::cpu::MatmulActivations::F32;
constexpr auto kInt8 = lio::cpu::MatmulActivations::Int8;
BENCHMARK_CAPTURE(BM_Matmul, q4_1_f32act, lio::DType::Q4_1, kF32)->RangeMultiplier(2)->Range(1, 128);
BENCHMARK_CAPTURE(BM_Matmul, q4_1_int8act, lio::DType::Q4_1, kInt8)->RangeMultiplier(2)->Range(1, 128);
BENCHMARK_CAPTURE(BM_Matmul, q8_0_f32act, lio::DType::Q8_0, kF32)->RangeMultiplier(2)->Range(1, 128);
BENCHMARK_CAPTURE(BM_Matmul, q8_0_int8act, lio::DType::Q8_0, kInt8)->RangeMultiplier(2)->Range(1, 128);

}  // namespace

BENCHMARK_MAIN();
