// bench_paged_engine — chapter 04 on the real engine and model: what prefix caching and
// block sharing buy, side by side in one run.
//   1. Shared system prompt: 32 requests (--requests) whose prompts begin with the same long
//      system prompt (ChatML through the model's template) arrive at once; prefix cache none vs
//      hash vs radix, cold (empty cache) and warm (one earlier request left the system prompt
//      cached). Prefill tokens computed, hit rate, TTFT (median, mean), wall time.
//   2. Multi-turn chat: --conversations conversations of --turns turns; each turn's prompt is the
//      whole conversation so far (earlier answers included) and arrives when the previous turn
//      of its conversation finishes. The radix tree can also reuse the partial last block of
//      the previous turn, which a hash chain of full blocks cannot.
//   3. Parallel sampling: n = 1, 4, 8 samples of one prompt, as one request with n (the prompt's
//      blocks shared, copy-on-write) vs n independent requests (no sharing): peak KV blocks.
// Every variant runs on the same runner (weights, device, KV pool) with a fresh Engine.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_util.h"
#include "lio/atomic_file.h"
#include "lio/cli_common.h"
#include "lio/engine.h"
#include "lio/error.h"

namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

/// What one run of the engine measured.
struct Run {
  int64_t prefill_tokens = 0;  ///< prompt rows computed
  int64_t queries = 0, hits = 0;
  std::vector<double> ttft_ms;  ///< one per request, in finishing order
  double wall_s = 0;
  int64_t peak_blocks = 0, copies = 0;
};

