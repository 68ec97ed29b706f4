// indirection_common.h — what chapter 04's two "indirection cost" benchmarks share
// (bench_indirection.cpp on the CPU, bench_cuda_indirection.cpp on CUDA): the flags, the inputs,
// the parity check and the tables.
//
// The question: what does finding keys through a block table cost a decode step? Each of B
// sequences holds n_ctx cached positions, stored with the same values in three layouts:
//   contiguous   (n_ctx, kv_dim) per sequence — chapter 01's cache, read by decode_attention;
//   paged 1 blk  the same bytes as a pool of one block per sequence (block_size = n_ctx, blocks
//                in order), read by paged_attention (CPU: the reference kernel): the paged kernel
//                without scattering;
//   paged bs=N   a pool of (n_blocks, N, kv_dim) whose blocks are handed out in a random order,
//                as a block manager's free list is after a while of allocating and freeing
//                (PagedAttention, Kwon et al. 2023, sec. 4.2), read by paged_attention.
// So two ratios separate the two things paging changes:
//   paged bs=N / contiguous   the whole cost: another kernel and a scattered layout;
//   paged bs=N / paged 1 blk  the scattered layout alone (same kernel, same work).
// --layers L keeps L copies of every layout and cycles through them, one per step, as a decode
// step walks the model's layers (SmolLM2-135M has 30): with L > 1 the working set outgrows the
// caches and each step reads K/V from memory, as in a real decode step; with L = 1 small
// contexts run out of cache.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bench_util.h"
#include "lio/atomic_file.h"
#include "lio/error.h"

namespace lio::bench::indirection {

using json = nlohmann::ordered_json;

// ---- settings ---------------------------------------------------------------------------------

/// SmolLM2-135M's attention (its config.json: 9 heads, 3 KV heads, hidden 576): GQA 3:1,
/// head_dim 64, scale 1/sqrt(64).
struct Shape {
  int64_t n_heads = 9;
  int64_t n_kv_heads = 3;
  int64_t head_dim = 64;
  float scale = 0.125f;
  /// Floats per cached position: n_kv_heads * head_dim.
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  /// Floats per query row: n_heads * head_dim.
  int64_t q_dim() const { return n_heads * head_dim; }
};

/// The flags both benchmarks take.
struct Options {
  /// Context lengths n_ctx (tokens).
  std::vector<int64_t> contexts = {128, 256, 512, 1024, 2048, 4096};
  /// Paged block sizes (tokens); the first one headlines.
  std::vector<int64_t> block_sizes = {16, 1, 256};
  int64_t batch = 8;      ///< sequences, one decode row each
  int64_t n_layers = 1;   ///< copies of each layout cycled through (see the file comment)
  int repeats = 20;       ///< timed samples per variant; medians are reported
  int warmup = 3;         ///< untimed passes per variant before the samples
  uint32_t seed = 1234;   ///< RNG seed of the K/V/q values and of the block order
  std::string json_path;  ///< --json: where to write every number ("" = nowhere)
  std::string command;    ///< the command line, recorded in the JSON (set by main, not a flag)
};

/// Registers Options' flags on `app`.
inline void add_options(CLI::App& app, Options& o) {
  app.add_option("--contexts", o.contexts, "Context lengths n_ctx (tokens)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--block-sizes", o.block_sizes, "Paged block sizes (tokens); the first headlines")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--batch", o.batch, "Sequences B, one decode row each")->capture_default_str();
  app.add_option("--layers", o.n_layers, "Copies of the KV cycled through (cold caches when > 1)")
      ->capture_default_str();
  app.add_option("--repeats", o.repeats, "Timed samples per variant (medians)")
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "Untimed passes per variant first")->capture_default_str();
  app.add_option("--seed", o.seed, "RNG seed (values and block order)")->capture_default_str();
  app.add_option("--json", o.json_path, "Also write every number to this JSON file");
}

/// Throws InvalidArgument unless every count is positive (warm-up >= 0) and the lists non-empty.
inline void validate(const Options& o) {
  const auto positive = [](const std::vector<int64_t>& v) {
    return !v.empty() && std::all_of(v.begin(), v.end(), [](int64_t x) { return x >= 1; });
  };
  if (!positive(o.contexts)) throw InvalidArgument("--contexts: need one or more values >= 1");
  if (!positive(o.block_sizes))
    throw InvalidArgument("--block-sizes: need one or more values >= 1");
  if (o.batch < 1 || o.n_layers < 1 || o.repeats < 1 || o.warmup < 0) {
    throw InvalidArgument("--batch, --layers and --repeats must be >= 1, --warmup >= 0");
  }
}

// ---- inputs -------------------------------------------------------------------------------------

