// ch04_paged_attention — chapter 04: PagedAttention.
//
// Replays a trace of requests (all arriving at once) through the real engine, step by step, and
// after every step measures the KV memory two ways for the same running sequences:
// - static: what systems before vLLM did — each running request reserves max_len token slots up
//   front (Kwon et al. 2023, sec. 3): reserved = n_running x max_len;
// - paged: what the engine's BlockManager actually holds: reserved = blocks held x block_size.
// The learner sees, side by side, peak and mean reserved memory, how much of it holds K/V, the
// waste (static: reservation + over-provisioning; paged: the empty tail of each last block plus
// blocks kept by the prefix cache), and how many sequences the same budget could hold. Then a few
// block tables at the busiest step (non-contiguous ids, shared prefix blocks marked `*`), the
// prefix-cache hit rate and the engine's counters (steps, preemptions, copy-on-write copies).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <numbers>
#include <random>

#include "lio/cli_common.h"
#include "lio/engine.h"
#include "lio/error.h"
#include "lio/request_trace.h"

namespace {
using json = nlohmann::ordered_json;

// ---- the trace ----------------------------------------------------------------------------

/// One request of the trace: exact lengths (ignore_eos + max_tokens make them exact). A --trace
/// file is read by lio::read_request_trace (its format: lio/request_trace.h).
using TraceRequest = lio::TraceRequestLine;

/// Uniform in [0, 1) from the top 53 bits: mt19937_64 is specified exactly by the standard,
/// std::*_distribution is not, so the trace is the same with every standard library.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

/// A lognormal length with median `median` and log-space spread `sigma` (Box-Muller), clamped
/// to [lo, hi].
int64_t lognormal_length(std::mt19937_64& rng, double median, double sigma, int64_t lo,
                         int64_t hi) {
  const double u1 = 1.0 - uniform01(rng), u2 = uniform01(rng);  // u1 in (0, 1]: log is finite
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  return std::clamp<int64_t>(std::llround(median * std::exp(sigma * z)), lo, hi);
}

/// The built-in trace of `n_requests` from `seed`. Chat lengths are right-skewed, roughly
/// lognormal (ShareGPT, vLLM paper Fig. 11): most requests are short and a few long ones set
/// max_len, which is exactly what punishes a max-length reservation. Own prompt part: median
/// 96, sigma 0.9, clamped to 16..400 tokens; output: median 48, sigma 0.9, clamped to 8..200:
/// ShareGPT's shape (mean input 161, output 338 tokens) scaled down so a CPU replay takes
/// seconds. Every odd request also starts with the `shared_prefix`-token system prefix.
std::vector<TraceRequest> builtin_trace(int64_t n_requests, int64_t shared_prefix, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<TraceRequest> trace;
  for (int64_t i = 0; i < n_requests; ++i) {
    TraceRequest r;
    r.shared_prefix = shared_prefix > 0 && i % 2 == 1;
    r.prompt_tokens =
        lognormal_length(rng, 96, 0.9, 16, 400) + (r.shared_prefix ? shared_prefix : 0);
    r.output_tokens = lognormal_length(rng, 48, 0.9, 8, 200);
    trace.push_back(r);
  }
  return trace;
}

/// Prompt token ids for every request: pseudo-random ids in [100, vocab_size) from `seed` (ids
/// below 100 hold SmolLM2's special tokens); shared-prefix prompts start with one common prefix.
std::vector<std::vector<int32_t>> make_prompts(const std::vector<TraceRequest>& trace,
                                               int64_t shared_prefix, int64_t vocab_size,
                                               uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);  // its own stream: lengths stay put
  const int64_t lo = std::min<int64_t>(100, vocab_size - 1);
  auto token = [&] {
    return static_cast<int32_t>(lo + static_cast<int64_t>(rng() % (vocab_size - lo)));
  };
  std::vector<int32_t> prefix(static_cast<size_t>(shared_prefix));
  for (int32_t& t : prefix) t = token();
  std::vector<std::vector<int32_t>> prompts;
  for (const TraceRequest& r : trace) {
    std::vector<int32_t> p = r.shared_prefix ? prefix : std::vector<int32_t>{};
    while (static_cast<int64_t>(p.size()) < r.prompt_tokens) p.push_back(token());
    prompts.push_back(std::move(p));
  }
  return prompts;
}

