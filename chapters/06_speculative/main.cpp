// ch06_speculative — chapter 06: speculative decoding.
//
// 1. The formula first: lecture note 003's table (k = 4, c = 0.1, a = 0.5 .. 0.95) from
//    expected_tokens_per_pass and speculative_speedup (Tasks 1 and 2), E = (1 - a^(k+1)) / (1 - a)
//    tokens per target pass and E / (k c + 1) speedup (Leviathan et al. 2023).
// 2. What a step costs: one target pass with 1 .. 9 rows (verification is nearly free while decode
//    is memory-bound), a draft model step and early-exit steps at several L, all batch 1:
//    the cost ratio c of each drafter.
// 3. The drafters on the real model, greedy: the Q4_1 file drafting for the F32 target (the
//    course's pairing), n-gram prompt lookup, early exit at --draft-layers; k = 1 .. --k-max;
//    one input-grounded prompt (a text to repeat with an edit: n-gram lookup's home ground) and
//    one free-form prompt. Per setting: the measured acceptance rate, tokens per target pass, the
//    per-draft acceptance probability a that explains them (E(a, k) solved for a), the measured
//    speedup over plain decoding in the same run, and the formula's prediction from a and c.
//    Every greedy run must give plain greedy's tokens; the program says so or fails.
// 4. Early exit against L at k = 2, and the best k per drafter: measured and predicted by
//    best_num_speculative_tokens (Task 2).
// 5. The draft tree of lesson 06, section 7, and its attention mask from tree_attention_masks
//    (Task 6a), printed as the lesson draws it (text output only).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "lio/cli_common.h"
#include "lio/engine.h"
#include "lio/error.h"
#include "lio/generate.h"
#include "lio/spec_decode.h"
#include "lio/speculative.h"

namespace {
using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

/// The two prompts: an input-grounded edit (the answer copies the given text) and a free-form one.
struct Prompt {
  const char* name;
  const char* text;
};
constexpr Prompt kPrompts[] = {
    {"grounded",
     "Rewrite the following paragraph, replacing every occurrence of the word \"cat\" with \"dog\" and changing "
     "nothing else:\n\nThe cat sat on the mat by the window. Every morning the cat watched the birds in the garden, "
     "and every evening the cat slept by the fire. The neighbours said the cat was the calmest animal on the street, "
     "and the children loved to read stories to the cat after school."},
    {"free", "Write a short story about a robot who learns to paint."},
};

/// Median of `v` (0 if empty).
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Milliseconds of one forward pass of `rows` decode-like rows of one sequence at a position
/// after a `context`-token prefix, through the first `n_layers` layers (0 = all), median of
/// `reps`. Uses the runner's blocks 0 .. from the start (nothing else may hold them).
double step_ms(lio::ModelRunner& runner, int64_t context, int64_t rows, int64_t n_layers, int reps) {
  const int64_t bs = runner.kv_pool().block_size();
  std::vector<int32_t> table(static_cast<size_t>((context + rows + bs - 1) / bs));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  std::vector<int32_t> prefix(static_cast<size_t>(context), 100);
  lio::ForwardBatch fill(bs);
  fill.add_sequence(prefix, 0, table, 1);
  runner.forward(fill);
  std::vector<int32_t> tokens(static_cast<size_t>(rows), 200);
  std::vector<double> ms;
  for (int r = 0; r < reps + 1; ++r) {
    lio::ForwardBatch b(bs);
    b.n_layers = n_layers;
    b.add_sequence(tokens, context, table, rows);
    const auto t0 = Clock::now();
    runner.forward(b);
    if (r > 0) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());  // first: warm-up
  }
  return median(ms);
}

/// The per-draft acceptance probability a for which expected_tokens_per_pass(a, k) equals the
/// measured tokens per pass (bisection; E rises with a). Clamped to [0, 1].
double solve_a(double tokens_per_pass, int64_t k) {
  if (tokens_per_pass <= 1.0) return 0.0;
  if (tokens_per_pass >= static_cast<double>(k + 1)) return 1.0;
  double lo = 0.0, hi = 1.0;
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (lio::expected_tokens_per_pass(mid, k) < tokens_per_pass ? lo : hi) = mid;  // Task 1
  }
  return 0.5 * (lo + hi);
}

