// bench_continuous_batching — chapter 05 on the real engine and model: one request trace
// replayed in real time through each scheduler variant, side by side in one run.
//   1. Static vs continuous batching (SchedulerConfig::policy): throughput and latency per
//      arrival rate, and their throughput ratio (Orca / vLLM report 2-4x over static systems).
//   2. Continuous batching with chunked prefill on vs off: what splitting prompts does to the
//      inter-token latency of the requests decoding beside them (Sarathi-Serve).
//   3. Preemption under a KV pool too small for the load (--small-kv-mib): recompute vs swap.
// The trace (trace.h): --requests requests, log-uniform prompt and output lengths, token ids
// drawn at random, greedy with EOS ignored (every request generates exactly its length),
// Poisson arrivals at each of --rates (inf = all at t = 0). The driver (replay.h) replays it in
// real time; latencies count from each request's trace arrival. Every variant of a pool runs on
// the same runner (weights, device) with a fresh Engine; parts 1-2 share the default pool
// (--kv-cache-mib), part 3 a second runner made after the first is released.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_util.h"
#include "lio/atomic_file.h"
#include "lio/cli_common.h"
#include "lio/engine.h"
#include "lio/error.h"
#include "replay.h"
#include "trace.h"

namespace {

using json = nlohmann::ordered_json;
using lio::bench::fmt;
using lio::bench::kVariants;
using lio::bench::load_average_1min;
using lio::bench::percentile;
using lio::bench::Run;
using lio::bench::TraceRequest;
using lio::bench::Variant;

// ============================================================================
// Reporting
// ============================================================================

/// NaN -> null (JSON has no NaN).
json num(double x) { return std::isnan(x) ? json(nullptr) : json(x); }

/// The summary of one run as the tables and the JSON show it.
json summarize(const Variant& v, const std::string& rate, const Run& r, int64_t kv_blocks,
               int64_t weight_bytes) {
  const lio::EngineStats& s = r.stats;
  const double rows =
      static_cast<double>(s.n_prompt_tokens_computed + s.n_decode_tokens + s.n_padding_tokens);
  return {{"variant", v.name},
          {"rate", rate},
          {"policy", lio::scheduling_policy_name(v.policy)},
          {"chunked_prefill", v.chunked_prefill},
          {"static_padding", v.policy == lio::SchedulingPolicy::Static && v.static_padding},
          {"padding_rows", s.n_padding_tokens},
          {"preemption", lio::preemption_mode_name(v.preemption)},
          {"kv_blocks", kv_blocks},
          {"requests", r.e2e_ms.size()},
          {"incomplete", r.incomplete},
          {"wall_s", r.wall_s},
          {"busy_s", r.busy_s},
          {"output_tokens", r.output_tokens},
          {"prompt_tokens", r.prompt_tokens},
          {"output_tok_s", static_cast<double>(r.output_tokens) / r.wall_s},
          {"total_tok_s", static_cast<double>(r.output_tokens + r.prompt_tokens) / r.wall_s},
          {"queue_p50_ms", num(percentile(r.queue_ms, 50))},
          {"ttft_p50_ms", num(percentile(r.ttft_ms, 50))},
          {"ttft_p99_ms", num(percentile(r.ttft_ms, 99))},
          {"tpot_p50_ms", num(percentile(r.tpot_ms, 50))},
          {"tpot_p99_ms", num(percentile(r.tpot_ms, 99))},
          {"itl_p50_ms", num(percentile(r.itl_ms, 50))},
          {"itl_p99_ms", num(percentile(r.itl_ms, 99))},
          {"e2e_p50_ms", num(percentile(r.e2e_ms, 50))},
          {"e2e_p99_ms", num(percentile(r.e2e_ms, 99))},
          {"preemptions", s.n_preemptions},
          {"blocks_swapped_out", s.n_blocks_swapped_out},
          {"blocks_swapped_in", s.n_blocks_swapped_in},
          {"recomputed_tokens", s.n_prompt_tokens_computed - r.prompt_tokens},
          {"steps", s.n_steps},
          {"rows_per_step", s.n_steps ? rows / static_cast<double>(s.n_steps) : 0.0},
          {"max_running", s.max_running},
          {"peak_blocks_used", s.peak_blocks_used},
          // Every step reads every weight once: bytes x steps / time inside step().
          {"weight_gb_s", r.busy_s > 0 ? static_cast<double>(weight_bytes) *
                                             static_cast<double>(s.n_steps) / r.busy_s / 1e9
                                       : 0.0},
          {"max_late_ms", r.max_late_ms}};
}

double get(const json& row, const char* key) {
  return row[key].is_null() ? NAN : row[key].get<double>();
}

/// One markdown table of the latency/throughput columns over the rows of `variants`.
void print_table(const json& runs, const std::vector<std::string>& variants) {
  std::printf(
      "| variant | rate (req/s) | out tok/s | total tok/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 "
      "ms | TPOT p99 ms | ITL p50 ms | ITL p99 ms | E2E p50 ms | preemptions | blocks swapped out "
      "| wall s |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const json& r : runs) {
    if (std::find(variants.begin(), variants.end(), r["variant"].get<std::string>()) ==
        variants.end())
      continue;
    std::printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %lld | %lld | %s |\n",
                r["variant"].get<std::string>().c_str(), r["rate"].get<std::string>().c_str(),
                fmt(get(r, "output_tok_s")).c_str(), fmt(get(r, "total_tok_s")).c_str(),
                fmt(get(r, "ttft_p50_ms")).c_str(), fmt(get(r, "ttft_p99_ms")).c_str(),
                fmt(get(r, "tpot_p50_ms")).c_str(), fmt(get(r, "tpot_p99_ms")).c_str(),
                fmt(get(r, "itl_p50_ms")).c_str(), fmt(get(r, "itl_p99_ms")).c_str(),
                fmt(get(r, "e2e_p50_ms")).c_str(), r["preemptions"].get<long long>(),
                r["blocks_swapped_out"].get<long long>(), fmt(get(r, "wall_s"), 2).c_str());
  }
}