// ---- measuring the pool after each step ---------------------------------------------------

/// Running max and time average (over steps) of one quantity, in tokens.
struct Series {
  double sum = 0;    ///< over sampled steps
  int64_t peak = 0;  ///< largest sample
  /// Adds one step's value.
  void add(int64_t v) { sum += static_cast<double>(v), peak = std::max(peak, v); }
};

/// What is tracked, over steps that end with at least one running sequence.
struct Usage {
  int64_t n_steps = 0;     ///< sampled steps
  Series running;          ///< running sequences
  Series tokens_used;      ///< sum of num_computed_tokens (a shared prefix counted per sequence)
  Series slots_filled;     ///< pool slots holding K/V of a running sequence (shared blocks once)
  Series paged_reserved;   ///< blocks held x block_size
  Series cache_only;       ///< of those, slots in blocks no running sequence holds (radix tree)
  Series static_reserved;  ///< n_running x max_len
  /// Time average of `s` over the sampled steps.
  double mean(const Series& s) const { return n_steps ? s.sum / static_cast<double>(n_steps) : 0; }
};

/// One sequence's block table, as captured at the busiest step.
struct TableView {
  int64_t seq_id = 0;             ///< the engine's sequence id
  int64_t tokens = 0;             ///< num_computed_tokens (positions with K/V)
  std::vector<int32_t> table;     ///< physical block ids, logical order
  std::vector<bool> shared;       ///< ref_count > 1: another sequence or the radix tree holds it
  int64_t last_block_tokens = 0;  ///< positions filled in the last block
};

/// Samples the engine's state after a step into `u` (if anything runs) and returns n_running.
int64_t measure(const lio::Engine& engine, int64_t max_len, Usage& u) {
  const lio::BlockManager& bm = engine.block_manager();
  int64_t n_running = 0, used = 0;
  std::map<int32_t, int64_t> filled;  // block id -> most positions any holder filled in it
  for (const auto& [id, seq] : engine.live_sequences()) {
    if (seq->status != lio::SequenceStatus::Running) continue;
    ++n_running;
    used += seq->num_computed_tokens;
    for (const std::vector<int32_t>& table : seq->block_tables) {  // every KV cache group's
      for (size_t b = 0; b < table.size(); ++b) {
        const int64_t n = std::clamp<int64_t>(
            seq->num_computed_tokens - static_cast<int64_t>(b) * bm.block_size(), 0, bm.block_size());
        filled[table[b]] = std::max(filled[table[b]], n);
      }
    }
  }
  if (n_running == 0) return 0;
  int64_t slots = 0;
  for (const auto& [block, n] : filled) slots += n;
  ++u.n_steps;
  u.running.add(n_running);
  u.tokens_used.add(used);
  u.slots_filled.add(slots);
  u.paged_reserved.add(bm.n_used_blocks() * bm.block_size());
  u.cache_only.add((bm.n_used_blocks() - static_cast<int64_t>(filled.size())) * bm.block_size());
  u.static_reserved.add(n_running * max_len);
  return n_running;
}

/// Block tables of the first `n` running sequences (by id).
std::vector<TableView> capture_tables(const lio::Engine& engine, int64_t n) {
  const lio::BlockManager& bm = engine.block_manager();
  std::vector<TableView> views;
  for (const auto& [id, seq] : engine.live_sequences()) {
    if (static_cast<int64_t>(views.size()) >= n) break;
    if (seq->status != lio::SequenceStatus::Running) continue;
    // The first KV cache group's table (the only one without a hybrid pool).
    TableView v{id, seq->num_computed_tokens, seq->block_tables.empty() ? std::vector<int32_t>{} : seq->block_tables[0],
                {}, 0};
    for (int32_t b : v.table) v.shared.push_back(bm.ref_count(b) > 1);
    const int64_t tail = v.tokens % bm.block_size();
    v.last_block_tokens = v.tokens == 0 ? 0 : (tail == 0 ? bm.block_size() : tail);
    views.push_back(std::move(v));
  }
  return views;
}

// ---- replaying the trace ------------------------------------------------------------------

/// What one replay measured.
struct Replay {
  Usage usage;                    ///< per-step samples
  std::vector<TableView> tables;  ///< the first running sequences at the busiest step
  int64_t busiest_step = 0;       ///< first step with the most running sequences
  int64_t busiest_running = 0;    ///< running sequences at that step
  int64_t n_generated = 0;        ///< tokens generated (all of the trace's, if each one fit)
  double wall_s = 0;              ///< replay time, seconds
};

