// batch.cpp — `lio batch`: the offline batch front end over the Engine (see batch.h).
#include "batch.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "batch_requests.h"
#include "lio/atomic_file.h"
#include "lio/cli_parse.h"
#include "lio/cpu_backend.h"
#include "lio/engine.h"
#include "lio/error.h"
#include "lio/model_runner.h"

namespace lio {

// =====================================================================================
// Flags
// =====================================================================================

CLI::App* add_batch_subcommand(CLI::App& parent, CommonOptions& o, BatchOptions& b) {
  CLI::App* app = parent.add_subcommand(
      "batch",
      "Run every request of a JSONL file through one engine (offline batched generation); one JSON "
      "result line per request, in input order");
  add_model_flags(*app, o);
  o.activations = "auto";  // issue 44: the serving commands' default, chosen by measurement
  add_device_flag(*app, o);
  app->add_option("--prompts", b.prompts_path,
                  "JSONL input, one request a line: {\"prompt\": ...} | {\"messages\": [...]} | "
                  "{\"prompt_token_ids\": [...]}, optionally with max_tokens, temperature, top_k, "
                  "top_p, min_p, repeat_penalty, seed, stop, ignore_eos, n (samples sharing the prompt's "
                  "KV blocks), response_format (json_object, json_schema) or grammar (EBNF): "
                  "structured outputs")
      ->required();
  app->add_option("--out", b.out_path, "Write the result lines here (default: stdout)");
  app->add_option("--summary", b.summary_path,
                  "Write the run's summary (throughput, latencies, settings) as JSON here");

  // Per-request defaults: greedy, as a benchmark wants; lines override them.
  o.max_tokens = 128;
  o.sampler = SamplerConfig{};
  app->add_option("--max-tokens", o.max_tokens, "Default: generate at most this many tokens")
      ->capture_default_str();
  app->add_option("--stop", o.stop, "Default stop text (repeatable; not included in the output)");
  app->add_option("--temperature", o.sampler.temperature,
                  "Default sampling temperature; 0 = greedy")
      ->capture_default_str();
  app->add_option("--top-k", o.sampler.top_k, "Default top-k; 0 = off")->capture_default_str();
  app->add_option("--top-p", o.sampler.top_p, "Default nucleus mass in (0, 1]; 1 = off")
      ->capture_default_str();
  app->add_option("--min-p", o.sampler.min_p, "Default min-p; 0 = off")->capture_default_str();
  app->add_option("--repeat-penalty", o.sampler.repeat_penalty,
                  "Default repetition penalty; 1 = off")
      ->capture_default_str();
  app->add_option("--seed", o.sampler.seed,
                  "Base RNG seed: a line without \"seed\" gets this + its 0-based index")
      ->capture_default_str();
  app->add_flag("--ignore-eos", b.ignore_eos,
                "Default: keep generating past EOS (fixed lengths for benchmarks)");

  app->add_option("--max-num-seqs", b.max_num_seqs, "Sequences in one step at most")
      ->capture_default_str();
  app->add_option("--max-num-batched-tokens", b.max_num_batched_tokens,
                  "Tokens (rows) in one step at most")
      ->capture_default_str();
  add_kv_pool_flags(*app, o, /*engine=*/true);
  add_speculative_flags(*app, o);
  app->add_option("--prefix-cache", b.prefix_cache,
                  "Reuse the K/V of cached prompt prefixes: none, hash (full blocks, vLLM) or radix "
                  "(token-level tree, SGLang)")
      ->capture_default_str();
  app->add_option("--scheduling", b.scheduling,
                  "continuous (requests join every step) or static (a batch runs to its end before the next)")
      ->capture_default_str();
  app->add_option("--preemption", b.preemption,
                  "When KV blocks run out: recompute (drop and prefill again) or swap (copy to host and back)")
      ->capture_default_str();
  app->add_option("--swap-space-mib", b.swap_space_mib, "Host swap space for --preemption swap (MiB)")
      ->capture_default_str();
  app->add_flag("--no-chunked-prefill", b.no_chunked_prefill,
                "Run each prompt whole in one step (or wait) instead of splitting it over steps");
  app->add_flag("--profile", b.profile,
                "Time every CPU op (each matmul by weight, attention, norms, ...) apart for the decode-only "
                "steps and the steps that ran prompt rows: a table on stderr and \"profile\" in the summary "
                "(CPU only; two clock reads an op)");
  // --json is one of the shared flags; the result lines are JSON anyway, so here it makes
  // stderr's final summary line JSON (the --summary object) instead of a sentence.
  app->get_option("--json")->description(
      "Print the final summary line on stderr as JSON (the --summary object) instead of text");
  return app;
}

// =====================================================================================
// Running
// =====================================================================================

namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

/// What one sample of a request ended with: the text and tokens of every step's output, and the
/// engine's last output itself for the rest (finish reason, timings, preemptions, chapter 06's
/// draft counts), kept whole rather than copied field by field.
struct SampleResult {
  bool done = false;
  std::string text;
  std::vector<int32_t> token_ids;
  RequestOutput last;  ///< the output that finished the sample (valid once done)
};

/// What one request ended with (its output line): n samples (1 unless the line asked for n).
struct BatchResult {
  std::string error;  ///< set when the engine refused the request
  int64_t n_prompt_tokens = 0;
  std::vector<SampleResult> samples = std::vector<SampleResult>(1);
  /// True once refused or every sample finished.
  bool done() const {
    return !error.empty() || std::all_of(samples.begin(), samples.end(), [](const SampleResult& r) { return r.done; });
  }
};

/// One sample's fields (timings null for a refused request, tpot_ms null below two tokens).
void sample_json(json& j, const SampleResult& r, bool ok) {
  j["text"] = r.text;
  j["token_ids"] = r.token_ids;
  const RequestOutput& o = r.last;
  j["finish_reason"] = o.finish_reason ? json(finish_reason_name(*o.finish_reason)) : json(nullptr);
  j["n_generated_tokens"] = r.token_ids.size();
  j["queue_ms"] = ok ? json(o.queue_ms) : json(nullptr);
  j["ttft_ms"] = ok ? json(o.ttft_ms) : json(nullptr);
  j["tpot_ms"] = ok && r.token_ids.size() > 1 ? json(o.tpot_ms) : json(nullptr);
  j["e2e_ms"] = ok ? json(o.e2e_ms) : json(nullptr);
  j["n_preemptions"] = o.n_preemptions;
  if (o.n_spec_drafts > 0)
    j.update(spec_decode_json(o.n_spec_drafts, o.n_spec_draft_tokens, o.n_spec_accepted_tokens));
}

/// The output line of request `index`: the fields listed in batch.h for its first sample, and
/// with n > 1 a "samples" list holding every sample's fields (sample_index 0 .. n-1).
json result_json(int64_t index, const BatchResult& r) {
  json j;
  j["index"] = index;
  if (!r.error.empty()) j["error"] = r.error;
  j["n_prompt_tokens"] = r.n_prompt_tokens;
  sample_json(j, r.samples.front(), r.error.empty());
  if (r.samples.size() > 1) {
    json all = json::array();
    for (size_t i = 0; i < r.samples.size(); ++i) {
      json one;
      one["sample_index"] = i;
      sample_json(one, r.samples[i], r.error.empty());
      all.push_back(std::move(one));
    }
    j["samples"] = std::move(all);
  }
  return j;
}

/// Median of `v` (0 when empty).
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// The q-quantile of `v` (0 <= q <= 1), nearest rank; 0 when empty.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto k = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, k == 0 ? 0 : k - 1)];
}

