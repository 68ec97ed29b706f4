// bench_matmul — the CPU engine's matmul (kernels/cpu/packed_matmul.h: weights packed once, as
// CpuBackend packs them at load) on the real shapes of the course's models, for every weight
// format the course ships, on each instruction set this CPU runs. Google Benchmark.
//
// Two families of cases:
//   BM_Shape/<model>_<matrix>/<format>/rows:R/cold:C — one matrix of SmolLM2-135M (576 wide,
//     d_ff 1536, vocab 49152) or Gemma 3 270M (640 wide, d_ff 2048, vocab 262144), at R x rows
//     (1: a decode step; 32: batched decode), on the ISA the engine picks, with the activations
//     `lio generate` uses (int8 on quantized weights, f32 on F32). cold:1 cycles through enough
//     copies of the matrix to pass 64 MiB, so its bytes come from DRAM as in a decode step
//     (every matrix is read once between two passes over the whole model); cold:0 reads one
//     copy again and again (the kernel's own speed from the caches).
//   BM_Matmul/<case>_<isa>/R — SmolLM2's ffn_up (1536 x 576) for 1 .. 128 rows, f32 vs int8
//     activations, AVX-512 and AVX2 (warm), as before issue 64.
// Counters: weight_GB/s (packed bytes per call x calls/s: against bench_decode's read-bandwidth
// probe), GOP/s (2 x rows x out x in per call: against its compute probe).
// Weights are quantized from N(0, 1) values (not zeros: see STYLE.md); the K-quants, which LIO
// reads but does not write, are random blocks (tests/support/random_inputs.h).
//   build/bin/bench_matmul --benchmark_filter=BM_Shape --benchmark_repetitions=5 \
//       --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "lio/dtype.h"
#include "packed_matmul.h"
#include "random_inputs.h"

namespace {

using lio::DType;
using lio::cpu::CpuIsa;
using lio::cpu::MatmulActivations;

/// Source bytes of a (rows, cols) `dtype` matrix from N(0, 1) values (seeded by `seed`); Q4_K
/// and Q6_K: random blocks under small f16 scales (random_read_only_blocks).
std::vector<std::byte> quantized(DType dtype, int64_t rows, int64_t cols, unsigned seed) {
  if (dtype == DType::Q4_K || dtype == DType::Q6_K) {  // LIO reads the K-quants, has no encoder
    return lio::testing::random_read_only_blocks(dtype, rows, cols, seed);
  }
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(cols));
  const int64_t rb = lio::dtype_row_bytes(dtype, cols);
  std::vector<std::byte> bytes(static_cast<size_t>(rows * rb));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = dist(rng);
    lio::quantize_row(dtype, row.data(), bytes.data() + r * rb, cols);
  }
  return bytes;
}

/// A (rows, cols) matrix of `dtype` from N(0, 1) values, packed.
std::unique_ptr<lio::cpu::PackedMatrix> make(DType dtype, int64_t rows, int64_t cols, unsigned seed = 1) {
  const std::vector<std::byte> bytes = quantized(dtype, rows, cols, seed);
  return std::make_unique<lio::cpu::PackedMatrix>(
      lio::WeightMatrix{"w", dtype, rows, cols, lio::dtype_row_bytes(dtype, cols), bytes.data()});
}

