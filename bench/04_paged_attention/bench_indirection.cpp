// bench_indirection — chapter 04's indirection cost on the CPU: decode attention over a paged
// KV pool (keys found through a block table, blocks in a random order) vs over contiguous
// caches, at several context lengths, as the ratio paged time / contiguous time.
//
// Both variants do the same work: B sequences of n_ctx cached positions, one decode row each
// (the query at position n_ctx - 1). Contiguous is B calls of cpu::decode_attention, one per
// sequence's cache (chapter 01's decode step); paged is one cpu::paged_attention_reference over
// the batch: the naive paged kernel (attention_reference.h), not the engine's path, which runs
// chapter 04's paged_decode_attention per (row, head).
// The layouts, the "paged 1 blk" control and --layers are described in indirection_common.h.
// Threading differs and is part of what is measured: decode_attention runs OpenMP over the 9
// heads of one row, paged_attention_reference over the B rows (all heads of a row on one thread).
// Achieved GB/s counts each K/V byte once per step, next to a read bandwidth measured in the
// same run (lio::bench::measure_read_bandwidth).
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "attention_reference.h"
#include "bench_util.h"
#include "cpu_ops.h"
#include "indirection_common.h"
#include "lio/omp_compat.h"

namespace {

namespace ind = lio::bench::indirection;

/// One decode step of a variant on layer copy `layer` (0 .. n_layers-1).
using Step = std::function<void(int64_t layer)>;

/// Median microseconds per step of each of `steps` (ind::median_us_taking_turns): a sample runs
/// the variant once on every layer copy and divides by n_layers.
std::vector<double> time_steps(const std::vector<Step>& steps, int64_t n_layers, int warmup,
                               int repeats) {
  return ind::median_us_taking_turns(steps.size(), warmup, repeats, [&](size_t v) {
    const double t0 = lio::bench::now_s();
    for (int64_t l = 0; l < n_layers; ++l) steps[v](l);
    return 1e6 * (lio::bench::now_s() - t0) / static_cast<double>(n_layers);
  });
}

/// Builds the layouts of one context length, checks every paged variant against the contiguous
/// kernel on every layer copy (relative 1e-5: both run the same two-pass f32 softmax per (row,
/// head), so they differ by rounding only), then times them all.
ind::Row measure(const ind::Shape& shape, const ind::Options& o, int64_t n_ctx) {
  constexpr double kParityLimit = 1e-5;
  std::mt19937 rng(o.seed + static_cast<uint32_t>(n_ctx));  // each n_ctx reproducible alone
  const ind::ContiguousKv c = ind::make_contiguous(shape, o.n_layers, o.batch, n_ctx, rng);
  std::vector<ind::PagedKv> paged;
  paged.push_back(ind::make_paged(c, n_ctx, /*scatter=*/false, rng));  // paged 1 blk
  for (int64_t bs : o.block_sizes) paged.push_back(ind::make_paged(c, bs, /*scatter=*/true, rng));

  const int64_t qd = shape.q_dim();
  std::vector<std::vector<float>> out(1 + paged.size(), std::vector<float>(c.q.size()));
  std::vector<Step> steps;
  steps.push_back([&](int64_t l) {
    for (int64_t s = 0; s < o.batch; ++s) {
      lio::cpu::decode_attention(c.q.data() + s * qd, c.k.data() + c.offset(l, s),
                                 c.v.data() + c.offset(l, s), out[0].data() + s * qd, n_ctx,
                                 shape.n_heads, shape.n_kv_heads, shape.head_dim, shape.scale);
    }
  });
  for (size_t i = 0; i < paged.size(); ++i) {
    steps.push_back([&, i](int64_t l) {
      const ind::PagedKv& p = paged[i];
      lio::cpu::paged_attention_reference(
          c.q.data(), p.k_pool.data() + l * p.layer_floats(),
          p.v_pool.data() + l * p.layer_floats(), out[1 + i].data(), p.query_start_loc.data(),
          p.seq_lens.data(), p.block_tables.data(), o.batch, p.max_blocks_per_seq, p.block_size,
          shape.n_heads, shape.n_kv_heads, shape.head_dim, shape.scale);
    });
  }

  ind::Row row{n_ctx, c.kv_bytes_per_step(), {}, std::vector<double>(steps.size(), 0.0)};
  for (int64_t l = 0; l < o.n_layers; ++l) {
    for (const Step& step : steps) step(l);
    for (size_t v = ind::kOneBlock; v < steps.size(); ++v)
      ind::check_variant(row, v, out[v], out[0], kParityLimit,
                         "n_ctx " + std::to_string(n_ctx) + ", layer " + std::to_string(l),
                         o.block_sizes);
  }
  row.us = time_steps(steps, o.n_layers, o.warmup, o.repeats);
  return row;
}

int run(const ind::Options& o, int threads) {
  ind::validate(o);
  if (threads < 0) throw lio::InvalidArgument("--threads must be >= 0");
  if (threads > 0) omp_set_num_threads(threads);
  const ind::Shape shape;
  const double read_bw = lio::bench::measure_read_bandwidth(int64_t{256} << 20, 5);

  std::printf(
      "bench_paged_indirection | %s, %d threads | read bandwidth %.1f GB/s (measured, "
      "256 MiB, all threads)\n",
      lio::bench::cpu_name().c_str(), omp_get_max_threads(), read_bw / 1e9);
  ind::print_setup(shape, o, "");
  std::printf(
      "contiguous = %lld x cpu::decode_attention (OpenMP over heads); paged = 1 x "
      "cpu::paged_attention_reference (OpenMP over rows), blocks in a random order; paged 1 blk = "
      "the paged kernel over one in-order block per sequence\n",
      (long long)o.batch);
  std::fflush(stdout);

  std::vector<ind::Row> rows;
  double worst_diff = 0.0;
  for (int64_t n_ctx : o.contexts) {
    rows.push_back(measure(shape, o, n_ctx));
    for (double d : rows.back().max_rel_diff) worst_diff = std::max(worst_diff, d);
  }
  std::printf(
      "parity: every paged output matches the contiguous one, max rel diff %.2g "
      "(limit 1e-5)\n\n",
      worst_diff);
  ind::print_table(rows, o.block_sizes, "contiguous");
  std::printf("\nscattered layout alone (same kernel): paged bs=N / paged 1 blk\n\n");
  ind::print_layout_ratios(rows, o.block_sizes);

  if (!o.json_path.empty()) {
    const int threads_used = omp_get_max_threads();
    ind::json j =
        ind::head_json("bench_paged_indirection", o,
                       lio::bench::cpu_name() + ", " + std::to_string(threads_used) + " threads",
                       {{"cpu", lio::bench::cpu_name()},
                        {"threads", threads_used},
                        {"read_bandwidth_gbs", read_bw / 1e9}},
                       shape);
    j["contiguous"] = "batch x cpu::decode_attention";
    j["paged"] = "1 x cpu::paged_attention_reference";
    j["rows"] = ind::rows_json(rows, o.block_sizes);
    ind::write_json(o.json_path, j);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chapter 04: paged vs contiguous decode attention on the CPU (indirection cost)",
               "bench_paged_indirection"};
  ind::Options o;
  int threads = 0;
  ind::add_options(app, o);
  app.add_option("--threads", threads, "OpenMP threads (0 = all cores)")->capture_default_str();
  return ind::run_main(app, o, argc, argv, [&] { return run(o, threads); });
}