struct RunResult {
  std::vector<int32_t> tokens;
  double tokens_per_s = 0;
  int64_t drafts = 0, draft_tokens = 0, accepted = 0, rejections = 0;
};

/// Prints lesson 06 section 7's draft tree (The -> cat -> sat -> on, cat -> is, The -> dog -> ran)
/// and its attention mask from tree_attention_masks (Task 6a): row i, a 1 where node i may read
/// node j. A stub's NotImplemented is printed, not thrown: the measurements above stand.
void print_tree_mask_demo() {
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 2, 3};
  const std::vector<std::string> words = {"The", "cat", "dog", "sat", "is", "ran", "on"};
  std::printf("\nSection 7's draft tree, parents [-1 0 0 1 1 2 3], and its mask (Task 6a):\n");
  std::vector<uint64_t> masks;
  try {
    masks = lio::tree_attention_masks(parents);
  } catch (const lio::NotImplemented& e) {
    std::printf("  %s\n", e.what());
    return;
  }
  std::printf("  %-4s", "");
  for (const std::string& w : words) std::printf(" %-3s", w.c_str());
  std::printf("   mask\n");
  for (size_t i = 0; i < words.size(); ++i) {
    std::printf("  %-4s", words[i].c_str());
    for (size_t j = 0; j < words.size(); ++j) std::printf(" %-3s", (masks[i] >> j) & 1 ? "1" : ".");
    std::printf("   %llu (depth %d)\n", (unsigned long long)masks[i], std::popcount(masks[i]) - 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "ch06_speculative: speculative decoding on the real model — the formula, what a step costs, and three "
      "drafters (a draft model, n-gram lookup, early exit) measured against plain decoding"};
  lio::CommonOptions o;
  std::string draft_path;
  int64_t k_max = 8, max_tokens = 64, early_exit_layers = 20;
  std::vector<int64_t> layer_sweep = {6, 12, 18, 24, 28};
  std::string methods_text = "draft,ngram,early-exit";
  int repeats = 1;
  lio::add_model_flags(app, o);
  lio::add_device_flag(app, o);
  app.add_option("--draft-model", draft_path, "Draft model for --spec-method draft (default: the shipped Q4_1 file)");
  app.add_option("--methods", methods_text, "Drafters to run, comma-separated: draft, ngram, early-exit")
      ->capture_default_str();
  app.add_option("--k-max", k_max, "Speculative tokens k = 1 .. this (<= 16)")->capture_default_str();
  app.add_option("--draft-layers", early_exit_layers, "Early exit's L in the k sweep")->capture_default_str();
  app.add_option("--layer-sweep", layer_sweep, "Early exit's L values at k = 2")->capture_default_str();
  app.add_option("--max-tokens", max_tokens, "Tokens generated per run (EOS ignored: equal lengths)")->capture_default_str();
  app.add_option("--repeats", repeats, "Runs of each setting (median reported)")->capture_default_str();

  return lio::run_main(app, argc, argv, [&] {
    if (k_max < 1 || k_max > 16) throw lio::InvalidArgument("--k-max must be in [1, 16], got " + std::to_string(k_max));
    if (max_tokens < 2) throw lio::InvalidArgument("--max-tokens must be >= 2, got " + std::to_string(max_tokens));
    if (repeats < 1) throw lio::InvalidArgument("--repeats must be >= 1, got " + std::to_string(repeats));
    std::vector<lio::SpecMethod> methods;
    {
      std::stringstream ss(methods_text);
      for (std::string item; std::getline(ss, item, ',');) methods.push_back(lio::parse_spec_method(item));
    }
    lio::apply_threads(o.threads);
    // The course's pairing: the F32 copy as target, the shipped Q4_1 file as draft.
    const std::string q4 = lio::default_model_path();
    std::string f32 = q4;
    if (const size_t at = f32.rfind(".Q4_1.gguf"); at != std::string::npos) f32.replace(at, 10, ".F32.gguf");
    if (o.model.empty()) o.model = std::filesystem::exists(f32) ? f32 : q4;
    if (draft_path.empty()) draft_path = q4;
    lio::LoadedModel m = lio::load_from_options(o);
    for (int64_t L : layer_sweep) lio::SpeculativeConfig{lio::SpecMethod::EarlyExit, 1, L}.validate(m.config.n_layers);
    lio::SpeculativeConfig{lio::SpecMethod::EarlyExit, 1, early_exit_layers}.validate(m.config.n_layers);
    std::unique_ptr<lio::ModelRunner> runner = lio::runner_from_options(m, o);
    if (!runner) return 0;  // a worker rank, done serving the driver (chapter 08)
    lio::LoadedModel dm = lio::load_model(draft_path, lio::WeightMode::AsStored);
    lio::check_draft_tokenizer(*m.tokenizer, *dm.tokenizer);
    std::unique_ptr<lio::ModelRunner> draft = lio::runner_from_options(dm, o);
    json j{{"target", m.path}, {"draft", dm.path}, {"device", runner->device_description()},
           {"max_tokens", max_tokens}, {"k_max", k_max}, {"repeats", repeats}};

    // ---- 1. the formula: lecture note 003's table ----
    json formula = json::array();
    for (const double a : {0.5, 0.6, 0.7, 0.8, 0.9, 0.95})
      formula.push_back({{"a", a}, {"k", 4}, {"c", 0.1}, {"expected_tokens", lio::expected_tokens_per_pass(a, 4)},
                         {"speedup", lio::speculative_speedup(a, 4, 0.1)},
                         {"best_k", lio::best_num_speculative_tokens(a, 0.1, 16)}});
    j["formula"] = formula;

    // ---- 2. what a step costs (batch 1, 128 tokens of context) ----
    constexpr int kReps = 15;
    const double t1 = step_ms(*runner, 128, 1, 0, kReps);
    json verify = json::array();
    for (int64_t rows = 1; rows <= 9; ++rows) {
      const double t = rows == 1 ? t1 : step_ms(*runner, 128, rows, 0, kReps);
      verify.push_back({{"rows", rows}, {"ms", t}, {"relative", t / t1}});
    }
    const double t_draft = step_ms(*draft, 128, 1, 0, kReps);
    json costs{{"target_step_ms", t1}, {"verify", verify}, {"draft_step_ms", t_draft}, {"c_draft", t_draft / t1}};
    std::map<int64_t, double> c_early;
    std::vector<int64_t> all_layers = layer_sweep;
    all_layers.push_back(early_exit_layers);
    json early = json::array();
    for (int64_t L : all_layers) {
      if (c_early.count(L)) continue;
      c_early[L] = step_ms(*runner, 128, 1, L, kReps) / t1;
      early.push_back({{"layers", L}, {"c", c_early[L]}});
    }
    costs["early_exit"] = early;
    j["costs"] = costs;

    // ---- 3. the drafters ----
    lio::GenerateOptions base;
    base.max_tokens = max_tokens;
    base.ignore_eos = true;
    auto run = [&](const std::vector<int32_t>& prompt, const lio::SpeculativeConfig& spec) {
      lio::GenerateOptions g = base;
      g.speculative = spec;
      g.draft = spec.method == lio::SpecMethod::Draft ? draft.get() : nullptr;
      const lio::GenerateResult r = lio::generate(*runner, *m.tokenizer, prompt, g);
      return RunResult{r.token_ids, r.tokens_per_s, r.spec_num_drafts, r.spec_num_draft_tokens,
                       r.spec_num_accepted_tokens, r.spec_num_rejections};
    };
    std::vector<std::vector<int32_t>> prompts;
    for (const Prompt& p : kPrompts) {
      const std::vector<lio::ChatMessage> chat = {{"user", p.text}};
      prompts.push_back(m.tokenizer->encode(m.tokenizer->apply_chat_template(chat, true), true,
                                            m.tokenizer->add_bos_default()));
    }
    run(prompts[0], {});  // warm-up
    // Plain decoding, the reference tokens and speed (re-measured next to every setting).
    std::vector<RunResult> plain;
    for (const auto& p : prompts) plain.push_back(run(p, {}));

    // v(k): a (k + 1)-row target pass over a one-row pass, measured above (k <= 8; beyond, the
    // last measured ratio grows linearly).
    auto v_of = [&](int64_t k) {
      const auto& rows = costs["verify"];
      const auto last = static_cast<int64_t>(rows.size());
      if (k + 1 <= last) return rows[static_cast<size_t>(k)]["relative"].get<double>();
      const double top = rows[static_cast<size_t>(last - 1)]["relative"].get<double>();
      return top + (top - 1.0) / static_cast<double>(last - 1) * static_cast<double>(k + 1 - last);
    };
    auto measure = [&](size_t pi, const lio::SpeculativeConfig& spec, double c) {
      std::vector<double> speedups, tps, plain_tps;
      RunResult last;
      for (int r = 0; r < repeats; ++r) {  // plain and speculative interleaved
        const RunResult ref = run(prompts[pi], {});
        last = run(prompts[pi], spec);
        if (last.tokens != plain[pi].tokens) {
          throw lio::InternalError(std::string("greedy speculation (") + lio::spec_method_name(spec.method) +
                                   ", k = " + std::to_string(spec.num_speculative_tokens) +
                                   ") changed the tokens of prompt '" + kPrompts[pi].name + "'");
        }
        speedups.push_back(last.tokens_per_s / ref.tokens_per_s);
        tps.push_back(last.tokens_per_s);
        plain_tps.push_back(ref.tokens_per_s);
      }
      const int64_t k = spec.num_speculative_tokens;
      const double rate = last.draft_tokens ? double(last.accepted) / double(last.draft_tokens) : 0.0;
      const double per_pass = last.drafts ? 1.0 + double(last.accepted) / double(last.drafts) : 1.0;
      // a: each round is a run of Bernoulli(a) acceptances stopped by a rejection or by k; the
      // estimate accepted / (accepted + rejections) counts every trial once. The counters' rate
      // (accepted / drafted) is lower: drafts after a rejection are never tried.
      const double a = last.accepted + last.rejections > 0
                           ? double(last.accepted) / double(last.accepted + last.rejections)
                           : 0.0;
      const double a_from_E = solve_a(per_pass, k);
      return json{{"method", lio::spec_method_name(spec.method)},
                  {"draft_layers", spec.method == lio::SpecMethod::EarlyExit ? spec.draft_layers : 0},
                  {"prompt", kPrompts[pi].name},
                  {"k", k},
                  {"acceptance_rate", rate},
                  {"tokens_per_pass", per_pass},
                  {"a", a},
                  {"a_from_tokens_per_pass", a_from_E},
                  {"c", c},
                  {"tokens_per_s", median(tps)},
                  {"plain_tokens_per_s", median(plain_tps)},
                  {"speedup", median(speedups)},
                  {"speedup_min", *std::min_element(speedups.begin(), speedups.end())},
                  {"speedup_max", *std::max_element(speedups.begin(), speedups.end())},
                  {"predicted_tokens_per_pass", lio::expected_tokens_per_pass(a, k)},
                  {"predicted_speedup", lio::speculative_speedup(a, k, c)},  // Task 2
                  // The same with the verification pass at its measured cost v(k) instead of 1.
                  {"v", v_of(k)},
                  {"predicted_speedup_v", lio::expected_tokens_per_pass(a, k) / (static_cast<double>(k) * c + v_of(k))},
                  {"same_tokens", true}};
    };
    json runs = json::array();
    for (const lio::SpecMethod method : methods) {
      for (size_t pi = 0; pi < prompts.size(); ++pi) {
        for (int64_t k = 1; k <= k_max; ++k) {
          lio::SpeculativeConfig spec{method, k, early_exit_layers};  // n-gram: the default bounds
          const double c = method == lio::SpecMethod::Draft ? t_draft / t1
                           : method == lio::SpecMethod::EarlyExit ? c_early[early_exit_layers] : 0.0;
          runs.push_back(measure(pi, spec, c));
          std::fprintf(stderr, "\r  %-10s %-8s k=%-2lld", lio::spec_method_name(method), kPrompts[pi].name, (long long)k);
        }
      }
    }
    if (std::find(methods.begin(), methods.end(), lio::SpecMethod::EarlyExit) != methods.end()) {
      for (const int64_t L : layer_sweep) {
        for (size_t pi = 0; pi < prompts.size(); ++pi) {
          json r = measure(pi, {lio::SpecMethod::EarlyExit, 2, L}, c_early[L]);
          r["sweep"] = "layers";
          runs.push_back(r);
        }
      }
    }
    std::fprintf(stderr, "\r%40s\r", "");
    j["runs"] = runs;
    j["plain_tokens_per_s"] = {{"grounded", plain[0].tokens_per_s}, {"free", plain[1].tokens_per_s}};

    // ---- 4. best k per drafter and prompt: measured and predicted ----
    json best = json::array();
    for (const lio::SpecMethod method : methods) {
      for (const Prompt& p : kPrompts) {
        const json* top = nullptr;
        double a_sum = 0, c = 0;
        int n = 0;
        for (const json& r : runs) {
          if (r["method"] != lio::spec_method_name(method) || r["prompt"] != p.name || r.contains("sweep")) continue;
          if (!top || r["speedup"].get<double>() > (*top)["speedup"].get<double>()) top = &r;
          a_sum += r["a"].get<double>();
          c = r["c"].get<double>();
          ++n;
        }
        if (!top) continue;
        const double a = a_sum / n;
        best.push_back({{"method", lio::spec_method_name(method)}, {"prompt", p.name},
                        {"measured_best_k", (*top)["k"]}, {"measured_best_speedup", (*top)["speedup"]},
                        {"mean_a", a}, {"c", c},
                        {"predicted_best_k", lio::best_num_speculative_tokens(std::min(a, 1.0), c, k_max)}});
      }
    }
    j["best_k"] = best;

    if (o.json) {
      std::cout << j.dump(2) << "\n";
      return 0;
    }
    std::printf("Lecture note 003's table from the formula (k = 4, c = 0.1):\n   a     E[tokens/pass]  speedup  best k\n");
    for (const json& r : formula)
      std::printf("  %.2f   %6.2f          %5.2fx   %lld\n", r["a"].get<double>(), r["expected_tokens"].get<double>(),
                  r["speedup"].get<double>(), (long long)r["best_k"].get<int64_t>());
    std::printf("\nWhat a step costs on %s (batch 1, 128 tokens of context):\n", runner->device_description().c_str());
    std::printf("  target pass: 1 row %.2f ms", t1);
    for (const json& v : verify) std::printf(", %lld rows %.2fx", (long long)v["rows"].get<int64_t>(), v["relative"].get<double>());
    std::printf("\n  draft (%s) step %.2f ms: c = %.3f\n", std::filesystem::path(dm.path).filename().c_str(), t_draft,
                t_draft / t1);
    for (const auto& [L, c] : c_early) std::printf("  early exit after %lld layers: c = %.3f\n", (long long)L, c);
    std::printf("\nThe drafters (greedy; every run gave plain decoding's tokens; plain: %.1f tok/s grounded, %.1f free):\n",
                plain[0].tokens_per_s, plain[1].tokens_per_s);
    std::printf("  %-10s %-3s %-8s %2s  %6s  %7s  %5s  %5s  %8s  %9s  %11s\n", "method", "L", "prompt", "k", "accept",
                "tok/pass", "a", "c", "speedup", "predicted", "with v(k)");
    for (const json& r : runs)
      std::printf("  %-10s %-3lld %-8s %2lld  %6.3f  %7.2f  %5.3f  %5.3f  %7.2fx  %8.2fx  %10.2fx\n",
                  r["method"].get<std::string>().c_str(), (long long)r["draft_layers"].get<int64_t>(),
                  r["prompt"].get<std::string>().c_str(), (long long)r["k"].get<int64_t>(),
                  r["acceptance_rate"].get<double>(), r["tokens_per_pass"].get<double>(), r["a"].get<double>(),
                  r["c"].get<double>(), r["speedup"].get<double>(), r["predicted_speedup"].get<double>(),
                  r["predicted_speedup_v"].get<double>());
    std::printf("\nBest k (measured vs best_num_speculative_tokens(mean a, c, %lld)):\n", (long long)k_max);
    for (const json& b : best)
      std::printf("  %-10s %-8s measured k=%lld (%.2fx)   predicted k=%lld (a=%.3f, c=%.3f)\n",
                  b["method"].get<std::string>().c_str(), b["prompt"].get<std::string>().c_str(),
                  (long long)b["measured_best_k"].get<int64_t>(), b["measured_best_speedup"].get<double>(),
                  (long long)b["predicted_best_k"].get<int64_t>(), b["mean_a"].get<double>(), b["c"].get<double>());
    print_tree_mask_demo();
    return 0;
  });
}
