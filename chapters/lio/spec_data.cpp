// spec_data.cpp — `lio spec-data` (see spec_data.h): greedy answers through one Engine, then a
// teacher-forced pass per sequence that keeps every position's hidden state, written as one
// safetensors file.
#include "spec_data.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "batch_requests.h"
#include "lio/engine.h"
#include "lio/error.h"
#include "lio/model_runner.h"
#include "lio/safetensors.h"

namespace lio {

CLI::App* add_spec_data_subcommand(CLI::App& parent, CommonOptions& o, SpecDataOptions& s) {
  CLI::App* app = parent.add_subcommand(
      "spec-data",
      "Self-distillation data for trained drafters (Medusa heads, issue 63): greedy answers to a JSONL "
      "prompt set, then every position's final hidden state from a teacher-forced pass, to a safetensors "
      "file (tokens I32 (N), hidden F32 (N, d_model), seq_starts I32 (S+1), prompt_lens I32 (S))");
  add_model_flags(*app, o);
  o.activations = "auto";  // the serving default: the states the drafter will see when served
  add_device_flag(*app, o);
  add_kv_pool_flags(*app, o, /*engine=*/true);
  o.sampler = SamplerConfig{};  // greedy: the target's own most likely continuation
  app->add_option("--prompts", s.prompts_path,
                  "JSONL input, one prompt a line: {\"prompt\": ...} (plain text) or {\"messages\": [...]} "
                  "(rendered with the model's chat template, as lio generate --chat does)")
      ->required();
  app->add_option("--out", s.out_path, "The safetensors file to write")->required();
  app->add_option("--max-tokens", s.max_tokens, "Greedy answer length at most (EOS ends an answer sooner)")
      ->capture_default_str();
  app->add_option("--max-num-seqs", s.max_num_seqs, "Answers generated together in one engine")
      ->capture_default_str();
  app->add_option("--limit", s.limit, "Use the first N prompts only (0 = all)")->capture_default_str();
  app->add_flag("--ignore-eos", s.ignore_eos,
                "Keep generating past EOS: every answer max_tokens long (tests on random models)");
  return app;
}

namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

/// Wall seconds from `t0` to now.
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Prints "[spec-data] PHASE: done/total WHAT (rate)" on stderr at most every 2 s (and always
/// when `force`): progress that also reads well in a log file.
class Progress {
 public:
  Progress(const char* phase, int64_t total) : phase_(phase), total_(total), t0_(Clock::now()), last_(t0_) {}
  /// Reports `done` of the total and `tokens` processed so far.
  void update(int64_t done, int64_t tokens, bool force = false) {
    const auto now = Clock::now();
    if (!force && now - last_ < std::chrono::seconds(2)) return;
    last_ = now;
    const double s = seconds_since(t0_);
    std::fprintf(stderr, "[spec-data] %s: %lld/%lld sequences, %lld tokens, %.1f s (%.0f tok/s)\n", phase_,
                 static_cast<long long>(done), static_cast<long long>(total_), static_cast<long long>(tokens), s,
                 s > 0 ? static_cast<double>(tokens) / s : 0.0);
  }
  /// Seconds since construction.
  double seconds() const { return seconds_since(t0_); }

 private:
  const char* phase_;
  int64_t total_;
  Clock::time_point t0_, last_;
};

/// Greedy answers to `prompts` through one Engine over `runner` (all requests added at once, as
/// lio batch does); answer i belongs to prompt i. The engine is gone when this returns, so its KV
/// blocks are free for the teacher-forced pass.
std::vector<std::vector<int32_t>> generate_answers(ModelRunner& runner, const Tokenizer& tokenizer,
                                                   const std::vector<std::vector<int32_t>>& prompts,
                                                   const SamplingParams& params, int64_t max_num_seqs) {
  EngineConfig config;
  config.scheduler.max_num_seqs = max_num_seqs;
  config.scheduler.validate();
  Engine engine(runner, tokenizer, config);
  std::map<int64_t, size_t> index_of;  // engine request id -> prompt index
  for (size_t i = 0; i < prompts.size(); ++i) index_of[engine.add_request(prompts[i], params)] = i;
  std::vector<std::vector<int32_t>> answers(prompts.size());
  Progress progress("generate", static_cast<int64_t>(prompts.size()));
  int64_t n_done = 0, n_tokens = 0;
  while (engine.has_unfinished()) {
    for (const RequestOutput& out : engine.step()) {
      std::vector<int32_t>& a = answers[index_of.at(out.request_id)];
      a.insert(a.end(), out.new_token_ids.begin(), out.new_token_ids.end());
      n_tokens += static_cast<int64_t>(out.new_token_ids.size());
      n_done += out.finished ? 1 : 0;
    }
    progress.update(n_done, n_tokens);
  }
  progress.update(n_done, n_tokens, /*force=*/true);
  return answers;
}

}  // namespace

int run_spec_data(const CommonOptions& o, const SpecDataOptions& s) {
  // ---- everything that needs no model: flags and the whole prompts file ----
  apply_threads(o.threads);
  if (s.max_tokens < 1) throw InvalidArgument("--max-tokens must be >= 1, got " + std::to_string(s.max_tokens));
  if (s.max_num_seqs < 1) throw InvalidArgument("--max-num-seqs must be >= 1, got " + std::to_string(s.max_num_seqs));
  if (s.limit < 0) throw InvalidArgument("--limit must be >= 0, got " + std::to_string(s.limit));
  if (o.parallel.pipeline_parallel_size > 1) {
    throw UnsupportedError("lio spec-data: hidden states under pipeline parallelism are not supported (the driver "
                           "is not the last stage)");
  }
  parse_device(o.device);
  SamplingParams defaults;
  defaults.max_tokens = s.max_tokens;
  defaults.sampler = o.sampler;
  defaults.ignore_eos = s.ignore_eos;
  defaults.validate();
  if (!std::filesystem::exists(s.prompts_path))
    throw InvalidArgument("--prompts " + single_quoted(s.prompts_path) + " does not exist");
  std::ifstream in(s.prompts_path);
  if (!in) throw InvalidArgument("cannot read --prompts " + single_quoted(s.prompts_path));
  std::vector<BatchRequest> requests = parse_batch_requests(in, s.prompts_path, defaults);
  if (s.limit > 0 && static_cast<int64_t>(requests.size()) > s.limit) requests.resize(static_cast<size_t>(s.limit));

  // ---- model and runner ----
  const Clock::time_point t_load = Clock::now();
  LoadedModel m = load_from_options(o);
  std::unique_ptr<ModelRunner> runner = runner_from_options(m, o);
  if (!runner) return 0;  // a worker rank, done serving the driver (chapter 08)
  const int64_t d = m.config.d_model;
  std::vector<std::vector<int32_t>> prompts;
  for (const BatchRequest& r : requests) prompts.push_back(batch_prompt_ids(r, *m.tokenizer));
  std::fprintf(stderr, "[spec-data] model %s (%s, d_model %lld) on %s; %zu prompts, load %.1f s\n", m.path.c_str(),
               m.config.name.c_str(), static_cast<long long>(d), runner->device_description().c_str(),
               prompts.size(), seconds_since(t_load));

  // ---- 1. greedy answers ----
  const Clock::time_point t_gen = Clock::now();
  SamplingParams params = defaults;
  params.n = 1;
  const std::vector<std::vector<int32_t>> answers =
      generate_answers(*runner, *m.tokenizer, prompts, params, s.max_num_seqs);
  const double gen_s = seconds_since(t_gen);

  // ---- 2. teacher-forced pass over prompt + answer: every position's hidden state ----
  std::vector<int32_t> tokens, seq_starts{0}, prompt_lens;
  int64_t longest = 1;
  for (size_t i = 0; i < prompts.size(); ++i)
    longest = std::max<int64_t>(longest, static_cast<int64_t>(prompts[i].size() + answers[i].size()));
  SoloSequence seq(*runner, longest);
  std::vector<float> hidden;
  Progress progress("hidden states", static_cast<int64_t>(prompts.size()));
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> ids = prompts[i];
    ids.insert(ids.end(), answers[i].begin(), answers[i].end());
    seq.clear();
    seq.forward(ids, /*all_logits=*/true, /*return_hidden=*/true);
    const std::span<const float> h = runner->hidden_states();
    LIO_CHECK(static_cast<int64_t>(h.size()) == static_cast<int64_t>(ids.size()) * d, "spec-data: hidden rows");
    hidden.insert(hidden.end(), h.begin(), h.end());
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    seq_starts.push_back(static_cast<int32_t>(tokens.size()));
    prompt_lens.push_back(static_cast<int32_t>(prompts[i].size()));
    progress.update(static_cast<int64_t>(i + 1), static_cast<int64_t>(tokens.size()));
  }
  progress.update(static_cast<int64_t>(prompts.size()), static_cast<int64_t>(tokens.size()), /*force=*/true);
  const double hidden_s = progress.seconds();

