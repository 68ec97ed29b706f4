// bench_cuda_indirection — chapter 04's indirection cost on CUDA: decode attention over a paged
// KV pool (keys found through a block table, blocks in a random order) vs over contiguous
// caches, at several context lengths, as the ratio paged time / contiguous time.
//
// Two comparisons, because the launches differ:
//   batch   B x cuda::decode_attention (one launch per sequence's cache) vs 1 x
//           cuda::paged_attention over the B decode rows: what an engine runs without and with
//           paging, but not a kernel comparison — B small grids one after another (and B launch
//           overheads) against one grid of B x n_heads blocks;
//   single  1 x decode_attention vs 1 x paged_attention with B = 1: kernel against kernel.
// The kernels also differ beyond the table walk (attention.cu: one block per (query, head),
// scores in shared memory; paged_attention.cu: four warps split the keys, online softmax); the
// "paged 1 blk" control (indirection_common.h) separates the kernel from the scattered layout.
// Timing: CUDA events around --iters steps queued back to back on one stream (step i reads
// layer copy i % --layers), per-step time = elapsed / iters, median over --repeats samples,
// variants taking turns. Kernels this small are near the launch rate (a few us per launch), so
// short contexts measure launches as much as memory; achieved GB/s counts each K/V byte once
// per step, next to a device-to-device copy measured in the same run.
// Skips (prints a line, exits 0) when no usable GPU is present.
#include <cuda_runtime.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "cuda_check.h"
#include "attention.h"
#include "paged_attention.h"
#include "cuda_runtime_info.h"
#include "cuda_timing.h"
#include "device_buffer.h"
#include "indirection_common.h"