/// Adds every request at once (greedy, ignore_eos, max_tokens = its output length: exact
/// lengths), then steps the engine to the end, measuring after every step. Throws
/// InvalidArgument naming the request the engine refuses (longer than the context or the pool).
Replay replay(lio::Engine& engine, const std::vector<TraceRequest>& trace,
              std::vector<std::vector<int32_t>> prompts, int64_t max_len, int64_t show_tables) {
  for (size_t i = 0; i < trace.size(); ++i) {
    lio::SamplingParams p;  // the default sampler is greedy
    p.max_tokens = trace[i].output_tokens;
    p.ignore_eos = true;
    try {
      engine.add_request(std::move(prompts[i]), p);
    } catch (const lio::InvalidArgument& e) {
      throw lio::InvalidArgument("trace request " + std::to_string(i) + ": " + e.what());
    }
  }
  Replay r;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = 1; engine.has_unfinished(); ++step) {
    for (const lio::RequestOutput& out : engine.step())
      r.n_generated += static_cast<int64_t>(out.new_token_ids.size());
    const int64_t n_running = measure(engine, max_len, r.usage);
    if (n_running > r.busiest_running) {
      r.busiest_running = n_running, r.busiest_step = step;
      r.tables = capture_tables(engine, show_tables);
    }
  }
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// ---- the report ---------------------------------------------------------------------------
// The report is one JSON object (what --json prints); the text view is printed from it, so the
// two never disagree. Its key/value lists are packed by hand, a few pairs per line.

/// One layout's column: reserved (peak, mean; tokens and MiB), used, wasted %, and how many
/// sequences the pool holds at once under it. Wasted % is a ratio of time averages.
json layout_json(const Usage& u, const Series& reserved, const Series& used, int64_t max_seqs,
                 int64_t bytes_per_token) {
  auto mib = [&](double tokens) { return tokens * static_cast<double>(bytes_per_token) / 1048576; };
  const double mean_reserved = u.mean(reserved), mean_used = u.mean(used);
  const double wasted_pct = mean_reserved > 0 ? 100.0 * (1.0 - mean_used / mean_reserved) : 0.0;
  return json{{"peak_reserved_tokens", reserved.peak}, {"peak_reserved_mib", mib(reserved.peak)},
              {"mean_reserved_tokens", mean_reserved}, {"mean_reserved_mib", mib(mean_reserved)},
              {"mean_used_tokens", mean_used}, {"mean_wasted_pct", wasted_pct},
              {"max_concurrent_seqs", max_seqs}};
}

/// Adds the measured part of the report to `j`: both layouts, the block tables, prefix-cache
/// hits and the engine's counters.
void add_results(json& j, const lio::Engine& engine, const lio::KvPool& pool,
                 int64_t bytes_per_token, int64_t max_len, const Replay& r) {
  const Usage& u = r.usage;
  const int64_t pool_tokens = pool.n_slots();
  // Blocks only the prefix cache holds are given back on demand: they do not limit admission.
  const double paged_per_seq =
      u.running.sum > 0 ? (u.paged_reserved.sum - u.cache_only.sum) / u.running.sum : 0.0;
  const int64_t static_fit = pool_tokens / max_len;
  const int64_t paged_fit =
      paged_per_seq > 0 ? static_cast<int64_t>(double(pool_tokens) / paged_per_seq) : 0;
  j["static"] = layout_json(u, u.static_reserved, u.tokens_used, static_fit, bytes_per_token);
  j["paged"] = layout_json(u, u.paged_reserved, u.slots_filled, paged_fit, bytes_per_token);
  j["static"]["mean_reserved_tokens_per_seq"] = max_len;
  j["paged"]["mean_reserved_tokens_per_seq"] = paged_per_seq;  // cache-only blocks excluded
  j["paged"]["mean_cache_only_tokens"] = u.mean(u.cache_only);
  j["paged"]["mean_tokens_used"] = u.mean(u.tokens_used);  // a shared prefix once per sequence
  json tables = json::array();
  for (const TableView& v : r.tables)
    tables.push_back({{"seq_id", v.seq_id}, {"tokens", v.tokens}, {"block_table", v.table},
                      {"shared", v.shared}, {"last_block_tokens", v.last_block_tokens}});
  j["block_tables"] = {{"step", r.busiest_step}, {"n_running", r.busiest_running},
                       {"sequences", tables}};
  const lio::PrefixCache* pc = engine.prefix_cache();
  j["prefix_cache_stats"] = pc ? json{{"queries", pc->stats.queries}, {"hits", pc->stats.hits},
                                      {"hit_rate", pc->stats.hit_rate()}}
                               : json(nullptr);
  const lio::EngineStats& st = engine.stats();
  j["engine"] = {{"steps", st.n_steps}, {"preemptions", st.n_preemptions},
                 {"block_copies", st.n_block_copies}, {"peak_blocks_used", st.peak_blocks_used},
                 {"max_running", st.max_running}, {"generated_tokens", r.n_generated},
                 {"wall_s", r.wall_s}};
}