  // ---- 3. the file ----
  const auto n = static_cast<int64_t>(tokens.size());
  const auto n_seqs = static_cast<int64_t>(prompts.size());
  int64_t n_answer_tokens = 0;
  for (const auto& a : answers) n_answer_tokens += static_cast<int64_t>(a.size());
  SafetensorsWriter w;
  w.add_tensor_i32("tokens", {n}, tokens);
  w.add_tensor_f32("hidden", DType::F32, {n, d}, hidden);
  w.add_tensor_i32("seq_starts", {n_seqs + 1}, seq_starts);
  w.add_tensor_i32("prompt_lens", {n_seqs}, prompt_lens);
  w.set_metadata("model", m.path);
  w.set_metadata("prompts", s.prompts_path);
  w.set_metadata("d_model", std::to_string(d));
  w.set_metadata("vocab_size", std::to_string(m.config.vocab_size));
  w.set_metadata("max_tokens", std::to_string(s.max_tokens));
  w.set_metadata("n_sequences", std::to_string(n_seqs));
  w.set_metadata("n_tokens", std::to_string(n));
  w.set_metadata("activations", o.activations);
  w.write(s.out_path);
  std::fprintf(stderr,
               "[spec-data] %lld sequences, %lld positions (%lld generated) -> %s (%.1f MiB); generate %.1f s, "
               "hidden states %.1f s\n",
               static_cast<long long>(n_seqs), static_cast<long long>(n), static_cast<long long>(n_answer_tokens),
               s.out_path.c_str(), static_cast<double>(n) * static_cast<double>(d) * 4.0 / (1 << 20), gen_s,
               hidden_s);
  std::cout << json{{"out", s.out_path},
                    {"n_sequences", n_seqs},
                    {"n_tokens", n},
                    {"n_generated_tokens", n_answer_tokens},
                    {"d_model", d},
                    {"generate_s", gen_s},
                    {"hidden_s", hidden_s},
                    {"device", runner->device_description()}}
                   .dump()
            << "\n";
  return 0;
}

}  // namespace lio