namespace {

namespace ind = lio::bench::indirection;
using lio::cuda::CudaEvent;
using lio::cuda::CudaStream;
using lio::cuda::DeviceBuffer;

/// Device-to-device copy rate in bytes/s (2 x bytes per copy: read + write), median of
/// `repeats` copies of `bytes` after one warm-up, timed with CUDA events on `stream`.
double measure_copy_bandwidth(int64_t bytes, int repeats, cudaStream_t stream) {
  DeviceBuffer<std::byte> a(bytes), b(bytes);
  CUDA_CHECK(cudaMemset(a.data(), 1, a.size_bytes()));
  CudaEvent start, stop;
  std::vector<double> rates;
  for (int r = 0; r < repeats + 1; ++r) {
    CUDA_CHECK(cudaEventRecord(start.get(), stream));
    CUDA_CHECK(
        cudaMemcpyAsync(b.data(), a.data(), a.size_bytes(), cudaMemcpyDeviceToDevice, stream));
    CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    const float ms = lio::cuda::elapsed_ms(start, stop);
    if (r > 0) rates.push_back(2.0 * static_cast<double>(bytes) / (ms * 1e-3));
  }
  return lio::bench::median(rates);
}

/// A NaN-filled device array of n floats (all bits set is a quiet NaN): a row a kernel skips
/// cannot pass the parity check.
DeviceBuffer<float> poisoned(int64_t n) {
  DeviceBuffer<float> buf(n);
  CUDA_CHECK(cudaMemset(buf.data(), 0xFF, buf.size_bytes()));
  return buf;
}

/// ind::PagedKv in device memory (its index arrays and pool; the host copy can go).
struct DevicePaged {
  int64_t block_size, max_blocks_per_seq, layer_floats;
  DeviceBuffer<int32_t> query_start_loc, seq_lens, block_tables;  ///< as ind::PagedKv
  DeviceBuffer<float> k_pool, v_pool;  ///< (n_layers, n_blocks, block_size, kv_dim)
};

/// Uploads `p`.
DevicePaged upload(const ind::PagedKv& p) {
  return {p.block_size,
          p.max_blocks_per_seq,
          p.layer_floats(),
          DeviceBuffer<int32_t>::from_host(p.query_start_loc),
          DeviceBuffer<int32_t>::from_host(p.seq_lens),
          DeviceBuffer<int32_t>::from_host(p.block_tables),
          DeviceBuffer<float>::from_host(p.k_pool),
          DeviceBuffer<float>::from_host(p.v_pool)};
}

/// One decode step of a variant on layer copy `layer`, queued on the benchmark's stream.
using Step = std::function<void(int64_t layer)>;

/// Median microseconds per step of each of `steps` (ind::median_us_taking_turns): a sample is
/// `iters` steps queued back to back between two events (step i on layer i % n_layers), divided
/// by iters.
std::vector<double> time_steps(const std::vector<Step>& steps, int64_t n_layers, int iters,
                               int warmup, int repeats, cudaStream_t stream) {
  CudaEvent start, stop;
  return ind::median_us_taking_turns(steps.size(), warmup, repeats, [&](size_t v) {
    CUDA_CHECK(cudaEventRecord(start.get(), stream));
    for (int i = 0; i < iters; ++i) steps[v](i % n_layers);
    CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    return 1e3 * lio::cuda::elapsed_ms(start, stop) / iters;
  });
}

/// The device copies of one context length's layouts (ind::make_contiguous / make_paged).
struct DeviceInputs {
  int64_t n_ctx, n_seqs, kv_dim;
  double kv_bytes_per_seq;         ///< K/V bytes of one sequence's cache
  DeviceBuffer<float> q, k, v;     ///< as ind::ContiguousKv
  std::vector<DevicePaged> paged;  ///< [0] paged 1 blk, [1 + i] block_sizes[i], scattered
  /// Offset (floats) of layer `layer`'s cache of sequence `seq` in k and v.
  int64_t offset(int64_t layer, int64_t seq) const {
    return (layer * n_seqs + seq) * n_ctx * kv_dim;
  }
};

/// Checks and times the variants on the first `n_rows` sequences (one decode row each):
/// contiguous = n_rows decode_attention launches, paged = one paged_attention launch over the
/// n_rows rows. Every paged output must match the contiguous one on every layer copy to a
/// relative 1e-4 (f32 both, different summation orders and exp implementations).
ind::Row measure(const ind::Shape& shape, const ind::Options& o, int iters, const DeviceInputs& d,
                 int64_t n_rows, cudaStream_t stream) {
  constexpr double kParityLimit = 1e-4;
  const int64_t qd = shape.q_dim(), n_out = n_rows * qd;
  std::vector<DeviceBuffer<float>> out;
  for (size_t v = 0; v < 1 + d.paged.size(); ++v) out.push_back(poisoned(n_out));
  std::vector<Step> steps;
  steps.push_back([&](int64_t l) {
    for (int64_t s = 0; s < n_rows; ++s) {
      lio::cuda::decode_attention(d.q.data() + s * qd, d.k.data() + d.offset(l, s),
                                  d.v.data() + d.offset(l, s), out[0].data() + s * qd, d.n_ctx,
                                  shape.n_heads, shape.n_kv_heads, shape.head_dim, shape.scale,
                                  stream);
    }
  });
  for (size_t i = 0; i < d.paged.size(); ++i) {
    steps.push_back([&, i](int64_t l) {
      const DevicePaged& p = d.paged[i];
      // Rows 0 .. n_rows-1 are sequences 0 .. n_rows-1: a prefix of every index array.
      lio::cuda::paged_attention(d.q.data(), p.k_pool.data() + l * p.layer_floats,
                                 p.v_pool.data() + l * p.layer_floats, out[1 + i].data(),
                                 p.query_start_loc.data(), p.seq_lens.data(), p.block_tables.data(),
                                 n_rows, n_rows, p.max_blocks_per_seq, p.block_size, shape.n_heads,
                                 shape.n_kv_heads, shape.head_dim, shape.scale, stream);
    });
  }

  ind::Row row{d.n_ctx,
               d.kv_bytes_per_seq * static_cast<double>(n_rows),
               {},
               std::vector<double>(steps.size(), 0.0)};
  for (int64_t l = 0; l < o.n_layers; ++l) {
    for (const Step& step : steps) step(l);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<float> want = out[0].to_host();
    for (size_t v = ind::kOneBlock; v < steps.size(); ++v)
      ind::check_variant(row, v, out[v].to_host(), want, kParityLimit,
                         "n_ctx " + std::to_string(d.n_ctx) + ", " + std::to_string(n_rows) +
                             " rows, layer " + std::to_string(l),
                         o.block_sizes);
  }
  row.us = time_steps(steps, o.n_layers, iters, o.warmup, o.repeats, stream);
  return row;
}

int run(const ind::Options& o, int iters) {
  ind::validate(o);
  if (iters < 1) throw lio::InvalidArgument("--iters must be >= 1");
  if (!lio::cuda::cuda_available()) {
    std::printf("bench_cuda_paged_indirection: no usable CUDA device; skipped\n");
    return 0;
  }
  const ind::Shape shape;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  CudaStream stream;
  const double copy_bw = measure_copy_bandwidth(int64_t{512} << 20, 10, stream.get());

  std::printf(
      "bench_cuda_paged_indirection | %s, %d SMs, L2 %.0f MiB | device-to-device copy "
      "%.0f GB/s (measured, read+write) | host %s\n",
      prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1048576.0, copy_bw / 1e9,
      lio::bench::cpu_name().c_str());
  ind::print_setup(shape, o, std::to_string(iters) + " steps per sample, ");
  std::fflush(stdout);

  std::vector<ind::Row> batch_rows, single_rows;
  double worst_diff = 0.0;
  for (int64_t n_ctx : o.contexts) {
    std::mt19937 rng(o.seed + static_cast<uint32_t>(n_ctx));  // each n_ctx reproducible alone
    DeviceInputs d;
    {
      const ind::ContiguousKv c = ind::make_contiguous(shape, o.n_layers, o.batch, n_ctx, rng);
      d.n_ctx = n_ctx;
      d.n_seqs = c.n_seqs;
      d.kv_dim = c.kv_dim;
      d.kv_bytes_per_seq = c.kv_bytes_per_step() / static_cast<double>(c.n_seqs);
      d.q = DeviceBuffer<float>::from_host(c.q);
      d.k = DeviceBuffer<float>::from_host(c.k);
      d.v = DeviceBuffer<float>::from_host(c.v);
      d.paged.push_back(upload(ind::make_paged(c, n_ctx, /*scatter=*/false, rng)));
      for (int64_t bs : o.block_sizes) d.paged.push_back(upload(ind::make_paged(c, bs, true, rng)));
    }
    batch_rows.push_back(measure(shape, o, iters, d, o.batch, stream.get()));
    single_rows.push_back(measure(shape, o, iters, d, 1, stream.get()));
    for (const ind::Row* r : {&batch_rows.back(), &single_rows.back()}) {
      for (double x : r->max_rel_diff) worst_diff = std::max(worst_diff, x);
    }
  }

  std::printf(
      "parity: every paged output matches the contiguous one, max rel diff %.2g "
      "(limit 1e-4)\n",
      worst_diff);
  std::printf(
      "\nbatch: %lld x cuda::decode_attention (one launch per sequence) vs 1 x "
      "cuda::paged_attention over %lld rows, blocks in a random order\n\n",
      (long long)o.batch, (long long)o.batch);
  ind::print_table(batch_rows, o.block_sizes, "contiguous (B launches)");
  std::printf(
      "\nsingle sequence, kernel vs kernel: 1 x cuda::decode_attention vs 1 x "
      "cuda::paged_attention, B = 1\n\n");
  ind::print_table(single_rows, o.block_sizes, "contiguous (1 launch)");
  std::printf("\nscattered layout alone (same kernel): paged bs=N / paged 1 blk, batch of %lld\n\n",
              (long long)o.batch);
  ind::print_layout_ratios(batch_rows, o.block_sizes);
  std::printf("\nsame, single sequence\n\n");
  ind::print_layout_ratios(single_rows, o.block_sizes);

  if (!o.json_path.empty()) {
    ind::json j = ind::head_json("bench_cuda_paged_indirection", o,
                                 {{"cpu", lio::bench::cpu_name()},
                                  {"gpu", std::string(prop.name)},
                                  {"driver", lio::bench::gpu_driver()}},
                                 {{"device", std::string(prop.name)},
                                  {"sm_count", prop.multiProcessorCount},
                                  {"l2_bytes", prop.l2CacheSize},
                                  {"copy_bandwidth_gbs", copy_bw / 1e9},
                                  {"host_cpu", lio::bench::cpu_name()}},
                                 shape);
    j["iters"] = iters;
    j["batch_rows"] = ind::rows_json(batch_rows, o.block_sizes);
    j["single_rows"] = ind::rows_json(single_rows, o.block_sizes);
    ind::write_json(o.json_path, j);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chapter 04: paged vs contiguous decode attention on CUDA (indirection cost)",
               "bench_cuda_paged_indirection"};
  ind::Options o;
  int iters = 50;
  ind::add_options(app, o);
  app.add_option("--iters", iters, "Steps queued back to back per timed sample")
      ->capture_default_str();
  return ind::run_main(app, o, argc, argv, [&] { return run(o, iters); });
}