/// Wall seconds from `t0` to now.
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// --profile's summary: for the decode-only steps and for the others, the steps' count and mean
/// wall ms, and each op (largest first) with its calls and ms per step, its share of the step,
/// and for a matmul the GB/s its packed weights were read at. `ops[k]`: op -> summed times over
/// `steps[k]` steps of `seconds[k]` wall seconds.
json profile_json(const std::map<std::string, CpuOpTime>& decode_ops, double decode_s, int64_t decode_steps,
                  const std::map<std::string, CpuOpTime>& other_ops, double other_s, int64_t other_steps) {
  json out = json::object();
  auto part = [](const std::map<std::string, CpuOpTime>& ops, double seconds, int64_t steps) {
    std::vector<CpuOpTime> sorted;
    for (const auto& [name, t] : ops) sorted.push_back(t);
    std::sort(sorted.begin(), sorted.end(),
              [](const CpuOpTime& a, const CpuOpTime& b) { return a.total_ms > b.total_ms; });
    const double n = static_cast<double>(std::max<int64_t>(steps, 1));
    const double step_ms = seconds * 1e3 / n;
    double ops_ms = 0;
    json rows = json::array();
    for (const CpuOpTime& t : sorted) {
      const double ms = t.total_ms / n;
      ops_ms += ms;
      json r = {{"op", t.op}, {"calls_per_step", static_cast<double>(t.calls) / n}, {"ms_per_step", ms},
                {"share", step_ms > 0 ? ms / step_ms : 0.0}};
      if (t.weight_bytes > 0) r["weight_gbs"] = t.weight_bytes / (t.total_ms * 1e-3) / 1e9;
      rows.push_back(r);
    }
    rows.push_back({{"op", "outside every op"},
                    {"ms_per_step", step_ms - ops_ms},
                    {"share", step_ms > 0 ? (step_ms - ops_ms) / step_ms : 0.0}});
    return json{{"steps", steps}, {"step_ms", step_ms}, {"ops", rows}};
  };
  out["decode_steps"] = part(decode_ops, decode_s, decode_steps);
  out["other_steps"] = part(other_ops, other_s, other_steps);
  return out;
}

