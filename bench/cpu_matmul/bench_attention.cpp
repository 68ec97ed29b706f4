// bench_attention — one decode row's attention on the CPU (kernels/cpu/flash_attention.h, the
// engine's default kernel), on SmolLM2-135M's shape: 9 query heads reading 3 KV heads of 64,
// an f32 paged pool (16-token blocks), contexts 128 .. 4096. Google Benchmark; reports the
// K/V bytes one call reads as GB/s (kv_GB/s) and the multiply-adds of Q K^T and P V as GFLOP/s.
//
// The cache state is the engine's: in a decode step every layer's K/V is read once between two
// passes over ~100 MB of weights, so it comes from DRAM, not from the caches. Each iteration
// therefore attends over the next of `kLayers` layers' pools, whose K/V together are larger
// than the last-level cache (at 128 keys: 30 layers x 0.2 MB, so the number of layers grows
// with a short context until they pass 64 MiB). warm=1 attends over one layer again and again,
// its K/V in the caches: the kernel's own speed, without the memory.
//   build/bin/bench_attention --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "flash_attention.h"
#include "lio/omp_compat.h"

namespace {

constexpr int64_t kHeads = 9, kKvHeads = 3, kHeadDim = 64, kBlock = 16;
constexpr int64_t kKvDim = kKvHeads * kHeadDim;

void BM_DecodeAttention(benchmark::State& state) {
  const int64_t ctx = state.range(0);
  const bool warm = state.range(1) != 0;  // 1: one layer, its K/V left in the caches
  const int64_t n_blocks = (ctx + kBlock - 1) / kBlock, slots = n_blocks * kBlock;
  const int64_t layer_bytes = 2 * slots * kKvDim * static_cast<int64_t>(sizeof(float));
  const int64_t layers = warm ? 1 : std::max<int64_t>(30, (int64_t{64} << 20) / layer_bytes + 1);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<std::vector<float>> k(static_cast<size_t>(layers)), v(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) {
    k[static_cast<size_t>(l)].resize(static_cast<size_t>(slots * kKvDim));
    v[static_cast<size_t>(l)].resize(static_cast<size_t>(slots * kKvDim));
    for (float& x : k[static_cast<size_t>(l)]) x = dist(rng);
    for (float& x : v[static_cast<size_t>(l)]) x = dist(rng);
  }
  // The blocks in a shuffled order, as a pool that has served other sequences hands them out.
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  for (int64_t b = 0; b < n_blocks; ++b) table[static_cast<size_t>(b)] = static_cast<int32_t>(b);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<float> q(static_cast<size_t>(kHeads * kHeadDim)), out(q.size());
  for (float& x : q) x = dist(rng);
  const int32_t qsl[2] = {0, 1}, lens[1] = {static_cast<int32_t>(ctx)};
  const lio::cpu::AttentionBatch batch{qsl, lens, table.data(), 1, n_blocks, kBlock, true, nullptr, nullptr};
  const lio::cpu::AttentionShape shape{kHeads, kKvHeads, kHeadDim, 0.125f, 0, 0.0f};
  lio::cpu::FlashWorkspace ws;
  int64_t layer = 0;
  for (auto _ : state) {
    lio::cpu::PagedKvLayer kv;
    kv.k = k[static_cast<size_t>(layer)].data();
    kv.v = v[static_cast<size_t>(layer)].data();
    lio::cpu::flash_attention(q.data(), kv, out.data(), nullptr, batch, shape, ws);
    benchmark::DoNotOptimize(out.data());
    layer = (layer + 1) % layers;
  }
  const double kv_bytes = 2.0 * static_cast<double>(ctx * kKvDim) * sizeof(float);
  state.counters["kv_GB/s"] = benchmark::Counter(kv_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * static_cast<double>(kHeads * ctx * kHeadDim) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = omp_get_max_threads();
}

}  // namespace

BENCHMARK(BM_DecodeAttention)
    ->ArgNames({"ctx", "warm"})
    ->ArgsProduct({{128, 512, 4096}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