/// Steps `e` until it is idle. `on_finish(request_id, text)` runs when a request's sample 0
/// finishes (to queue a follow-up); TTFTs are collected from each request's first output.
template <typename OnFinish>
void drain(lio::Engine& e, Run& run, OnFinish on_finish) {
  std::map<int64_t, std::string> text;
  std::map<int64_t, bool> seen;
  const Clock::time_point t0 = Clock::now();
  while (e.has_unfinished()) {
    for (const lio::RequestOutput& o : e.step()) {
      if (o.sample_index != 0) continue;
      text[o.request_id] += o.new_text;
      if (!o.new_token_ids.empty() && !seen[o.request_id]) {
        seen[o.request_id] = true;
        run.ttft_ms.push_back(o.ttft_ms);
      }
      if (o.finished) on_finish(o.request_id, text[o.request_id]);
    }
  }
  run.wall_s += std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Fills the counters of `run` from the engine (after drain).
void collect(const lio::Engine& e, Run& run) {
  run.prefill_tokens = e.stats().n_prompt_tokens_computed;
  run.peak_blocks = e.stats().peak_blocks_used;
  run.copies = e.stats().n_block_copies;
  if (const lio::PrefixCache* pc = e.prefix_cache()) {
    run.queries = pc->stats.queries;
    run.hits = pc->stats.hits;
  }
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

/// A system prompt of about `n_tokens` tokens: an assistant's rules, repeated with numbers.
std::string system_prompt(const lio::Tokenizer& tok, int64_t n_tokens) {
  std::string s = "You are a careful assistant for a hardware store. ";
  for (int i = 1; static_cast<int64_t>(tok.encode(s, false, false).size()) < n_tokens; ++i) {
    s += "Rule " + std::to_string(i) +
         ": answer with the aisle number, the price in dollars and one safety tip, and never invent a product. ";
  }
  return s;
}

std::vector<int32_t> chat_ids(const lio::Tokenizer& tok, const std::vector<lio::ChatMessage>& msgs) {
  return tok.encode(tok.apply_chat_template(msgs, true), true, false);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chapter 04: prefix caching and block sharing on the real engine", "bench_paged_engine"};
  lio::CommonOptions o;
  lio::add_model_flags(app, o);
  lio::add_device_flag(app, o);
  lio::add_kv_pool_flags(app, o, /*engine=*/true);
  int64_t n_requests = 32, system_tokens = 384, max_tokens = 16, conversations = 8, turns = 4, sample_tokens = 48;
  std::string json_path;
  app.add_option("--requests", n_requests, "Requests sharing the system prompt")->capture_default_str();
  app.add_option("--system-tokens", system_tokens, "Length of the shared system prompt (tokens, about)")
      ->capture_default_str();
  app.add_option("--max-tokens", max_tokens, "Tokens generated per request in parts 1 and 2")->capture_default_str();
  app.add_option("--conversations", conversations, "Part 2: conversations")->capture_default_str();
  app.add_option("--turns", turns, "Part 2: user turns per conversation")->capture_default_str();
  app.add_option("--sample-tokens", sample_tokens, "Part 3: tokens per sample")->capture_default_str();
  app.add_option("--out-json", json_path, "Write every number here");

  return lio::run_main(app, argc, argv, [&]() -> int {
    if (n_requests < 1 || system_tokens < 1 || max_tokens < 1 || conversations < 1 || turns < 1 || sample_tokens < 1)
      throw lio::InvalidArgument("every count must be >= 1");
    lio::apply_threads(o.threads);
    lio::LoadedModel m = lio::load_from_options(o);
    std::unique_ptr<lio::ModelRunner> runner = lio::runner_from_options(m, o);
    if (!runner) return 0;  // a worker rank, done serving the driver (chapter 08)
    const lio::Tokenizer& tok = *m.tokenizer;
    const double block_mib = static_cast<double>(runner->kv_pool().block_bytes()) / 1048576.0;
    std::printf("bench_paged_engine | %s | host %s | %s | KV pool %lld blocks x %lld tokens (%.2f MiB a block)\n\n",
                runner->device_description().c_str(), lio::bench::cpu_name().c_str(),
                lio::bench::local_path_free(m.path).c_str(),
                (long long)runner->kv_pool().n_blocks(), (long long)runner->kv_pool().block_size(), block_mib);
    lio::SamplingParams greedy;
    greedy.max_tokens = max_tokens;
    greedy.ignore_eos = true;
    const lio::PrefixCacheMode modes[] = {lio::PrefixCacheMode::None, lio::PrefixCacheMode::Hash,
                                          lio::PrefixCacheMode::Radix};
    auto engine_config = [](lio::PrefixCacheMode mode) {
      lio::EngineConfig c;
      c.prefix_cache = mode;
      return c;
    };
    json out;
    out["provenance"] = {{"command", lio::bench::command_line(argc, argv)},
                         {"commit", lio::bench::git_commit()},
                         {"machine", "host " + lio::bench::cpu_name() + " | " + runner->device_description() +
                                         (o.device == "cpu" ? "" : " | driver " + lio::bench::gpu_driver())},
                         {"date", lio::bench::utc_date()}};

    // ---- 1. shared system prompt, cold and warm ----
    const std::string sys = system_prompt(tok, system_tokens);
    auto request = [&](int i) {
      return chat_ids(tok, {{"system", sys}, {"user", "Question " + std::to_string(i) + ": where are the size " +
                                                          std::to_string(i + 2) + " screws?"}});
    };
    std::printf("## 1. %lld requests sharing a %zu-token system prompt (prompts %zu tokens), %lld tokens each\n\n",
                (long long)n_requests, tok.encode(sys, false, false).size(), request(0).size(), (long long)max_tokens);
    std::printf("| prefix cache | cache | prefill tokens computed | hit rate | median TTFT ms | mean TTFT ms | wall s | TTFT vs none |\n");
    std::printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
    json part1 = json::array();
    std::map<bool, double> none_ttft;
    for (const bool warm : {false, true}) {
      for (const lio::PrefixCacheMode mode : modes) {
        lio::Engine e(*runner, tok, engine_config(mode));
        Run warmup, run;
        if (warm) {
          e.add_request(request(-1), greedy);
          drain(e, warmup, [](int64_t, const std::string&) {});
          collect(e, warmup);
        }
        for (int i = 0; i < n_requests; ++i) e.add_request(request(i), greedy);
        drain(e, run, [](int64_t, const std::string&) {});
        collect(e, run);
        run.prefill_tokens -= warmup.prefill_tokens;
        run.queries -= warmup.queries;
        run.hits -= warmup.hits;
        const double med = lio::bench::median(run.ttft_ms);
        if (mode == lio::PrefixCacheMode::None) none_ttft[warm] = med;
        const double rate = run.queries ? static_cast<double>(run.hits) / static_cast<double>(run.queries) : 0.0;
        std::printf("| %s | %s | %lld | %.1f%% | %.1f | %.1f | %.2f | %.2fx |\n", lio::prefix_cache_mode_name(mode),
                    warm ? "warm" : "cold", (long long)run.prefill_tokens, 100 * rate, med, mean(run.ttft_ms),
                    run.wall_s, none_ttft[warm] / med);
        part1.push_back({{"prefix_cache", lio::prefix_cache_mode_name(mode)}, {"warm", warm},
                         {"prefill_tokens", run.prefill_tokens}, {"hit_rate", rate}, {"median_ttft_ms", med},
                         {"mean_ttft_ms", mean(run.ttft_ms)}, {"wall_s", run.wall_s}});
      }
    }
    out["shared_system_prompt"] = part1;

    // ---- 2. multi-turn chat ----
    std::printf("\n## 2. Multi-turn chat: %lld conversations x %lld turns, %lld tokens per answer\n\n",
                (long long)conversations, (long long)turns, (long long)max_tokens);
    std::printf("| prefix cache | prefill tokens computed | hit rate | mean TTFT ms (turns >= 2) | wall s | COW copies |\n");
    std::printf("|---|---:|---:|---:|---:|---:|\n");
    json part2 = json::array();
    for (const lio::PrefixCacheMode mode : modes) {
      lio::Engine e(*runner, tok, engine_config(mode));
      std::vector<std::vector<lio::ChatMessage>> conv(static_cast<size_t>(conversations));
      std::map<int64_t, size_t> conv_of;  // request id -> conversation
      std::vector<int64_t> turn(static_cast<size_t>(conversations), 1);
      auto ask = [&](size_t c) {
        conv[c].push_back({"user", "Conversation " + std::to_string(c) + ", question " + std::to_string(turn[c]) +
                                       ": what should I buy next for my kitchen shelf?"});
        conv_of[e.add_request(chat_ids(tok, conv[c]), greedy)] = c;
      };
      for (size_t c = 0; c < conv.size(); ++c) {
        conv[c].push_back({"system", "You are a helpful assistant."});
        ask(c);
      }
      Run run;
      std::vector<double> later_ttft;
      size_t n_first = 0;
      drain(e, run, [&](int64_t id, const std::string& answer) {
        const size_t c = conv_of.at(id);
        conv[c].push_back({"assistant", answer});
        if (turn[c]++ < turns) ask(c);
      });
      collect(e, run);
      n_first = static_cast<size_t>(conversations);  // the first TTFT of each conversation is turn 1
      later_ttft.assign(run.ttft_ms.begin() + static_cast<ptrdiff_t>(std::min(n_first, run.ttft_ms.size())),
                        run.ttft_ms.end());
      const double rate = run.queries ? static_cast<double>(run.hits) / static_cast<double>(run.queries) : 0.0;
      std::printf("| %s | %lld | %.1f%% | %.1f | %.2f | %lld |\n", lio::prefix_cache_mode_name(mode),
                  (long long)run.prefill_tokens, 100 * rate, mean(later_ttft), run.wall_s, (long long)run.copies);
      part2.push_back({{"prefix_cache", lio::prefix_cache_mode_name(mode)}, {"prefill_tokens", run.prefill_tokens},
                       {"hit_rate", rate}, {"mean_ttft_later_turns_ms", mean(later_ttft)}, {"wall_s", run.wall_s},
                       {"cow_copies", run.copies}});
    }
    out["multi_turn"] = part2;

    // ---- 3. parallel sampling ----
    const std::vector<int32_t> prompt = request(7);
    std::printf("\n## 3. Parallel sampling: a %zu-token prompt, %lld tokens per sample, temperature 0.8\n\n",
                prompt.size(), (long long)sample_tokens);
    std::printf("| n | shared (one request, n) peak blocks | MiB | independent (n requests) peak blocks | MiB | memory saved | prefill tokens shared / independent | COW copies |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    json part3 = json::array();
    for (const int64_t n : {1, 4, 8}) {
      lio::SamplingParams p = greedy;
      p.max_tokens = sample_tokens;
      p.sampler.temperature = 0.8f;
      Run shared, independent;
      {
        lio::Engine e(*runner, tok);
        lio::SamplingParams pn = p;
        pn.n = n;
        e.add_request(prompt, pn);
        drain(e, shared, [](int64_t, const std::string&) {});
        collect(e, shared);
      }
      {
        lio::Engine e(*runner, tok);
        for (int64_t i = 0; i < n; ++i) {
          lio::SamplingParams pi = p;
          pi.sampler.seed += static_cast<uint64_t>(i);
          e.add_request(prompt, pi);
        }
        drain(e, independent, [](int64_t, const std::string&) {});
        collect(e, independent);
      }
      const double saved = 1.0 - static_cast<double>(shared.peak_blocks) / static_cast<double>(independent.peak_blocks);
      std::printf("| %lld | %lld | %.1f | %lld | %.1f | %.1f%% | %lld / %lld | %lld |\n", (long long)n,
                  (long long)shared.peak_blocks, shared.peak_blocks * block_mib, (long long)independent.peak_blocks,
                  independent.peak_blocks * block_mib, 100 * saved, (long long)shared.prefill_tokens,
                  (long long)independent.prefill_tokens, (long long)shared.copies);
      part3.push_back({{"n", n}, {"shared_peak_blocks", shared.peak_blocks},
                       {"independent_peak_blocks", independent.peak_blocks}, {"memory_saved", saved},
                       {"shared_prefill_tokens", shared.prefill_tokens},
                       {"independent_prefill_tokens", independent.prefill_tokens}, {"cow_copies", shared.copies}});
    }
    out["parallel_sampling"] = part3;
    out["settings"] = {{"device", runner->device_description()}, {"model", lio::bench::local_path_free(m.path)},
                       {"block_size", runner->kv_pool().block_size()}, {"requests", n_requests},
                       {"system_tokens", system_tokens}, {"max_tokens", max_tokens}};
    if (!json_path.empty()) {
      lio::write_file_atomically(json_path, out.dump(2) + "\n");
    }
    return 0;
  });
}