/// Prints profile_json's tables on stderr.
void print_profile(const json& profile) {
  for (const char* key : {"decode_steps", "other_steps"}) {
    const json& p = profile[key];
    std::fprintf(stderr, "\nprofile, %s (%lld steps, %.3f ms each; each op timed on the calling thread, "
                 "fork/join and waits included)\n%-18s %9s %10s %7s %9s\n",
                 std::string(key) == "decode_steps" ? "decode-only steps" : "steps with prompt rows",
                 (long long)p["steps"].get<int64_t>(), p["step_ms"].get<double>(), "op", "calls/step", "ms/step",
                 "share", "GB/s");
    for (const json& r : p["ops"]) {
      std::fprintf(stderr, "%-18s ", r["op"].get<std::string>().c_str());
      if (r.contains("calls_per_step"))
        std::fprintf(stderr, "%9.2f", r["calls_per_step"].get<double>());
      else
        std::fprintf(stderr, "%9s", "");
      std::fprintf(stderr, " %10.3f %6.1f%%", r["ms_per_step"].get<double>(), 100.0 * r["share"].get<double>());
      if (r.contains("weight_gbs")) std::fprintf(stderr, " %9.2f", r["weight_gbs"].get<double>());
      std::fprintf(stderr, "\n");
    }
  }
}

/// One-line progress bar on stderr, redrawn at most every 100 ms; silent unless stderr is a
/// terminal (logs and pipes get only the final summary).
class ProgressBar {
 public:
  explicit ProgressBar(int64_t n_total) : n_total_(n_total), enabled_(isatty(STDERR_FILENO) == 1) {}
  /// Redraws when enabled and due (always when `force`).
  void update(int64_t n_done, int64_t n_output_tokens, double elapsed_s, bool force = false) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (!force && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * n_done / std::max<int64_t>(n_total_, 1));
    std::fprintf(stderr, "\r\033[K[%s%s] %lld/%lld requests, %.1f output tok/s",
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                 (long long)n_done, (long long)n_total_,
                 elapsed_s > 0 ? n_output_tokens / elapsed_s : 0.0);
    drawn_ = true;
  }
  /// Clears the bar so other text can be printed on a clean line.
  void clear() {
    if (enabled_ && drawn_) std::fprintf(stderr, "\r\033[K");
    drawn_ = false;
  }

 private:
  int64_t n_total_;
  bool enabled_;
  bool drawn_ = false;
  Clock::time_point last_{};
};

}  // namespace