/// "2" -> 2, "inf" -> +inf. Throws InvalidArgument for anything not a positive number.
double parse_rate(const std::string& text) {
  if (text == "inf") return INFINITY;
  size_t used = 0;
  double rate = 0;
  try {
    rate = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(rate > 0))
    throw lio::InvalidArgument("--rates: '" + text + "' is not a rate > 0 or inf");
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Chapter 05: static vs continuous batching, chunked prefill, preemption on a request trace",
      "bench_continuous_batching"};
  lio::CommonOptions o;
  lio::add_model_flags(app, o);
  lio::add_device_flag(app, o);
  lio::add_kv_pool_flags(app, o, /*engine=*/true);
  lio::bench::TraceShape shape;
  int64_t n_requests = 200, max_num_seqs = 64, max_num_batched_tokens = 512, small_kv_mib = 0,
          swap_space_mib = 1024;
  uint64_t seed = 1;
  double small_kv_fraction = 0.2;
  std::vector<std::string> rate_args = {"10", "40", "inf"};
  std::vector<std::string> variant_names;
  std::string json_path;
  app.add_option("--requests", n_requests, "Requests in the trace")->capture_default_str();
  app.add_option("--seed", seed, "Trace seed (lengths, token ids, arrival gaps)")
      ->capture_default_str();
  app.add_option("--rates", rate_args, "Poisson arrival rates, requests/s (inf = all at t = 0)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--scale", shape.scale,
                 "Multiplies every prompt and output length (smaller runs on a CPU)")
      ->capture_default_str();
  app.add_option("--min-prompt", shape.min_prompt, "Shortest prompt, tokens (before --scale)")
      ->capture_default_str();
  app.add_option("--max-prompt", shape.max_prompt, "Longest prompt, tokens (before --scale)")
      ->capture_default_str();
  app.add_option("--min-output", shape.min_output, "Shortest output, tokens (before --scale)")
      ->capture_default_str();
  app.add_option("--max-output", shape.max_output, "Longest output, tokens (before --scale)")
      ->capture_default_str();
  app.add_option("--max-num-seqs", max_num_seqs, "Sequences in one step at most")
      ->capture_default_str();
  app.add_option(
         "--max-num-batched-tokens", max_num_batched_tokens,
         "Tokens (rows) in one step at most; with chunked prefill off, the longest prompt allowed")
      ->capture_default_str();
  app.add_option(
         "--small-kv-mib", small_kv_mib,
         "Part 3's KV pool, MiB (0 = --small-kv-fraction of the concurrent demand, at least the "
         "longest request)")
      ->capture_default_str();
  app.add_option("--small-kv-fraction", small_kv_fraction,
                 "Part 3 with --small-kv-mib 0: pool = this x max-num-seqs x mean request tokens")
      ->capture_default_str();
  app.add_option("--swap-space-mib", swap_space_mib, "Host swap space for swap preemption, MiB")
      ->capture_default_str();
  app.add_option("--variants", variant_names,
                 "Run only these (static, continuous, static_no_padding, continuous_no_chunk, "
                 "small_kv_recompute, small_kv_swap; "
                 "default all; tables and ratios need their pairs)")
      ->delimiter(',');
  app.add_option("--out-json", json_path, "Write every number here");

  return lio::run_main(app, argc, argv, [&]() -> int {
    if (n_requests < 1 || max_num_seqs < 1 || max_num_batched_tokens < 1 || small_kv_mib < 0 ||
        swap_space_mib < 0)
      throw lio::InvalidArgument(
          "--requests, --max-num-seqs, --max-num-batched-tokens must be >= 1; MiB >= 0");
    if (shape.min_prompt < 1 || shape.min_prompt > shape.max_prompt || shape.min_output < 1 ||
        shape.min_output > shape.max_output || !(shape.scale > 0) || !(small_kv_fraction > 0))
      throw lio::InvalidArgument(
          "lengths need 1 <= min <= max; --scale and --small-kv-fraction > 0");
    std::vector<double> rates;
    for (const std::string& r : rate_args) rates.push_back(parse_rate(r));
    std::vector<Variant> variants;
    for (const Variant& v : kVariants)
      if (variant_names.empty() ||
          std::find(variant_names.begin(), variant_names.end(), v.name) != variant_names.end())
        variants.push_back(v);
    for (const std::string& name : variant_names)
      if (std::none_of(std::begin(kVariants), std::end(kVariants),
                       [&](const Variant& v) { return name == v.name; }))
        throw lio::InvalidArgument("--variants: unknown variant '" + name + "'");
    lio::apply_threads(o.threads);
    lio::LoadedModel m = lio::load_from_options(o);
    const lio::Tokenizer& tok = *m.tokenizer;
    std::unique_ptr<lio::ModelRunner> runner = lio::runner_from_options(m, o);
    if (!runner) return 0;  // a worker rank, done serving the driver (chapter 08)
    const int64_t vocab = runner->config().vocab_size;
    const std::vector<TraceRequest> trace = lio::bench::make_trace(n_requests, shape, vocab, seed);

    // ---- the trace and the pools ----
    int64_t sum_prompt = 0, sum_output = 0, longest = 0, longest_prompt = 0, longest_output = 0;
    int64_t min_prompt_seen = INT64_MAX, min_output_seen = INT64_MAX;
    for (const TraceRequest& r : trace) {
      const auto np = static_cast<int64_t>(r.prompt.size());
      sum_prompt += np;
      sum_output += r.output_tokens;
      longest = std::max(longest, np + r.output_tokens);
      longest_prompt = std::max(longest_prompt, np);
      longest_output = std::max(longest_output, r.output_tokens);
      min_prompt_seen = std::min(min_prompt_seen, np);
      min_output_seen = std::min(min_output_seen, r.output_tokens);
    }
    const bool any_unchunked = std::any_of(variants.begin(), variants.end(),
                                           [](const Variant& v) { return !v.chunked_prefill; });
    if (any_unchunked && longest_prompt > max_num_batched_tokens) {  // add_request would refuse it
      throw lio::InvalidArgument(
          "the longest prompt has " + std::to_string(longest_prompt) +
          " tokens; with chunked prefill off a step holds --max-num-batched-tokens " +
          std::to_string(max_num_batched_tokens) + " (raise it or lower --max-prompt)");
    }
    const double mean_tokens =
        static_cast<double>(sum_prompt + sum_output) / static_cast<double>(n_requests);
    const int64_t block_tokens = runner->kv_pool().block_size();
    const int64_t block_bytes = runner->kv_pool().block_bytes();
    const double block_mib = static_cast<double>(block_bytes) / 1048576.0;
    const int64_t main_blocks = runner->kv_pool().n_blocks();
    // The concurrent demand: every seat full of a mean-length request.
    const double demand_tokens =
        static_cast<double>(std::min(max_num_seqs, n_requests)) * mean_tokens;
    if (small_kv_mib == 0) {
      const int64_t blocks = std::max<int64_t>(
          static_cast<int64_t>(
              std::ceil(small_kv_fraction * demand_tokens / static_cast<double>(block_tokens))),
          (longest + block_tokens - 1) / block_tokens + 1);  // the longest request alone must fit
      small_kv_mib = (blocks * block_bytes + 1048575) / 1048576;
    }
    const std::string device = runner->device_description();
    const std::string cpu = lio::bench::cpu_name();
    const std::string command = lio::bench::command_line(argc, argv);
    const std::string commit = lio::bench::git_commit();
    const std::string date = lio::bench::utc_date();
    const std::string driver = o.device == "cpu" ? "" : lio::bench::gpu_driver();
    std::printf("# bench_continuous_batching\n\n");
    std::printf("- Command: `%s`\n", command.c_str());
    std::printf("- Commit: %s; date %s\n", commit.c_str(), date.c_str());
    // Spinning OpenMP threads stall for whole time slices when other work shares the cores.
    const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
    std::printf("- Machine: %s | host %s | OMP_WAIT_POLICY %s%s%s\n", device.c_str(), cpu.c_str(),
                wait_policy ? wait_policy : "unset", driver.empty() ? "" : " | GPU driver ", driver.c_str());
    std::printf("- Model: %s (%.1f MiB of weights)\n", lio::bench::local_path_free(m.path).c_str(),
                static_cast<double>(runner->backend().weight_bytes()) / 1048576.0);
    std::printf(
        "- Trace: %lld requests, seed %llu; prompts %lld-%lld tokens (mean %.1f), outputs "
        "%lld-%lld tokens "
        "(mean %.1f): log-uniform %lld-%lld and %lld-%lld times --scale %.3g; random token ids, "
        "greedy, EOS "
        "ignored; Poisson arrivals\n",
        (long long)n_requests, (unsigned long long)seed, (long long)min_prompt_seen,
        (long long)longest_prompt,
        static_cast<double>(sum_prompt) / static_cast<double>(n_requests),
        (long long)min_output_seen, (long long)longest_output,
        static_cast<double>(sum_output) / static_cast<double>(n_requests),
        (long long)shape.min_prompt, (long long)shape.max_prompt, (long long)shape.min_output,
        (long long)shape.max_output, shape.scale);
    std::printf(
        "- Scheduler: max_num_seqs %lld, max_num_batched_tokens %lld; static batching uses chunked "
        "prefill too\n",
        (long long)max_num_seqs, (long long)max_num_batched_tokens);
    std::printf(
        "- KV pool: %lld blocks x %lld tokens (%.2f MiB a block); part 3: %lld MiB (%lld blocks, "
        "%.0f%% of "
        "the %.0f-token concurrent demand), swap space %lld MiB\n",
        (long long)main_blocks, (long long)block_tokens, block_mib, (long long)small_kv_mib,
        (long long)(small_kv_mib * 1048576 / block_bytes),
        100.0 * static_cast<double>(small_kv_mib * 1048576 / block_bytes * block_tokens) /
            demand_tokens,
        demand_tokens, (long long)swap_space_mib);
    const double load_start = load_average_1min();
    std::printf(
        "- Load average (1 min) at the start: %s (ours alone adds about the thread count on a CPU "
        "run)\n",
        fmt(load_start, 2).c_str());
    std::printf(
        "- Throughput = tokens / wall time from the first arrival to the last finish (at a finite "
        "rate it "
        "cannot exceed what arrives); latencies from each request's arrival; percentiles "
        "interpolated\n\n");
    std::fflush(stdout);

    auto rate_label = [](double r) {
      return std::isinf(r) ? std::string("inf") : fmt(r, r == std::floor(r) ? 0 : 2);
    };
    auto engine_config = [&](const Variant& v) {
      lio::EngineConfig c;
      c.scheduler.max_num_seqs = max_num_seqs;
      c.scheduler.max_num_batched_tokens = max_num_batched_tokens;
      c.scheduler.policy = v.policy;
      c.scheduler.enable_chunked_prefill = v.chunked_prefill;
      c.scheduler.preemption = v.preemption;
      c.scheduler.static_padding = v.static_padding;
      c.swap_space_mib = swap_space_mib;
      return c;
    };
    // A few requests first on each runner: lazy allocations and first-touch costs stay out.
    auto warm_up = [&](lio::ModelRunner& r) {
      lio::bench::TraceShape w;
      w.min_prompt = w.max_prompt = 32;
      w.min_output = w.max_output = 8;
      const std::vector<TraceRequest> t = lio::bench::make_trace(4, w, vocab, seed + 1);
      const Variant& continuous = kVariants[1];
      replay(r, tok, engine_config(continuous), t, lio::bench::arrival_times_s(t, INFINITY));
    };

    // ---- the runs: the default pool's variants, then the small pool's ----
    json runs = json::array();
    int64_t small_blocks = 0;  // the small pool's, once made
    const size_t n_runs = variants.size() * rates.size();
    size_t k = 0;
    for (const bool small : {false, true}) {
      if (std::none_of(variants.begin(), variants.end(),
                       [&](const Variant& v) { return v.small_kv == small; }))
        continue;
      if (small) {
        runner.reset();  // one pool on the device at a time
        lio::CommonOptions so = o;
        so.kv_pool.kv_cache_mib = small_kv_mib;
        runner = lio::runner_from_options(m, so);
        small_blocks = runner->kv_pool().n_blocks();
      }
      warm_up(*runner);
      for (const double rate : rates) {
        const std::vector<double> arrivals = lio::bench::arrival_times_s(trace, rate);
        for (const Variant& v : variants) {
          if (v.small_kv != small) continue;
          const Run r = replay(*runner, tok, engine_config(v), trace, arrivals);
          runs.push_back(summarize(v, rate_label(rate), r, runner->kv_pool().n_blocks(),
                                   runner->backend().weight_bytes()));
          std::fprintf(stderr,
                       "[%zu/%zu] %s at %s req/s: %.1f s, %.1f output tok/s, %lld preemptions\n",
                       ++k, n_runs, v.name, rate_label(rate).c_str(), r.wall_s,
                       runs.back()["output_tok_s"].get<double>(), (long long)r.stats.n_preemptions);
        }
      }
    }
    auto find = [&](const std::string& variant, const std::string& rate) -> const json* {
      for (const json& r : runs)
        if (r["variant"] == variant && r["rate"] == rate) return &r;
      return nullptr;  // not selected by --variants
    };

    // ---- tables ----
    auto ran = [&](const char* variant) {
      return std::any_of(runs.begin(), runs.end(),
                         [&](const json& r) { return r["variant"] == variant; });
    };
    std::printf("## 1. Static vs continuous batching\n\n");
    std::printf(
        "`static` is HF `generate`-style: a finished request's row keeps decoding padding until "
        "its batch ends; `static_no_padding` lets it leave (cheaper steps, same admissions).\n\n");
    print_table(runs, {"static", "static_no_padding", "continuous"});
    std::printf(
        "\n| rate (req/s) | static out tok/s | continuous out tok/s | continuous / static | "
        "continuous / static_no_padding | TTFT p50 static / continuous | E2E p50 static / "
        "continuous |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
    json ratios = json::array();
    for (const double rate : rates) {
      const json* sp = find("static", rate_label(rate));
      const json* cp = find("continuous", rate_label(rate));
      const json* np = find("static_no_padding", rate_label(rate));
      if (sp == nullptr || cp == nullptr) continue;
      const json& s = *sp;
      const json& c = *cp;
      const double ratio = get(c, "output_tok_s") / get(s, "output_tok_s");
      const double ratio_np = np ? get(c, "output_tok_s") / get(*np, "output_tok_s") : NAN;
      std::printf("| %s | %s | %s | %.2fx | %s | %.2fx | %.2fx |\n", rate_label(rate).c_str(),
                  fmt(get(s, "output_tok_s")).c_str(), fmt(get(c, "output_tok_s")).c_str(), ratio,
                  np ? (fmt(ratio_np, 2) + "x").c_str() : "-",
                  get(s, "ttft_p50_ms") / get(c, "ttft_p50_ms"),
                  get(s, "e2e_p50_ms") / get(c, "e2e_p50_ms"));
      ratios.push_back({{"rate", rate_label(rate)},
                        {"continuous_over_static_throughput", ratio},
                        {"continuous_over_static_no_padding_throughput", num(ratio_np)}});
    }
    if (!ratios.empty()) {  // the last rate listed is taken as the highest load
      const double top = ratios.back()["continuous_over_static_throughput"].get<double>();
      std::printf(
          "\nContinuous / static output throughput at the last rate (%s req/s): %.2fx (target >= "
          "2x: %s). "
          "Below capacity both serve what arrives, so the ratio tends to 1.\n",
          ratios.back()["rate"].get<std::string>().c_str(), top,
          top >= 2.0 ? "**met**" : "**missed**");
    }
    std::printf("\n");

    std::printf("## 2. Chunked prefill on vs off (continuous batching)\n\n");
    print_table(runs, {"continuous", "continuous_no_chunk"});
    if (ran("small_kv_recompute") || ran("small_kv_swap")) {
      std::printf(
          "\n## 3. Preemption: a %lld MiB KV pool (%lld blocks), recompute vs swap (%lld MiB host "
          "swap space)\n\n",
          (long long)small_kv_mib, (long long)small_blocks, (long long)swap_space_mib);
      print_table(runs, {"small_kv_recompute", "small_kv_swap"});
    }

    const double load_end = load_average_1min();
    std::printf("\n## Engine counters (load average at the end: %s)\n\n", fmt(load_end, 2).c_str());
    std::printf(
        "| variant | rate (req/s) | KV blocks | peak blocks | steps | rows/step | padding rows | max "
        "running | busy %% | weight GB/s (busy) | recomputed tokens | blocks swapped in | "
        "incomplete | max add lag ms |\n");
    std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const json& r : runs) {
      std::printf(
          "| %s | %s | %lld | %lld | %lld | %.1f | %lld | %lld | %.0f%% | %.1f | %lld | %lld | "
          "%lld | %.1f |\n",
          r["variant"].get<std::string>().c_str(), r["rate"].get<std::string>().c_str(),
          r["kv_blocks"].get<long long>(), r["peak_blocks_used"].get<long long>(),
          r["steps"].get<long long>(), get(r, "rows_per_step"), r["padding_rows"].get<long long>(),
          r["max_running"].get<long long>(),
          100 * get(r, "busy_s") / get(r, "wall_s"), get(r, "weight_gb_s"),
          r["recomputed_tokens"].get<long long>(), r["blocks_swapped_in"].get<long long>(),
          r["incomplete"].get<long long>(), get(r, "max_late_ms"));
    }

    if (!json_path.empty()) {
      json out;
      out["provenance"] = {{"command", command},
                           {"commit", commit},
                           {"machine", "host " + cpu + " | " + device + (driver.empty() ? "" : " | driver " + driver)},
                           {"date", date}};
      out["settings"] = {
          {"command", command},
          {"device", device},
          {"host_cpu", cpu},
          {"omp_wait_policy", wait_policy ? wait_policy : "unset"},
          {"model", lio::bench::local_path_free(m.path)},
          {"weight_bytes", runner->backend().weight_bytes()},
          {"requests", n_requests},
          {"seed", seed},
          {"scale", shape.scale},
          {"prompt_tokens", {shape.min_prompt, shape.max_prompt}},
          {"output_tokens", {shape.min_output, shape.max_output}},
          {"mean_prompt_tokens", static_cast<double>(sum_prompt) / static_cast<double>(n_requests)},
          {"mean_output_tokens", static_cast<double>(sum_output) / static_cast<double>(n_requests)},
          {"rates", rate_args},
          {"max_num_seqs", max_num_seqs},
          {"max_num_batched_tokens", max_num_batched_tokens},
          {"block_size", block_tokens},
          {"kv_blocks", main_blocks},
          {"small_kv_mib", small_kv_mib},
          {"small_kv_blocks", small_blocks},
          {"swap_space_mib", swap_space_mib},
          {"load_average_start", num(load_start)},
          {"load_average_end", num(load_end)}};
      out["runs"] = runs;
      out["continuous_over_static"] = ratios;
      lio::write_file_atomically(json_path, out.dump(2) + "\n");
    }
    return 0;
  });
}
