// ch01_kv_cache — chapter 01: the KV cache.
//
// Generates from the same prompt twice under greedy decoding: once recomputing the whole
// sequence for every new token (O(n^2) work over a generation of n tokens), once with the
// KV cache (each step computes only the newest token's K/V: O(n) work). Checks that the
// two produce identical tokens, then prints TTFT, TPOT, tokens/s, and the cache size
// measured against the formula 2 x n_layers x n_kv_heads x head_dim x seq_len x bytes.
// On the CPU with an f32 cache, attention runs chapter 01's decode_attention (Task 4) over the
// one contiguous block each sequence gets (contiguous_attention.h): the learner's code, where
// the engine's other programs read every row through chapter 04's block tables.
// With --memory-budget (e.g. "24GB", "16 GiB") it first prints the cache's size per sequence
// (Task 1) and how many sequences of --seq-len fit beside the model file in that budget
// (Task 2), the budget passed with the unit it was written in.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "contiguous_attention.h"
#include "lio/cli_common.h"
#include "lio/error.h"
#include "lio/generate.h"
#include "lio/kv_sizing.h"

namespace {
using json = nlohmann::ordered_json;
void print_mode(const char* name, const lio::GenerateResult& r) {
  std::printf("%-10s %6zu tok  TTFT %8.1f ms  TPOT %8.2f ms  %8.1f tok/s  total %8.1f ms\n", name,
              r.token_ids.size(), r.ttft_ms, r.tpot_ms, r.tokens_per_s, r.total_ms);
}
/// Parses "24GB", "16 GiB", "512MiB", "800 MB" or a plain number of bytes into a MemorySize,
/// keeping the unit as written: converting it to bytes is Task 2's job. Units are
/// case-sensitive as the standards write them (GB = 10^9, GiB = 2^30 bytes).
/// Throws InvalidArgument on an empty number, a negative value or an unknown unit.
lio::MemorySize parse_memory_size(const std::string& text) {
  size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw lio::InvalidArgument("--memory-budget '" + text + "': expected a number and a unit, e.g. 24GB or 16GiB");
  }
  std::string unit = text.substr(used);
  unit.erase(0, unit.find_first_not_of(' '));
  static const std::pair<const char*, lio::MemoryUnit> kUnits[] = {
      {"", lio::MemoryUnit::Bytes}, {"B", lio::MemoryUnit::Bytes}, {"MB", lio::MemoryUnit::MB},
      {"MiB", lio::MemoryUnit::MiB}, {"GB", lio::MemoryUnit::GB},  {"GiB", lio::MemoryUnit::GiB}};
  for (const auto& [name, u] : kUnits) {
    if (unit == name) {
      if (!(value >= 0.0)) throw lio::InvalidArgument("--memory-budget '" + text + "': must not be negative");
      return {value, u};
    }
  }
  throw lio::InvalidArgument("--memory-budget '" + text + "': unknown unit '" + unit + "' (use B, MB, MiB, GB or GiB)");
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chapter 01: generation with and without the KV cache", "ch01_kv_cache"};
  lio::CommonOptions o;
  o.max_tokens = 64;
  lio::add_model_flags(app, o);
  lio::add_device_flag(app, o);
  lio::add_generation_flags(app, o, /*default_temperature=*/0.0f);
  bool no_kv_cache = false;
  app.add_flag("--no-kv-cache", no_kv_cache, "Run only the recompute baseline (no KV cache)");
  std::string memory_budget;
  app.add_option("--memory-budget", memory_budget,
                 "Also print how many --seq-len sequences fit beside the model file in this much memory "
                 "(\"24GB\", \"16GiB\", \"512MiB\"; chapter 01 Tasks 1 and 2)");
  int64_t seq_len = 0;
  app.add_option("--seq-len", seq_len, "Sequence length for --memory-budget (default: the model's context)")
      ->check(CLI::PositiveNumber);