/// Fills `x` with uniform values in [-1, 1) from `rng` (never all zeros: a kernel that skips
/// keys or rows cannot pass the parity check by accident).
inline void fill_uniform(std::vector<float>& x, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& e : x) e = dist(rng);
}

/// One decode row per sequence and the sequences' contiguous caches, n_layers copies.
struct ContiguousKv {
  int64_t n_layers = 0, n_seqs = 0, n_ctx = 0, kv_dim = 0;
  std::vector<float> q;     ///< (n_seqs, n_heads, head_dim): sequence s's query at n_ctx - 1
  std::vector<float> k, v;  ///< (n_layers, n_seqs, n_ctx, kv_dim), uniform in [-1, 1)

  /// Offset (floats) of layer `layer`'s cache of sequence `seq` in k and v.
  int64_t offset(int64_t layer, int64_t seq) const {
    return (layer * n_seqs + seq) * n_ctx * kv_dim;
  }
  /// Bytes one decode step reads at the least: every row's K and V once, f32.
  double kv_bytes_per_step() const { return 2.0 * 4.0 * double(n_seqs * n_ctx * kv_dim); }
};

/// Random contiguous inputs: n_seqs query rows, n_layers x n_seqs caches of n_ctx positions.
inline ContiguousKv make_contiguous(const Shape& shape, int64_t n_layers, int64_t n_seqs,
                                    int64_t n_ctx, std::mt19937& rng) {
  ContiguousKv c{n_layers, n_seqs, n_ctx, shape.kv_dim(), {}, {}, {}};
  c.q.resize(static_cast<size_t>(n_seqs * shape.q_dim()));
  c.k.resize(static_cast<size_t>(n_layers * n_seqs * n_ctx * c.kv_dim));
  c.v.resize(c.k.size());
  fill_uniform(c.q, rng);
  fill_uniform(c.k, rng);
  fill_uniform(c.v, rng);
  return c;
}

/// The same K/V as a paged pool, with the index arrays paged_attention takes for one decode row
/// per sequence. Every layer's pool uses the same block ids (one block table per sequence, as in
/// the engine's KvPool).
struct PagedKv {
  int64_t block_size = 0, max_blocks_per_seq = 0, n_blocks = 0, kv_dim = 0;
  std::vector<int32_t> query_start_loc;  ///< (n_seqs + 1): 0, 1, .., n_seqs (one row each)
  std::vector<int32_t> seq_lens;         ///< (n_seqs): n_ctx each (the row's own K/V included)
  std::vector<int32_t> block_tables;     ///< (n_seqs, max_blocks_per_seq): block ids
  std::vector<float> k_pool, v_pool;     ///< (n_layers, n_blocks, block_size, kv_dim)

  /// Floats of one layer's pool: n_blocks * block_size * kv_dim.
  int64_t layer_floats() const { return n_blocks * block_size * kv_dim; }
};

/// Copies `c` into a pool of `block_size`-token blocks. With `scatter`, block ids are a random
/// permutation of 0 .. n_blocks-1 (no sequence's neighbouring blocks are neighbours in memory);
/// without, sequence s owns blocks s * max_blocks_per_seq, .. in order. Slots past n_ctx in a
/// sequence's last block hold random values nobody reads.
inline PagedKv make_paged(const ContiguousKv& c, int64_t block_size, bool scatter,
                          std::mt19937& rng) {
  PagedKv p;
  p.block_size = block_size;
  p.max_blocks_per_seq = (c.n_ctx + block_size - 1) / block_size;
  p.n_blocks = c.n_seqs * p.max_blocks_per_seq;
  p.kv_dim = c.kv_dim;
  for (int64_t s = 0; s <= c.n_seqs; ++s) p.query_start_loc.push_back(static_cast<int32_t>(s));
  p.seq_lens.assign(static_cast<size_t>(c.n_seqs), static_cast<int32_t>(c.n_ctx));
  p.block_tables.resize(static_cast<size_t>(p.n_blocks));
  std::iota(p.block_tables.begin(), p.block_tables.end(), 0);
  if (scatter) std::shuffle(p.block_tables.begin(), p.block_tables.end(), rng);
  p.k_pool.resize(static_cast<size_t>(c.n_layers * p.layer_floats()));
  p.v_pool.resize(p.k_pool.size());
  if (c.n_ctx % block_size != 0) {  // a partly filled last block: keep its tail non-zero too
    fill_uniform(p.k_pool, rng);
    fill_uniform(p.v_pool, rng);
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (int64_t s = 0; s < c.n_seqs; ++s) {
      const int32_t* table = p.block_tables.data() + s * p.max_blocks_per_seq;
      for (int64_t j = 0; j < c.n_ctx; ++j) {
        const int64_t slot = table[j / block_size] * block_size + j % block_size;
        const int64_t src = c.offset(l, s) + j * c.kv_dim;
        const int64_t dst = l * p.layer_floats() + slot * c.kv_dim;
        std::copy_n(c.k.begin() + src, c.kv_dim, p.k_pool.begin() + dst);
        std::copy_n(c.v.begin() + src, c.kv_dim, p.v_pool.begin() + dst);
      }
    }
  }
  return p;
}