/// printf into a string (table cells).
template <typename... Args>
std::string fmt(const char* format, Args... args) {
  char text[128];
  std::snprintf(text, sizeof text, format, args...);
  return text;
}

/// A block table as text: ids, `*` before one with another holder; long tables elided.
std::string table_text(const json& seq) {
  const auto ids = seq["block_table"].get<std::vector<int32_t>>();
  const auto shared = seq["shared"].get<std::vector<bool>>();
  std::string s;
  const size_t n = ids.size(), head = n > 24 ? 16 : n;
  for (size_t i = 0; i < n; ++i) {
    if (i == head) {  // only when n > 24: keep the last 4
      s += " ... (" + std::to_string(n - head - 4) + " more)";
      i = n - 5;
      continue;
    }
    s += (s.empty() ? "" : " ") + std::string(shared[i] ? "*" : "") + std::to_string(ids[i]);
  }
  return s;
}

/// Prints the report `j` (built by main and add_results) for a reader.
void print_text(const json& j) {
  auto ll = [](const json& v) { return v.get<long long>(); };
  auto dbl = [](const json& v) { return v.get<double>(); };
  auto str = [](const json& v) { return v.get<std::string>(); };
  const json &p = j["kv_pool"], &t = j["trace"], &e = j["engine"];
  const json &s = j["static"], &g = j["paged"];
  std::printf("model %s | %s\nKV pool: %lld blocks x %lld tokens = %lld tokens, %.1f MiB "
              "(%lld bytes/token = %s)\n",
              str(j["model"]).c_str(), str(j["device"]).c_str(), ll(p["n_blocks"]),
              ll(p["block_size"]), ll(p["n_tokens"]), dbl(p["mib"]), ll(p["bytes_per_token"]),
              str(p["bytes_per_token_formula"]).c_str());
  std::printf("trace %s: %lld requests (%lld start with a %lld-token shared prefix), mean prompt "
              "%.1f tokens, mean output %.1f\nlongest request %lld tokens -> max_len %lld%s\n",
              str(t["source"]).c_str(), ll(t["n_requests"]), ll(t["n_shared_prefix"]),
              ll(t["shared_prefix_tokens"]), dbl(t["mean_prompt_tokens"]),
              dbl(t["mean_output_tokens"]), ll(t["longest_request_tokens"]), ll(t["max_len"]),
              t["max_len_auto"].get<bool>() ? " (rounded up to a multiple of 256)"
                                            : " (--max-len)");
  std::printf("prefix cache %s; replayed in %lld steps, %.1f s\n\n", str(j["prefix_cache"]).c_str(),
              ll(e["steps"]), dbl(e["wall_s"]));

  auto row = [](const char* name, const std::string& a, const std::string& b) {
    std::printf("| %-35s | %29s | %29s |\n", name, a.c_str(), b.c_str());
  };
  auto tok_mib = [&](const json& tokens) {  // tokens, and the bytes their K/V take
    const double mib = dbl(tokens) * dbl(p["bytes_per_token"]) / 1048576;
    return fmt("%.0f tok %9.1f MiB", dbl(tokens), mib);
  };
  auto both = [&](const char* name, const char* key, const char* format) {
    row(name, format ? fmt(format, dbl(s[key])) : tok_mib(s[key]),
        format ? fmt(format, dbl(g[key])) : tok_mib(g[key]));
  };
  row("", "static max-length reservation", fmt("paged pool (block %lld)", ll(p["block_size"])));
  std::printf("|%s|%s|%s|\n", std::string(37, '-').c_str(), std::string(31, '-').c_str(),
              std::string(31, '-').c_str());
  both("peak reserved", "peak_reserved_tokens", nullptr);
  both("mean reserved", "mean_reserved_tokens", nullptr);
  if (dbl(g["mean_cache_only_tokens"]) > 0)  // the radix tree keeps finished prompts' blocks
    row("  of it, held only by prefix cache", "-", tok_mib(g["mean_cache_only_tokens"]));
  both("mean reserved per running sequence", "mean_reserved_tokens_per_seq", "%.0f tok");
  both("mean used (slots holding K/V)", "mean_used_tokens", nullptr);
  both("mean wasted", "mean_wasted_pct", "%.1f%%");
  both("sequences the pool holds at once", "max_concurrent_seqs", "%.0f");
  std::printf("paged 'used' counts a block shared by several tables once (the running "
              "sequences held %.0f tokens of K/V on average)\n", dbl(g["mean_tokens_used"]));
  if (dbl(g["mean_cache_only_tokens"]) > 0)
    std::printf("blocks only the prefix cache holds count as wasted, but not per sequence: the "
                "cache gives them back on demand\n");
  if (ll(s["peak_reserved_tokens"]) > ll(p["n_tokens"]))  // the static column is a what-if
    std::printf("the static layout could not have run this schedule: its peak exceeds the pool's "
                "%lld tokens\n", ll(p["n_tokens"]));
  std::printf("\n");

  const json& bt = j["block_tables"];
  if (!bt["sequences"].empty())
    std::printf("block tables at step %lld, %lld running (* = a block with another holder: a "
                "sequence or the prefix cache):\n", ll(bt["step"]), ll(bt["n_running"]));
  for (const json& v : bt["sequences"])
    std::printf("  seq %-3lld %4lld tokens %3zu blocks, last %2lld/%lld full: %s\n",
                ll(v["seq_id"]), ll(v["tokens"]), v["block_table"].size(),
                ll(v["last_block_tokens"]), ll(p["block_size"]), table_text(v).c_str());
  if (const json& pc = j["prefix_cache_stats"]; !pc.is_null())
    std::printf("\nprefix cache: %lld of %lld prompt tokens hit (%.1f%%)\n", ll(pc["hits"]),
                ll(pc["queries"]), 100.0 * dbl(pc["hit_rate"]));
  std::printf("%sengine: %lld steps, %lld preemptions, %lld copy-on-write copies, peak %lld of "
              "%lld blocks, %lld tokens generated\n",
              j["prefix_cache_stats"].is_null() ? "\n" : "", ll(e["steps"]), ll(e["preemptions"]),
              ll(e["block_copies"]), ll(e["peak_blocks_used"]), ll(p["n_blocks"]),
              ll(e["generated_tokens"]));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chapter 04: PagedAttention: a paged KV pool vs a static max-length reservation",
               "ch04_paged_attention"};
  lio::CommonOptions o;
  lio::add_model_flags(app, o);
  lio::add_device_flag(app, o);
  lio::add_kv_pool_flags(app, o, /*engine=*/true);
  std::string trace_path, prefix_cache = "hash";
  uint64_t seed = 42;
  int64_t n_requests = 24, shared_prefix = 64, max_len = 0, max_num_seqs = 64, show_tables = 3;
  app.add_option("--trace", trace_path, "JSONL trace, one request a line: {\"prompt_tokens\": N, "
                 "\"output_tokens\": M, \"shared_prefix\": true} (default: a built-in trace)");
  app.add_option("--seed", seed, "Seed of the built-in trace and of every prompt's token ids")
      ->capture_default_str();
  app.add_option("--requests", n_requests, "Requests in the built-in trace")
      ->capture_default_str();
  app.add_option("--shared-prefix", shared_prefix, "Tokens of the shared system prefix")
      ->capture_default_str();
  app.add_option("--prefix-cache", prefix_cache, "Prefix cache: none, hash or radix")
      ->capture_default_str();
  app.add_option("--max-len", max_len, "Static reservation per request, tokens (0 = the trace's "
                 "longest prompt + output rounded up to a multiple of 256)")
      ->capture_default_str();
  app.add_option("--max-num-seqs", max_num_seqs, "Sequences in one step at most")
      ->capture_default_str();
  app.add_option("--show-tables", show_tables, "Block tables to print, of the busiest step")
      ->capture_default_str();

  return lio::run_main(app, argc, argv, [&]() -> int {
    // ---- everything that needs no model first: flags, then the trace ----
    lio::apply_threads(o.threads);
    auto at_least = [](const char* flag, int64_t value, int64_t min) {
      if (value < min)
        throw lio::InvalidArgument(std::string(flag) + " must be >= " + std::to_string(min) +
                                   ", got " + std::to_string(value));
    };
    at_least("--requests", n_requests, 1);
    at_least("--shared-prefix", shared_prefix, 0);
    at_least("--max-len", max_len, 0);
    at_least("--show-tables", show_tables, 0);
    lio::EngineConfig ec;
    ec.prefix_cache = lio::parse_prefix_cache_mode(prefix_cache);
    ec.scheduler.max_num_seqs = max_num_seqs;
    ec.scheduler.validate();
    ec.enforce_eager = o.enforce_eager;
    lio::parse_device(o.device);
    const std::vector<TraceRequest> trace =
        trace_path.empty() ? builtin_trace(n_requests, shared_prefix, seed)
                           : lio::read_request_trace(trace_path, {0, shared_prefix});
    int64_t longest = 0, sum_prompt = 0, sum_output = 0, n_shared = 0;
    for (const TraceRequest& r : trace) {
      longest = std::max(longest, r.prompt_tokens + r.output_tokens);
      sum_prompt += r.prompt_tokens, sum_output += r.output_tokens, n_shared += r.shared_prefix;
    }
    const bool max_len_auto = max_len == 0;
    if (max_len_auto) max_len = (longest + 255) / 256 * 256;
    if (max_len < longest)
      throw lio::InvalidArgument("--max-len " + std::to_string(max_len) +
                                 " is shorter than the trace's longest request (" +
                                 std::to_string(longest) + " tokens)");

    // ---- model, pool, engine; replay ----
    lio::LoadedModel m = lio::load_from_options(o);
    const lio::ModelConfig& c = m.config;
    std::unique_ptr<lio::ModelRunner> runner = lio::runner_from_options(m, o);
    if (!runner) return 0;  // a worker rank, done serving the driver (chapter 08)
    const lio::KvPool& pool = runner->kv_pool();
    lio::Engine engine(*runner, *m.tokenizer, ec);
    const Replay r = replay(engine, trace, make_prompts(trace, shared_prefix, c.vocab_size, seed),
                            max_len, show_tables);

    // ---- report ----
    const int64_t bytes_per_token = c.kv_bytes_per_token(sizeof(float));
    const std::string formula = "2 x " + std::to_string(c.n_layers) + " layers x " +
                                std::to_string(c.n_kv_heads) + " kv_heads x " +
                                std::to_string(c.head_dim) + " head_dim x 4 bytes";
    const double n = static_cast<double>(trace.size());
    json j{{"model", m.path}, {"device", runner->device_description()},
           {"kv_pool", {{"n_blocks", pool.n_blocks()}, {"block_size", pool.block_size()},
                        {"n_tokens", pool.n_slots()}, {"mib", pool.size_bytes() / 1048576.0},
                        {"bytes_per_token", bytes_per_token},
                        {"bytes_per_token_formula", formula}}},
           {"trace", {{"source", trace_path.empty() ? "built-in" : trace_path}, {"seed", seed},
                      {"n_requests", trace.size()}, {"n_shared_prefix", n_shared},
                      {"shared_prefix_tokens", shared_prefix},
                      {"mean_prompt_tokens", static_cast<double>(sum_prompt) / n},
                      {"mean_output_tokens", static_cast<double>(sum_output) / n},
                      {"output_tokens", sum_output}, {"longest_request_tokens", longest},
                      {"max_len", max_len}, {"max_len_auto", max_len_auto}}},
           {"prefix_cache", prefix_cache}};
    add_results(j, engine, pool, bytes_per_token, max_len, r);
    if (r.n_generated != sum_output)  // the engine ends a request the pool can never hold
      std::fprintf(stderr, "note: %lld of the trace's %lld output tokens were generated\n",
                   (long long)r.n_generated, (long long)sum_output);
    if (o.json) {
      std::cout << j.dump(2) << "\n";
    } else {
      print_text(j);
    }
    return 0;
  });
}
