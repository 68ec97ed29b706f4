// bench_matmul — the CPU engine's matmul (kernels/cpu/packed_matmul.h: weights packed once, as
// CpuBackend packs them at load) on SmolLM2's MLP shape, ffn_up (1536 x 576): Q4_1, Q8_0 and F32
// weights, f32 vs int8 activations, for 1 .. 128 rows (one decode row, decode batches, a
// prefill chunk), on each instruction set this CPU runs. Google Benchmark; reports GFLOP/s
// (2 * rows * out * in per call) and the weight bandwidth (packed bytes per call).
// Weights are quantized from N(0, 1) values (not zeros: see STYLE.md).
//   build/bin/bench_matmul --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "lio/dtype.h"
#include "packed_matmul.h"

namespace {

using lio::cpu::CpuIsa;
using lio::cpu::MatmulActivations;

constexpr int64_t kRows = 1536, kCols = 576;  // ffn_up / ffn_gate of SmolLM2

/// A (kRows, kCols) matrix of `dtype` from N(0, 1) values, packed.
std::unique_ptr<lio::cpu::PackedMatrix> make(lio::DType dtype) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(kCols));
  const int64_t rb = lio::dtype_row_bytes(dtype, kCols);
  std::vector<std::byte> bytes(static_cast<size_t>(kRows * rb));
  for (int64_t r = 0; r < kRows; ++r) {
    for (float& v : row) v = dist(rng);
    lio::quantize_row(dtype, row.data(), bytes.data() + r * rb, kCols);
  }
  return std::make_unique<lio::cpu::PackedMatrix>(
      lio::WeightMatrix{"w", dtype, kRows, kCols, rb, bytes.data()});
}

void BM_Matmul(benchmark::State& state, lio::DType dtype, MatmulActivations act, CpuIsa isa) {
  if (lio::cpu::detect_cpu_isa() < isa) {
    state.SkipWithError("this CPU lacks the instruction set");
    return;
  }
  const std::unique_ptr<lio::cpu::PackedMatrix> m = make(dtype);
  const int64_t n = state.range(0);
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * kCols)), y(static_cast<size_t>(n * kRows));
  for (float& v : x) v = dist(rng);
  lio::cpu::PackedScratch scratch;
  for (auto _ : state) {
    lio::cpu::packed_matmul(*m, x.data(), y.data(), n, false, act, isa, scratch);
    benchmark::DoNotOptimize(y.data());
  }
  const double flops = 2.0 * static_cast<double>(n * kRows * kCols);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight_GB/s"] = benchmark::Counter(static_cast<double>(m->size_bytes()) * 1e-9,
                                                     benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  struct Case {
    const char* name;
    lio::DType dtype;
    MatmulActivations act;
  };
  const Case cases[] = {{"q4_1_f32act", lio::DType::Q4_1, MatmulActivations::F32},
                        {"q4_1_int8act", lio::DType::Q4_1, MatmulActivations::Int8},
                        {"q8_0_int8act", lio::DType::Q8_0, MatmulActivations::Int8},
                        {"f32", lio::DType::F32, MatmulActivations::F32}};
  for (const CpuIsa isa : {CpuIsa::Avx512, CpuIsa::Avx2})
    for (const Case& c : cases)
      benchmark::RegisterBenchmark(
          (std::string("BM_Matmul/") + c.name + "_" + std::string(lio::cpu::cpu_isa_name(isa)))
              .c_str(),
          BM_Matmul, c.dtype, c.act, isa)
          ->RangeMultiplier(2)
          ->Range(1, 128);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