// ---- timing -------------------------------------------------------------------------------------

/// Median microseconds per step of each of `n_variants` variants. `sample_us(v)` runs variant v
/// once (one timed sample, however the caller times it: wall clock on the CPU, CUDA events on
/// the GPU) and returns its microseconds per step. The variants take turns within each repeat,
/// so a noisy neighbour slows them alike; the first `warmup` rounds are not kept.
inline std::vector<double> median_us_taking_turns(size_t n_variants, int warmup, int repeats,
                                                  const std::function<double(size_t)>& sample_us) {
  std::vector<std::vector<double>> samples(n_variants);
  for (int r = 0; r < warmup + repeats; ++r) {
    for (size_t v = 0; v < n_variants; ++v) {
      const double us = sample_us(v);
      if (r >= warmup) samples[v].push_back(us);
    }
  }
  std::vector<double> us;
  for (const auto& s : samples) us.push_back(median(s));
  return us;
}

// ---- parity -------------------------------------------------------------------------------------

/// max_i |got[i] - want[i]| / max_i |want[i]|; +infinity on a size mismatch or a non-finite
/// value (a NaN must not pass a "<" test).
inline double max_rel_diff(std::span<const float> got, std::span<const float> want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(double(got[i]) - double(want[i]));
    if (!std::isfinite(d)) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, d);
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return diff / std::max(scale, 1e-30);
}

/// Throws InternalError naming `what` unless rel_diff < limit: timing a kernel that computes
/// something else would measure nothing.
inline void require_parity(double rel_diff, double limit, const std::string& what) {
  if (!(rel_diff < limit)) {
    throw InternalError(what + ": outputs differ from the contiguous kernel's, max rel diff " +
                        std::to_string(rel_diff) + " (limit " + std::to_string(limit) + ")");
  }
}

// ---- results ------------------------------------------------------------------------------------

/// Variant v of a row: 0 the contiguous kernel, 1 the paged kernel over one block per
/// sequence, 2 + i paged with block_sizes[i], scattered.
inline constexpr size_t kContiguous = 0, kOneBlock = 1, kFirstPaged = 2;

/// One context length's medians.
struct Row {
  int64_t n_ctx = 0;
  double kv_bytes = 0;               ///< K/V bytes one step reads (ContiguousKv::kv_bytes_per_step)
  std::vector<double> us;            ///< (2 + n_block_sizes): median microseconds per step
  std::vector<double> max_rel_diff;  ///< (2 + n_block_sizes): vs the contiguous output ([0] = 0)
};

/// Records one parity check of variant v (>= kOneBlock): row.max_rel_diff[v] keeps the largest
/// max_rel_diff(got, want) seen; throws InternalError (require_parity) naming `where` (n_ctx,
/// layer, ...) and the variant unless it stays below `limit`. block_sizes[i] is variant
/// kFirstPaged + i's.
inline void check_variant(Row& row, size_t v, std::span<const float> got,
                          std::span<const float> want, double limit, const std::string& where,
                          const std::vector<int64_t>& block_sizes) {
  row.max_rel_diff[v] = std::max(row.max_rel_diff[v], max_rel_diff(got, want));
  require_parity(
      row.max_rel_diff[v], limit,
      where + (v == kOneBlock ? ", paged 1 blk"
                              : ", paged bs=" + std::to_string(block_sizes[v - kFirstPaged])));
}

/// Prints the setup line both benchmarks start with: the attention shape, B, --layers and how
/// samples are taken; `per_sample` is inserted before the medians (e.g. "50 steps per sample, ",
/// or "").
inline void print_setup(const Shape& shape, const Options& o, const std::string& per_sample) {
  std::printf(
      "SmolLM2 attention: %lld heads over %lld KV heads, head_dim %lld, f32 | B = %lld "
      "sequences, one decode row each | layers %lld | %smedians of %d after %d warm-up\n",
      (long long)shape.n_heads, (long long)shape.n_kv_heads, (long long)shape.head_dim,
      (long long)o.batch, (long long)o.n_layers, per_sample.c_str(), o.repeats, o.warmup);
}