void set_counters(benchmark::State& state, int64_t n, int64_t rows, int64_t cols, int64_t bytes) {
  const double ops = 2.0 * static_cast<double>(n * rows * cols);
  state.counters["GOP/s"] = benchmark::Counter(ops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight_GB/s"] =
      benchmark::Counter(static_cast<double>(bytes) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- the model's shapes ----------------------------------------------------------------------

struct Shape {
  const char* name;
  int64_t rows, cols;  // out_features, in_features
};
// SmolLM2-135M: d_model 576, 9 heads x 64 (q 576), 3 KV heads (k, v 192), d_ff 1536, vocab
// 49152 (the tied head). Gemma 3 270M: d_model 640, 4 heads x 256 (q 1024), 1 KV head (k, v
// 256), d_ff 2048, vocab 262144.
constexpr Shape kShapes[] = {
    {"smollm2_q", 576, 576},        {"smollm2_kv", 192, 576},       {"smollm2_o", 576, 576},
    {"smollm2_gate", 1536, 576},    {"smollm2_down", 576, 1536},    {"smollm2_lm_head", 49152, 576},
    {"gemma3_q", 1024, 640},        {"gemma3_o", 640, 1024},        {"gemma3_gate", 2048, 640},
    {"gemma3_down", 640, 2048},     {"gemma3_lm_head", 262144, 640},
};

void BM_Shape(benchmark::State& state, Shape shape, DType dtype) {
  const int64_t n = state.range(0);
  const bool cold = state.range(1) != 0;
  const CpuIsa isa = lio::cpu::detect_cpu_isa();
  const MatmulActivations act =
      dtype == DType::F32 ? MatmulActivations::F32 : MatmulActivations::Int8;  // lio generate's default
  const int64_t cols = shape.cols;
  if (dtype == DType::Q4_K || dtype == DType::Q6_K) {
    if (cols % 256 != 0) {
      state.SkipWithError("K-quant rows are 256-element super-blocks");
      return;
    }
  }
  // Copies enough to pass 64 MiB when cold (packed bytes ~ source bytes).
  const int64_t one = static_cast<int64_t>(quantized(dtype, 16, cols, 1).size()) * shape.rows / 16;
  const int64_t copies = cold ? std::max<int64_t>(2, (int64_t{64} << 20) / std::max<int64_t>(one, 1) + 1) : 1;
  std::vector<std::unique_ptr<lio::cpu::PackedMatrix>> ms;
  ms.push_back(make(dtype, shape.rows, cols));
  // The copies share the first's bytes (packing is what costs; their values do not matter).
  const std::vector<std::byte> src = quantized(dtype, shape.rows, cols, 1);
  for (int64_t c = 1; c < copies; ++c)
    ms.push_back(std::make_unique<lio::cpu::PackedMatrix>(
        lio::WeightMatrix{"w", dtype, shape.rows, cols, lio::dtype_row_bytes(dtype, cols), src.data()}));
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * cols)), y(static_cast<size_t>(n * shape.rows));
  for (float& v : x) v = dist(rng);
  lio::cpu::PackedScratch scratch;
  size_t at = 0;
  for (auto _ : state) {
    lio::cpu::packed_matmul(*ms[at], x.data(), y.data(), n, false, act, isa, scratch);
    benchmark::DoNotOptimize(y.data());
    at = (at + 1) % ms.size();
  }
  set_counters(state, n, shape.rows, cols, ms[0]->size_bytes());
}

// ---- the ffn_up sweep (1 .. 128 rows, both ISAs) ---------------------------------------------

constexpr int64_t kRows = 1536, kCols = 576;  // ffn_up / ffn_gate of SmolLM2

void BM_Matmul(benchmark::State& state, DType dtype, MatmulActivations act, CpuIsa isa) {
  if (lio::cpu::detect_cpu_isa() < isa) {
    state.SkipWithError("this CPU lacks the instruction set");
    return;
  }
  const std::unique_ptr<lio::cpu::PackedMatrix> m = make(dtype, kRows, kCols);
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
  set_counters(state, n, kRows, kCols, m->size_bytes());
}

}  // namespace

int main(int argc, char** argv) {
  struct Format {
    const char* name;
    DType dtype;
  };
  const Format formats[] = {{"f32", DType::F32},   {"q8_0", DType::Q8_0}, {"q4_0", DType::Q4_0},
                            {"q4_1", DType::Q4_1}, {"q4_k", DType::Q4_K}, {"q6_k", DType::Q6_K}};
  for (const Shape& s : kShapes)
    for (const Format& f : formats) {
      if ((f.dtype == DType::Q4_K || f.dtype == DType::Q6_K) && s.cols % 256 != 0) continue;
      benchmark::RegisterBenchmark((std::string("BM_Shape/") + s.name + "/" + f.name).c_str(), BM_Shape, s, f.dtype)
          ->ArgNames({"rows", "cold"})
          ->ArgsProduct({{1, 32}, {1, 0}})
          ->Unit(benchmark::kMicrosecond);
    }
  struct Case {
    const char* name;
    DType dtype;
    MatmulActivations act;
  };
  const Case cases[] = {{"q4_1_f32act", DType::Q4_1, MatmulActivations::F32},
                        {"q4_1_int8act", DType::Q4_1, MatmulActivations::Int8},
                        {"q8_0_int8act", DType::Q8_0, MatmulActivations::Int8},
                        {"f32", DType::F32, MatmulActivations::F32}};
  for (const CpuIsa isa : {CpuIsa::Avx512, CpuIsa::Avx2})
    for (const Case& c : cases)
      benchmark::RegisterBenchmark(
          (std::string("BM_Matmul/") + c.name + "_" + std::string(lio::cpu::cpu_isa_name(isa))).c_str(), BM_Matmul,
          c.dtype, c.act, isa)
          ->RangeMultiplier(2)
          ->Range(1, 128);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