int run_batch(const CommonOptions& o, const BatchOptions& b) {
  // ---- check everything that needs no model: flags, output paths, the whole prompts file ----
  apply_threads(o.threads);
  SamplingParams defaults;
  defaults.max_tokens = o.max_tokens;
  defaults.stop = o.stop;
  defaults.ignore_eos = b.ignore_eos;
  defaults.sampler = o.sampler;
  defaults.validate();
  EngineConfig engine_config;
  engine_config.scheduler.max_num_seqs = b.max_num_seqs;
  engine_config.scheduler.max_num_batched_tokens = b.max_num_batched_tokens;
  engine_config.scheduler.enable_chunked_prefill = !b.no_chunked_prefill;
  engine_config.scheduler.validate();
  engine_config.prefix_cache = parse_prefix_cache_mode(b.prefix_cache);
  engine_config.scheduler.policy = parse_scheduling_policy(b.scheduling);
  engine_config.scheduler.preemption = parse_preemption_mode(b.preemption);
  engine_config.swap_space_mib = b.swap_space_mib;
  engine_config.enforce_eager = o.enforce_eager;
  if (b.swap_space_mib < 0) throw InvalidArgument("--swap-space-mib must be >= 0, got " + std::to_string(b.swap_space_mib));
  parse_device(o.device);  // a bad --device fails before the file is read
  parse_spec_method(o.spec_method);

  if (!std::filesystem::exists(b.prompts_path))
    throw InvalidArgument("--prompts " + single_quoted(b.prompts_path) + " does not exist");
  std::ifstream in(b.prompts_path);
  if (!in) throw InvalidArgument("cannot read --prompts " + single_quoted(b.prompts_path));
  std::vector<BatchRequest> requests = parse_batch_requests(in, b.prompts_path, defaults);

  // Both files are written atomically: the lines go to a temporary beside --out and the file
  // appears whole when the batch ends; a killed batch leaves no half file (stdout streams).
  auto open_output = [](const std::string& path, const char* flag) {
    try {
      return std::make_unique<AtomicFileWriter>(path);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string(flag) + ": " + e.what());  // "--out: cannot write 'x': reason"
    }
  };
  std::unique_ptr<AtomicFileWriter> out_file, summary_file;
  if (!b.out_path.empty()) out_file = open_output(b.out_path, "--out");
  if (!b.summary_path.empty()) summary_file = open_output(b.summary_path, "--summary");
  std::ostream& out = out_file ? out_file->stream() : std::cout;

  // ---- model, runner, engine ----
  LoadedModel m = load_from_options(o);
  engine_config.speculative = speculative_from_options(m, o);
  std::unique_ptr<ModelRunner> runner = runner_from_options(m, o);
  if (!runner) return 0;  // a worker rank, done serving the driver (chapter 08)
  DraftRunner draft = draft_from_options(m, *runner, o, engine_config.speculative);
  const KvPool& pool = runner->kv_pool();
  const double pool_mib = pool.size_bytes() / 1048576.0;
  Engine engine(*runner, *m.tokenizer, engine_config, draft.runner.get());

  std::fprintf(stderr, "model   %s (%s, %s weights)\n", m.path.c_str(), m.config.name.c_str(),
               o.dtype.c_str());
  std::fprintf(stderr, "device  %s\n", runner->device_description().c_str());
  if (const std::string graphs = describe_graph_capture(engine.graph_capture(), o); !graphs.empty()) {
    std::fprintf(stderr, "graphs  %s\n", graphs.c_str());
  }
  std::fprintf(
      stderr, "KV pool %.1f MiB%s, %s: %lld blocks x %lld tokens = %lld tokens (context %lld)\n",
      pool_mib, o.kv_pool.kv_cache_mib ? "" : " (default budget)", lio::kv_cache_dtype_name(pool.dtype()),
      (long long)pool.n_blocks(),
      (long long)pool.block_size(), (long long)pool.n_slots(), (long long)m.config.context_length);
  std::fprintf(
      stderr,
      "limits  max_num_seqs %lld, max_num_batched_tokens %lld, chunked prefill %s, prefix cache %s; %zu "
      "requests\n",
      (long long)b.max_num_seqs, (long long)b.max_num_batched_tokens, b.no_chunked_prefill ? "off" : "on",
      b.prefix_cache.c_str(), requests.size());

  // ---- tokenize and add every request (vLLM's LLM.generate: all arrive at once) ----
  const int64_t n = static_cast<int64_t>(requests.size());
  std::vector<BatchResult> results(requests.size());
  std::map<int64_t, int64_t> index_of;  // engine request id -> input index
  std::vector<std::vector<int32_t>> prompts(requests.size());
  for (int64_t i = 0; i < n; ++i) prompts[i] = batch_prompt_ids(requests[i], *m.tokenizer);
  // Structured outputs: each line's schema or grammar compiled once (a repeated one is cached);
  // one that does not compile is that request's error, as an engine refusal is.
  std::unique_ptr<lio::GrammarCompiler> grammars;
  std::vector<std::string> grammar_errors(requests.size());
  for (int64_t i = 0; i < n; ++i) {
    if (requests[i].grammar.kind == lio::GrammarSpec::Kind::None) continue;
    if (!grammars) grammars = std::make_unique<lio::GrammarCompiler>(*m.tokenizer, m.config.vocab_size);
    try {
      requests[i].params.grammar = grammars->compile(requests[i].grammar);
    } catch (const InvalidArgument& e) {
      grammar_errors[i] = "line " + std::to_string(requests[i].line) + ": " + e.what();
    }
  }
  const Clock::time_point t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    results[i].n_prompt_tokens = static_cast<int64_t>(prompts[i].size());
    results[i].samples.resize(static_cast<size_t>(requests[i].params.n));
    if (!grammar_errors[i].empty()) {
      results[i].error = grammar_errors[i];
      continue;
    }
    try {
      index_of[engine.add_request(std::move(prompts[i]), requests[i].params)] = i;
    } catch (const InvalidArgument& e) {
      results[i].error = e.what();
    }
  }

  // ---- step until done, writing result lines in input order as they become ready ----
  ProgressBar bar(n);
  int64_t n_done = 0, n_written = 0, n_output_tokens = 0;
  int64_t n_decode_steps = 0, n_decode_step_tokens = 0;
  double decode_step_s = 0;
  auto write_ready = [&] {
    bool wrote = false;
    for (; n_written < n && results[n_written].done(); ++n_written) {
      if (!wrote) bar.clear();
      wrote = true;
      out << result_json(n_written, results[n_written])
                 .dump(-1, ' ', false, json::error_handler_t::replace)
          << "\n";
    }
    if (wrote) out.flush();
  };
  for (const BatchResult& r : results) n_done += r.done();
  write_ready();
  // --profile: each step's op times (CpuBackend::set_profiling) summed into the decode-only
  // steps' table or the other steps' (index 0 / 1), with those steps' wall time.
  CpuBackend* profiled = b.profile ? dynamic_cast<CpuBackend*>(&runner->backend()) : nullptr;
  if (b.profile && !profiled)
    throw InvalidArgument("--profile times the CPU backend's ops: run it with --device cpu and one rank");
  std::map<std::string, CpuOpTime> op_sums[2];
  double profiled_s[2] = {0, 0};
  int64_t profiled_steps[2] = {0, 0};
  if (profiled) profiled->set_profiling(true);
  while (engine.has_unfinished()) {
    const int64_t prompt_rows_before = engine.stats().n_prompt_tokens_computed;
    if (profiled) profiled->clear_op_times();
    const Clock::time_point ts = Clock::now();
    std::vector<RequestOutput> outputs = engine.step();
    const double step_s = seconds_since(ts);
    int64_t step_tokens = 0;
    for (const RequestOutput& ro : outputs) {
      BatchResult& request = results[index_of.at(ro.request_id)];
      SampleResult& r = request.samples.at(static_cast<size_t>(ro.sample_index));
      r.text += ro.new_text;
      r.token_ids.insert(r.token_ids.end(), ro.new_token_ids.begin(), ro.new_token_ids.end());
      step_tokens += static_cast<int64_t>(ro.new_token_ids.size());
      if (ro.finished) {
        r.done = true;
        request.n_prompt_tokens = ro.n_prompt_tokens;
        r.last = ro;
        n_done += request.done();
      }
    }
    n_output_tokens += step_tokens;
    // A step that ran no prompt row is pure decode: llama-batched-bench's "TG" phase.
    const bool decode_only = engine.stats().n_prompt_tokens_computed == prompt_rows_before && step_tokens > 0;
    if (decode_only) {
      ++n_decode_steps;
      n_decode_step_tokens += step_tokens;
      decode_step_s += step_s;
    }
    if (profiled) {
      const int k = decode_only ? 0 : 1;
      profiled_s[k] += step_s;
      ++profiled_steps[k];
      for (const CpuOpTime& t : profiled->op_times()) {
        CpuOpTime& sum = op_sums[k][t.op];
        sum.op = t.op;
        sum.total_ms += t.total_ms;
        sum.calls += t.calls;
        sum.weight_bytes += t.weight_bytes;
      }
    }
    write_ready();
    bar.update(n_done, n_output_tokens, seconds_since(t0));
  }
  const double total_s = seconds_since(t0);
  if (profiled) profiled->set_profiling(false);
  bar.update(n_done, n_output_tokens, total_s, /*force=*/true);
  bar.clear();
  write_ready();
  out.flush();
  if (!out)
    throw InvalidArgument("writing the results failed" +
                          (b.out_path.empty() ? "" : " (--out " + single_quoted(b.out_path) + ")"));
  if (out_file) out_file->commit();

  // ---- summary ----
  int64_t n_failed = 0, n_prompt_tokens = 0;
  std::vector<double> ttfts, tpots, itls, e2es, queues;
  for (const BatchResult& r : results) {
    if (!r.error.empty()) {
      ++n_failed;
      continue;
    }
    n_prompt_tokens += r.n_prompt_tokens;
    for (const SampleResult& sr : r.samples) {
      const RequestOutput& last = sr.last;
      if (!sr.token_ids.empty()) ttfts.push_back(last.ttft_ms);
      if (sr.token_ids.size() > 1) tpots.push_back(last.tpot_ms);
      itls.insert(itls.end(), last.itl_ms.begin(), last.itl_ms.end());
      e2es.push_back(last.e2e_ms);
      queues.push_back(last.queue_ms);
    }
  }
  const EngineStats& st = engine.stats();
  const double out_tps = total_s > 0 ? n_output_tokens / total_s : 0;
  json s;
  s["n_requests"] = n;
  s["n_failed"] = n_failed;
  s["total_s"] = total_s;
  s["output_tokens"] = n_output_tokens;
  s["prompt_tokens"] = n_prompt_tokens;
  s["output_tok_per_s"] = out_tps;
  s["total_tok_per_s"] = total_s > 0 ? (n_prompt_tokens + n_output_tokens) / total_s : 0;
  s["decode_tok_per_s"] = decode_step_s > 0 ? n_decode_step_tokens / decode_step_s : 0;
  s["n_decode_steps"] = n_decode_steps;
  s["decode_s"] = decode_step_s;
  s["median_ttft_ms"] = median(ttfts);
  s["median_tpot_ms"] = median(tpots);
  s["p99_ttft_ms"] = quantile(ttfts, 0.99);
  s["p99_tpot_ms"] = quantile(tpots, 0.99);
  s["median_itl_ms"] = median(itls);
  s["p99_itl_ms"] = quantile(itls, 0.99);
  s["median_e2e_ms"] = median(e2es);
  s["median_queue_ms"] = median(queues);
  s["kv_blocks_swapped_out"] = st.n_blocks_swapped_out;
  s["n_preemptions"] = st.n_preemptions;
  s["n_steps"] = st.n_steps;
  s["max_running"] = st.max_running;
  s["prompt_rows_computed"] = st.n_prompt_tokens_computed;
  s["peak_kv_blocks_used"] = st.peak_blocks_used;
  s["kv_block_bytes"] = runner->kv_pool().block_bytes();
  s["peak_kv_bytes_used"] = st.peak_blocks_used * runner->kv_pool().block_bytes();
  s["kv_cache_groups"] = runner->kv_pool().n_groups();
  s["peak_kv_tokens_held"] = st.peak_tokens_held;
  s["kv_block_copies"] = st.n_block_copies;
  s["forked_samples"] = st.n_forks;
  if (st.n_grammar_masks > 0) {  // structured outputs: masks computed, and their engine-thread time
    s["grammar_masks"] = st.n_grammar_masks;
    s["grammar_mask_s"] = st.grammar_mask_seconds;
  }
  if (engine_config.speculative.method != SpecMethod::None) {
    s["spec_method"] = o.spec_method;
    s["num_speculative_tokens"] = engine_config.speculative.num_speculative_tokens;
    s["spec_acceptance"] = o.spec_acceptance;  // "typical" is lossy when sampling
    s.update(spec_decode_json(st.spec_num_drafts, st.spec_num_draft_tokens, st.spec_num_accepted_tokens));
    s["spec_accepted_per_position"] = st.spec_accepted_per_position;  // rounds accepting depth i + 1
  }
  if (const PrefixCache* pc = engine.prefix_cache()) {
    s["prefix_cache_queries"] = pc->stats.queries;
    s["prefix_cache_hits"] = pc->stats.hits;
    s["prefix_cache_hit_rate"] = pc->stats.hit_rate();
  }
  // Issue 45: which forward passes were graph launches (decode steps within a bucket) and which
  // ran kernel by kernel (prefill, mixed steps, --enforce-eager, the CPU).
  s["cuda_graphs"] = {{"buckets", engine.graph_capture().sizes},
                      {"capture_ms", engine.graph_capture().seconds * 1e3},
                      {"graph_steps", runner->graph_steps()},
                      {"eager_steps", runner->eager_steps()}};
  s["settings"] = {{"model", m.path},
                   {"dtype", o.dtype},
                   {"device", runner->device_description()},
                   {"threads", o.threads},
                   {"max_num_seqs", b.max_num_seqs},
                   {"max_num_batched_tokens", b.max_num_batched_tokens},
                   {"chunked_prefill", !b.no_chunked_prefill},
                   {"prefix_cache", b.prefix_cache},
                   {"scheduling", b.scheduling},
                   {"preemption", b.preemption},
                   {"block_size", pool.block_size()},
                   {"kv_pool_mib", pool_mib},
                   {"kv_blocks", pool.n_blocks()},
                   {"kv_tokens", pool.n_slots()},
                   {"max_tokens", defaults.max_tokens},
                   {"temperature", defaults.sampler.temperature},
                   {"ignore_eos", defaults.ignore_eos},
                   {"enforce_eager", o.enforce_eager}};
  if (profiled) {
    s["profile"] = profile_json(op_sums[0], profiled_s[0], profiled_steps[0], op_sums[1], profiled_s[1],
                                profiled_steps[1]);
    print_profile(s["profile"]);
  }
  if (summary_file) {
    summary_file->stream() << s.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    summary_file->commit();
  }
  if (o.json) {
    std::cerr << s.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  } else {
    std::fprintf(
        stderr,
        "[batch: %lld requests (%lld failed) in %.2f s; %lld output tokens, %.1f output tok/s, "
        "%.1f total tok/s, %.1f decode tok/s; median TTFT %.1f ms, TPOT %.2f ms; %lld steps, "
        "%lld preemptions]\n",
        (long long)n, (long long)n_failed, total_s, (long long)n_output_tokens, out_tps,
        s["total_tok_per_s"].get<double>(), s["decode_tok_per_s"].get<double>(), median(ttfts),
        median(tpots), (long long)st.n_steps, (long long)st.n_preemptions);
  }
  return 0;
}

}  // namespace lio