/// Prints `rows` as a markdown table: n_ctx, K/V MiB read per step, then each variant's median
/// us and its ratio to the contiguous kernel (GB/s for the contiguous kernel).
inline void print_table(const std::vector<Row>& rows, const std::vector<int64_t>& block_sizes,
                        const std::string& contiguous_label) {
  std::printf("| n_ctx | K/V MiB | %s us | GB/s | paged 1 blk us | ratio |",
              contiguous_label.c_str());
  for (int64_t bs : block_sizes) std::printf(" paged us (bs=%lld) | ratio |", (long long)bs);
  std::printf("\n|---:|---:|---:|---:|---:|---:|");
  for (size_t i = 0; i < block_sizes.size(); ++i) std::printf("---:|---:|");
  std::printf("\n");
  for (const Row& r : rows) {
    const double base = r.us[kContiguous];
    std::printf("| %lld | %.2f | %.1f | %.1f |", (long long)r.n_ctx, r.kv_bytes / 1048576.0, base,
                r.kv_bytes / (base * 1e3));
    for (size_t v = kOneBlock; v < r.us.size(); ++v)
      std::printf(" %.1f | %.2f |", r.us[v], r.us[v] / base);
    std::printf("\n");
  }
}

/// Prints the scattered layout's cost alone: paged bs=N over paged 1 blk, per n_ctx.
inline void print_layout_ratios(const std::vector<Row>& rows,
                                const std::vector<int64_t>& block_sizes) {
  std::printf("| n_ctx |");
  for (int64_t bs : block_sizes) std::printf(" bs=%lld / 1 blk |", (long long)bs);
  std::printf("\n|---:|");
  for (size_t i = 0; i < block_sizes.size(); ++i) std::printf("---:|");
  std::printf("\n");
  for (const Row& r : rows) {
    std::printf("| %lld |", (long long)r.n_ctx);
    for (size_t v = kFirstPaged; v < r.us.size(); ++v)
      std::printf(" %.2f |", r.us[v] / r.us[kOneBlock]);
    std::printf("\n");
  }
}

/// `rows` as JSON: per n_ctx the bytes read, then each variant's median us, GB/s, ratios to the
/// contiguous kernel and to paged 1 blk, and its parity.
inline json rows_json(const std::vector<Row>& rows, const std::vector<int64_t>& block_sizes) {
  json out = json::array();
  for (const Row& r : rows) {
    json variants = json::array();
    for (size_t v = 0; v < r.us.size(); ++v) {
      const std::string name = v == kContiguous ? "contiguous"
                               : v == kOneBlock ? "paged_one_block"
                                                : "paged_scattered";
      json j{{"variant", name}};
      if (v >= kFirstPaged) j["block_size"] = block_sizes[v - kFirstPaged];
      j["us"] = r.us[v];
      j["achieved_gbs"] = r.kv_bytes / (r.us[v] * 1e3);
      j["ratio_vs_contiguous"] = r.us[v] / r.us[kContiguous];
      j["ratio_vs_one_block"] = r.us[v] / r.us[kOneBlock];
      j["max_rel_diff_vs_contiguous"] = r.max_rel_diff[v];
      variants.push_back(j);
    }
    out.push_back({{"n_ctx", r.n_ctx}, {"kv_bytes_per_step", r.kv_bytes}, {"variants", variants}});
  }
  return out;
}

/// The JSON head both benchmarks write: provenance (the command, commit, `machine`, date), the
/// benchmark's name, then `before_settings` (machine facts), the attention shape and the flags.
inline json head_json(const std::string& benchmark, const Options& o, json machine,
                      const json& before_settings, const Shape& shape) {
  json j{{"provenance",
          {{"command", o.command},
           {"commit", git_commit()},
           {"machine", std::move(machine)},
           {"date", utc_date()}}},
         {"benchmark", benchmark}};
  j.update(before_settings);
  j.update(json{{"n_heads", shape.n_heads},
                {"n_kv_heads", shape.n_kv_heads},
                {"head_dim", shape.head_dim},
                {"batch", o.batch},
                {"layers", o.n_layers},
                {"repeats", o.repeats},
                {"warmup", o.warmup},
                {"seed", o.seed}});
  return j;
}

/// What both mains do around `run`: parse `app` (whose flags include add_options(app, o)),
/// record the command line in o.command, run, and report an lio::Error as "<name>: error: ..."
/// with exit status 1 (a flag error exits as CLI11 does).
inline int run_main(CLI::App& app, Options& o, int argc, char** argv,
                    const std::function<int()>& run) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  o.command = command_line(argc, argv);
  try {
    return run();
  } catch (const Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", app.get_name().c_str(), e.what());
    return 1;
  }
}

/// Writes `j` to `path` (pretty-printed). Throws InvalidArgument if the file cannot be written.
inline void write_json(const std::string& path, const json& j) {
  write_file_atomically(path, j.dump(2) + "\n");
}

}  // namespace lio::bench::indirection