  return lio::run_main(app, argc, argv, [&]() -> int {
    lio::apply_threads(o.threads);
    lio::LoadedModel m = lio::load_from_options(o);
    const lio::ModelConfig& c = m.config;
    json budget_rows = json::array();
    if (!memory_budget.empty()) {
      // Tasks 1 and 2 on the loaded model: the cache per sequence, and the batch that fits.
      const lio::MemorySize budget = parse_memory_size(memory_budget);
      const int64_t len = seq_len > 0 ? seq_len : c.context_length;
      const auto file_bytes = static_cast<double>(std::filesystem::is_regular_file(m.path) ? std::filesystem::file_size(m.path) : 0);
      const lio::MemorySize weights{file_bytes, lio::MemoryUnit::Bytes};
      for (lio::KvDtype dt : {lio::KvDtype::F32, lio::KvDtype::F16}) {
        const int64_t per_seq = lio::kv_cache_bytes(c, len, 1, dt);
        const int64_t batch = lio::max_batch_under_budget(c, len, dt, budget, weights);
        budget_rows.push_back({{"memory_budget", memory_budget}, {"weights_bytes", file_bytes},
                               {"kv_dtype", dt == lio::KvDtype::F32 ? "f32" : "f16"}, {"seq_len", len},
                               {"kv_bytes_per_sequence", per_seq}, {"max_batch", batch}});
        if (o.json) continue;
        std::printf("memory budget %s, weights %.0f bytes (the file), %s cache: %lld bytes per %lld-token "
                    "sequence -> %lld sequences fit\n",
                    memory_budget.c_str(), file_bytes, dt == lio::KvDtype::F32 ? "f32" : "f16", (long long)per_seq,
                    (long long)len, (long long)batch);
      }
      if (!o.json) std::printf("\n");
    }
    std::vector<int32_t> prompt = lio::prompt_tokens(m, o);
    // Chapter 01's cache: ONE block holding the whole sequence (prompt + max_tokens, capped at
    // the context), contiguous — the special case the paged pool of chapter 04 generalizes.
    const int64_t capacity = std::min<int64_t>(c.context_length, static_cast<int64_t>(prompt.size()) + o.max_tokens);
    o.kv_pool = {capacity, (lio::kv_block_bytes(c, capacity) >> 20) + 1};
    // ... attended with chapter 01's decode step on the CPU (the f32 cache: this program has no
    // --kv-cache-dtype). A GPU keeps its own attention kernel; an MLA model caches latents.
    const bool contiguous = o.device == "cpu" && !c.is_mla();
    std::unique_ptr<lio::ModelRunner> runner = lio::runner_from_options(
        m, o, [&](std::unique_ptr<lio::Backend> b) -> std::unique_ptr<lio::Backend> {
          if (!contiguous) return b;
          return std::make_unique<lio::ch01::ContiguousAttentionBackend>(std::move(b));
        });
    if (!runner) return 0;  // a worker rank, done serving the driver (chapter 08)
    lio::GenerateOptions g;
    g.max_tokens = o.max_tokens;
    g.stop = o.stop;
    g.sampler = o.sampler;

    if (!o.json) {
      std::printf("model %s | %lld layers, %lld KV heads x %lld head_dim | prompt %zu tokens | %s | %s\n\n",
                  m.path.c_str(), (long long)c.n_layers, (long long)c.n_kv_heads, (long long)c.head_dim,
                  prompt.size(), o.sampler.temperature == 0.0f ? "greedy" : "sampled",
                  runner->device_description().c_str());
    }
    auto stream = [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    };
    const lio::TextCallback cb = o.json ? lio::TextCallback{} : lio::TextCallback{stream};

    g.use_kv_cache = false;
    if (!o.json) std::printf("--- recompute (no cache) ---\n");
    lio::GenerateResult recompute = lio::generate(*runner, *m.tokenizer, prompt, g, cb);
    lio::GenerateResult cached;
    if (!no_kv_cache) {
      g.use_kv_cache = true;
      if (!o.json) std::printf("\n--- with KV cache ---\n");
      cached = lio::generate(*runner, *m.tokenizer, prompt, g, cb);
    }
    const bool identical = !no_kv_cache && cached.token_ids == recompute.token_ids;
    // The formula, in the cache's element size (f32 = 4 bytes).
    const int64_t formula_bytes = c.kv_bytes_per_token(sizeof(float)) * cached.kv_tokens;

    if (o.json) {
      json j{{"model", m.path}, {"device", runner->device_description()}, {"recompute", lio::generate_result_json(recompute)}};
      if (!budget_rows.empty()) j["memory_budget"] = budget_rows;
      if (!no_kv_cache) {
        j["kv_cache"] = lio::generate_result_json(cached);
        j["identical"] = identical;
        j["kv_bytes_formula"] = formula_bytes;
        j["speedup_total"] = cached.total_ms > 0 ? recompute.total_ms / cached.total_ms : 0.0;
      }
      std::cout << j.dump(2) << "\n";
      return no_kv_cache || identical ? 0 : 1;
    }
    std::printf("\n\n");
    print_mode("recompute", recompute);
    if (no_kv_cache) return 0;
    print_mode("kv-cache", cached);
    std::printf("speedup (total time) %.2fx\n", cached.total_ms > 0 ? recompute.total_ms / cached.total_ms : 0.0);
    std::printf("tokens identical under %s decoding: %s\n",
                o.sampler.temperature == 0.0f ? "greedy" : "seeded", identical ? "yes" : "NO");
    std::printf("KV cache: %lld positions, %lld bytes measured; formula 2 x %lld layers x %lld kv_heads x "
                "%lld head_dim x %lld tokens x 4 bytes = %lld bytes (%s)\n",
                (long long)cached.kv_tokens, (long long)cached.kv_bytes, (long long)c.n_layers,
                (long long)c.n_kv_heads, (long long)c.head_dim, (long long)cached.kv_tokens,
                (long long)formula_bytes, cached.kv_bytes == formula_bytes ? "match" : "MISMATCH");
    return identical ? 0 : 1;
  });
}
