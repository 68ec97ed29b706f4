// ch05_continuous_batching — chapter 05: continuous batching.
//
// Replays the lecture notes' example through the real engine, twice, on the same kernels:
// requests A, B, C with 500, 20 and 200 output tokens, then D..I with 60, 40, 400, 200, 120, 20
// (--extra more, the six cycling), all arriving at t = 0, batch size 3 (--max-num-seqs).
// - static batching (HF generate-style): a batch of 3 is admitted together and nobody joins
//   until all three have finished, so B's and C's slots sit idle while A runs on (idle for
//   the schedule, not for the device: as in HF generate, a finished row keeps decoding
//   padding until its batch ends; --no-static-padding lets it leave);
// - continuous batching (Orca, Yu et al. 2022; vLLM): the scheduler refills a slot the step
//   after its request finishes, so D starts at step 21 instead of step 501.
// The learner sees, per policy, which request occupies each of the 3 slots step by step
// (run-length segments, '.' = idle slot), the average batch size (static, first batch:
// (500+20+200)/500 = 1.44; continuous: about 3), steps, tokens/s and each request's TTFT/E2E;
// then the two side by side: the average-batch ratio (about 2.1x here) and the measured
// throughput ratio, which is smaller on a CPU: a step of 3 rows costs more than a step of 1.
// Output lengths are exact (greedy, ignore_eos, max_tokens = the length); prompts are
// --prompt-tokens pseudo-random ids, so every request's prefill takes one step that also
// samples its first token: a request is busy for exactly its output length in steps.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <random>

#include "lio/cli_common.h"
#include "lio/engine.h"
#include "lio/error.h"
#include "lio/request_trace.h"

namespace {
using json = nlohmann::ordered_json;

// ---- the requests -------------------------------------------------------------------------

/// One request of the replay; lengths are exact.
struct TraceRequest {
  std::string name;           ///< A, B, ..., Z, then its 1-based index: 27, 28, ...
  int64_t prompt_tokens = 0;  ///< prompt length
  int64_t output_tokens = 0;  ///< tokens to generate (after --scale)
};

/// The name of request `i` (0-based): a letter, then the 1-based index after Z.
std::string request_name(size_t i) {
  return i < 26 ? std::string(1, static_cast<char>('A' + i)) : std::to_string(i + 1);
}

/// `n` x `scale`, rounded, at least 1 token.
int64_t scaled(int64_t n, double scale) {
  return std::max<int64_t>(1, std::llround(static_cast<double>(n) * scale));
}

/// The notes' example: A, B, C = 500, 20, 200 tokens, then `extra` requests cycling through
/// 60, 40, 400, 200, 120, 20. Those six make two more static batches as lopsided as the first
/// (500/400 and 340/200 busy slot-steps per step: 1.25 and 1.7), and keep all 3 slots of the
/// continuous schedule full to the last step (1560 tokens in 520 steps): the whole-run ratio
/// is 3.0 / 1.42 = 2.1x, the notes' figure.
std::vector<TraceRequest> builtin_trace(int64_t extra, int64_t prompt_tokens, double scale) {
  static constexpr int64_t kFirst[] = {500, 20, 200}, kCycle[] = {60, 40, 400, 200, 120, 20};
  std::vector<TraceRequest> trace;
  for (int64_t i = 0; i < 3 + extra; ++i) {
    const int64_t n = i < 3 ? kFirst[i] : kCycle[(i - 3) % 6];
    trace.push_back({request_name(trace.size()), prompt_tokens, scaled(n, scale)});
  }
  return trace;
}

/// Reads a --trace file (lio::read_request_trace; format: lio/request_trace.h), lines without
/// "prompt_tokens" getting `prompt_tokens`, names A, B, ... in file order, output lengths times
/// --scale. Throws as read_request_trace.
std::vector<TraceRequest> read_trace(const std::string& path, int64_t prompt_tokens, double scale) {
  std::vector<TraceRequest> trace;
  for (const lio::TraceRequestLine& r : lio::read_request_trace(path, {prompt_tokens, 0}))
    trace.push_back({request_name(trace.size()), r.prompt_tokens, scaled(r.output_tokens, scale)});
  return trace;
}

/// Prompt token ids: pseudo-random ids in [100, vocab_size) from `seed` (ids below 100 hold
/// SmolLM2's special tokens). Both replays get the same prompts.
std::vector<std::vector<int32_t>> make_prompts(const std::vector<TraceRequest>& trace,
                                               int64_t vocab_size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t lo = std::min<int64_t>(100, vocab_size - 1);
  std::vector<std::vector<int32_t>> prompts;
  for (const TraceRequest& r : trace) {
    std::vector<int32_t> p(static_cast<size_t>(r.prompt_tokens));
    for (int32_t& t : p)
      t = static_cast<int32_t>(lo + static_cast<int64_t>(rng() % (vocab_size - lo)));
    prompts.push_back(std::move(p));
  }
  return prompts;
}

// ---- one replay ---------------------------------------------------------------------------

/// What one request saw in one replay.
struct RequestResult {
  int64_t first_step = 0, last_step = 0;  ///< first and last step it was busy in (1-based)
  int64_t generated = 0;                  ///< tokens it got
  double queue_ms = 0, ttft_ms = 0, tpot_ms = 0, e2e_ms = 0;  ///< the engine's timings
  int64_t preemptions = 0;                ///< times it was preempted
};

/// What one replay measured.
struct Replay {
  std::vector<std::vector<size_t>> busy;  ///< per step: indices of the requests busy in it
  std::vector<RequestResult> requests;    ///< by trace index
  int64_t n_generated = 0;                ///< tokens generated, all requests
  int64_t n_padding_rows = 0;             ///< static: finished rows run as padding (HF generate)
  double wall_s = 0;                      ///< from the first step to the last, seconds
};

/// Adds every request at once (greedy, ignore_eos, max_tokens = its output length), then steps
/// `engine` to the end. After each step, a request is busy if it got a token or its prompt
/// advanced (a chunked prefill that samples nothing yet). Throws InvalidArgument naming the
/// request the engine refuses.
Replay replay(lio::Engine& engine, const std::vector<TraceRequest>& trace,
              std::vector<std::vector<int32_t>> prompts) {
  std::map<int64_t, size_t> index_of;  // request id -> trace index
  for (size_t i = 0; i < trace.size(); ++i) {
    lio::SamplingParams p;  // the default sampler is greedy
    p.max_tokens = trace[i].output_tokens;
    p.ignore_eos = true;
    try {
      index_of[engine.add_request(std::move(prompts[i]), p)] = i;
    } catch (const lio::InvalidArgument& e) {
      throw lio::InvalidArgument("request " + trace[i].name + ": " + e.what());
    }
  }
  Replay r;
  r.requests.resize(trace.size());
  const auto t0 = std::chrono::steady_clock::now();
  while (engine.has_unfinished()) {
    std::map<int64_t, int64_t> computed_before;  // request id -> num_computed_tokens
    for (const auto& [id, seq] : engine.live_sequences())
      computed_before[seq->request_id] = seq->num_computed_tokens;
    const int64_t steps_before = engine.stats().n_steps;
    std::vector<bool> busy(trace.size(), false);
    for (const lio::RequestOutput& out : engine.step()) {
      RequestResult& q = r.requests[index_of.at(out.request_id)];
      const auto n = static_cast<int64_t>(out.new_token_ids.size());
      r.n_generated += n, q.generated += n;
      if (n > 0) busy[index_of.at(out.request_id)] = true;
      if (out.finished) {
        q.queue_ms = out.queue_ms, q.ttft_ms = out.ttft_ms, q.tpot_ms = out.tpot_ms;
        q.e2e_ms = out.e2e_ms, q.preemptions = out.n_preemptions;
      }
    }
    for (const auto& [id, seq] : engine.live_sequences())  // prefilling, no token yet
      if (seq->status == lio::SequenceStatus::Running &&
          seq->num_computed_tokens > computed_before[seq->request_id])
        busy[index_of.at(seq->request_id)] = true;
    if (engine.stats().n_steps == steps_before) continue;  // nothing ran (e.g. an unfittable)
    const auto step = static_cast<int64_t>(r.busy.size()) + 1;
    r.busy.emplace_back();
    for (size_t i = 0; i < busy.size(); ++i) {
      if (!busy[i]) continue;
      r.busy.back().push_back(i);
      if (r.requests[i].first_step == 0) r.requests[i].first_step = step;
      r.requests[i].last_step = step;
    }
  }
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.n_padding_rows = engine.stats().n_padding_tokens;
  return r;
}

// ---- the report ---------------------------------------------------------------------------
// The report is one JSON object (what --json prints); the text view is printed from it.

/// The slot timeline as run-length segments: a busy request keeps its slot; one that starts
/// takes the lowest idle slot; '.' marks an idle one. Each segment: first and last step, and
/// each slot's request name.
json timeline_json(const Replay& r, const std::vector<TraceRequest>& trace, int64_t n_slots) {
  std::vector<int64_t> slots(static_cast<size_t>(n_slots), -1);  // slot -> trace index, -1 idle
  json segments = json::array();
  for (size_t s = 0; s < r.busy.size(); ++s) {
    const std::vector<size_t>& busy = r.busy[s];
    for (int64_t& q : slots)  // free the slots of requests not busy any more
      if (q >= 0 && std::find(busy.begin(), busy.end(), static_cast<size_t>(q)) == busy.end())
        q = -1;
    for (size_t i : busy) {
      if (std::find(slots.begin(), slots.end(), static_cast<int64_t>(i)) != slots.end()) continue;
      auto idle = std::find(slots.begin(), slots.end(), -1);
      if (idle == slots.end()) idle = slots.insert(slots.end(), -1);  // never with max_num_seqs
      *idle = static_cast<int64_t>(i);
    }
    json names = json::array();
    for (int64_t q : slots) names.push_back(q < 0 ? "." : trace[static_cast<size_t>(q)].name);
    const auto step = static_cast<int64_t>(s) + 1;
    if (!segments.empty() && segments.back()["slots"] == names)
      segments.back()["last_step"] = step;
    else
      segments.push_back({{"first_step", step}, {"last_step", step}, {"slots", names}});
  }
  return segments;
}

/// One policy's results: steps, tokens, time, average batch, the timeline, per request.
json replay_json(const Replay& r, const std::vector<TraceRequest>& trace, int64_t n_slots) {
  int64_t slot_steps = 0;  // sum over steps of busy requests
  for (const auto& busy : r.busy) slot_steps += static_cast<int64_t>(busy.size());
  const auto n_steps = static_cast<double>(r.busy.size());
  json requests = json::array();
  for (size_t i = 0; i < trace.size(); ++i) {
    const RequestResult& q = r.requests[i];
    requests.push_back({{"name", trace[i].name}, {"first_step", q.first_step},
                        {"last_step", q.last_step}, {"generated_tokens", q.generated},
                        {"queue_ms", q.queue_ms}, {"ttft_ms", q.ttft_ms}, {"tpot_ms", q.tpot_ms},
                        {"e2e_ms", q.e2e_ms}, {"preemptions", q.preemptions}});
  }
  return {{"steps", r.busy.size()}, {"generated_tokens", r.n_generated},
          {"padding_rows", r.n_padding_rows}, {"wall_s", r.wall_s},
          {"tokens_per_s", r.wall_s > 0 ? static_cast<double>(r.n_generated) / r.wall_s : 0.0},
          {"avg_batch", n_steps > 0 ? static_cast<double>(slot_steps) / n_steps : 0.0},
          {"timeline", timeline_json(r, trace, n_slots)}, {"requests", requests}};
}

/// The static first batch: the notes' formula sum(lengths) / max(length) over its first
/// `n_slots` requests, beside the measured mean of busy requests over the steps it ran.
json first_batch_json(const Replay& stat, const std::vector<TraceRequest>& trace, int64_t n_slots) {
  const size_t n = std::min(trace.size(), static_cast<size_t>(n_slots));
  int64_t sum = 0, longest = 0, last_step = 0;
  json lengths = json::array(), names = json::array();
  for (size_t i = 0; i < n; ++i) {
    sum += trace[i].output_tokens, longest = std::max(longest, trace[i].output_tokens);
    last_step = std::max(last_step, stat.requests[i].last_step);
    lengths.push_back(trace[i].output_tokens), names.push_back(trace[i].name);
  }
  int64_t slot_steps = 0;
  for (size_t s = 0; s < static_cast<size_t>(last_step); ++s)
    slot_steps += static_cast<int64_t>(stat.busy[s].size());
  return {{"requests", names}, {"lengths", lengths}, {"sum", sum}, {"max", longest},
          {"formula_avg_batch", static_cast<double>(sum) / static_cast<double>(longest)},
          {"steps", last_step},
          {"measured_avg_batch", last_step ? double(slot_steps) / double(last_step) : 0.0}};
}

/// Prints the report `j` (built by main) for a reader.
void print_text(const json& j) {
  auto ll = [](const json& v) { return v.get<long long>(); };
  auto dbl = [](const json& v) { return v.get<double>(); };
  auto str = [](const json& v) { return v.get<std::string>(); };
  const json& t = j["trace"];
  std::printf("model %s | %s\n%lld requests (%s), all arriving at t=0, batch size %lld, "
              "%lld output tokens; greedy, ignore_eos\n", str(j["model"]).c_str(),
              str(j["device"]).c_str(), ll(t["n_requests"]), str(t["source"]).c_str(),
              ll(j["max_num_seqs"]), ll(t["output_tokens"]));
  std::string lengths;
  for (const json& q : t["requests"])
    lengths.append(lengths.empty() ? "" : " ").append(str(q["name"])).append("=").append(
        std::to_string(ll(q["output_tokens"])));
  std::printf("output lengths: %s (mean prompt %.1f tokens)\n", lengths.c_str(),
              dbl(t["mean_prompt_tokens"]));
  size_t width = 1;  // of a slot cell: the longest request name
  for (const json& q : t["requests"]) width = std::max(width, str(q["name"]).size());
  for (const char* policy : {"static", "continuous"}) {
    const json& p = j[policy];
    std::printf("\n== %s batching: %lld steps, %lld tokens, %.2f s, %.1f tokens/s, average "
                "batch %.2f ==\n", policy, ll(p["steps"]), ll(p["generated_tokens"]),
                dbl(p["wall_s"]), dbl(p["tokens_per_s"]), dbl(p["avg_batch"]));
    if (ll(p["padding_rows"]) > 0)
      std::printf("  ('.' slots of a running batch still cost a row: %lld padding rows ran, a "
                  "finished request decoding until its batch ends, as HF generate does)\n",
                  ll(p["padding_rows"]));
    for (const json& seg : p["timeline"]) {
      std::string cells;
      for (const json& name : seg["slots"])  // right-aligned in `width` columns
        cells.append(1 + width - str(name).size(), ' ').append(str(name));
      std::printf("  steps %5lld-%-5lld |%s |\n", ll(seg["first_step"]), ll(seg["last_step"]),
                  cells.c_str());
    }
  }
  std::printf("\nper request (steps it was busy in; TTFT and E2E from arrival at t=0, ms):\n");
  std::printf("  %-*s %6s | %-11s %9s %9s | %-11s %9s %9s\n", int(width), "", "tokens",
              "static", "TTFT", "E2E", "continuous", "TTFT", "E2E");
  for (size_t i = 0; i < t["requests"].size(); ++i) {
    const json &s = j["static"]["requests"][i], &c = j["continuous"]["requests"][i];
    auto span = [&](const json& q) {
      return std::to_string(ll(q["first_step"])) + "-" + std::to_string(ll(q["last_step"]));
    };
    std::printf("  %-*s %6lld | %-11s %9.0f %9.0f | %-11s %9.0f %9.0f\n", int(width),
                str(s["name"]).c_str(), ll(t["requests"][i]["output_tokens"]), span(s).c_str(),
                dbl(s["ttft_ms"]), dbl(s["e2e_ms"]), span(c).c_str(), dbl(c["ttft_ms"]),
                dbl(c["e2e_ms"]));
  }
  const json &m = j["summary"], &fb = m["static_first_batch"];
  std::string sum_text;
  std::string batch_names;
  for (const json& n : fb["lengths"])
    sum_text.append(sum_text.empty() ? "" : "+").append(std::to_string(ll(n)));
  for (const json& n : fb["requests"])
    batch_names.append(batch_names.empty() ? "" : " ").append(str(n));
  std::printf("\n== static vs continuous ==\n"
              "average batch      %.2f vs %.2f   -> %.2fx\n"
              "steps              %lld vs %lld\n"
              "throughput         %.1f vs %.1f tokens/s -> %.2fx measured\n"
              "static first batch (%s): formula (%s)/%lld = %.2f, measured %.2f over %lld steps\n"
              "mean TTFT          %.0f vs %.0f ms;  mean E2E %.0f vs %.0f ms\n",
              dbl(m["static_avg_batch"]), dbl(m["continuous_avg_batch"]), dbl(m["avg_batch_ratio"]),
              ll(j["static"]["steps"]), ll(j["continuous"]["steps"]),
              dbl(j["static"]["tokens_per_s"]), dbl(j["continuous"]["tokens_per_s"]),
              dbl(m["throughput_ratio"]), batch_names.c_str(), sum_text.c_str(),
              ll(fb["max"]), dbl(fb["formula_avg_batch"]), dbl(fb["measured_avg_batch"]),
              ll(fb["steps"]), dbl(m["static_mean_ttft_ms"]), dbl(m["continuous_mean_ttft_ms"]),
              dbl(m["static_mean_e2e_ms"]), dbl(m["continuous_mean_e2e_ms"]));
  if (ll(j["static"]["padding_rows"]) > 0)
    std::printf("(a static step keeps every row of its batch, padding included, as HF generate "
                "does, so throughput follows the average batch)\n");
  else if (dbl(m["throughput_ratio"]) < dbl(m["avg_batch_ratio"]))
    std::printf("(throughput gains less than the batch: static steps shrink as requests leave, "
                "and a step of %lld rows costs more than a step of 1 on this device)\n",
                ll(j["max_num_seqs"]));
}

/// Mean of `key` over a replay's requests.
double mean_over_requests(const json& replay, const char* key) {
  double sum = 0;
  for (const json& q : replay["requests"]) sum += q[key].get<double>();
  return replay["requests"].empty() ? 0.0 : sum / static_cast<double>(replay["requests"].size());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chapter 05: continuous batching vs static batching, replayed through the engine",
               "ch05_continuous_batching"};
  lio::CommonOptions o;
  lio::add_model_flags(app, o);
  lio::add_device_flag(app, o);
  lio::add_kv_pool_flags(app, o, /*engine=*/true);
  std::string trace_path;
  int64_t extra = 6, max_num_seqs = 3, prompt_tokens = 16;
  double scale = 1.0;
  uint64_t seed = 42;
  bool no_padding = false;
  app.add_flag("--no-static-padding", no_padding, "Static batching: a finished request leaves its "
               "batch at once instead of decoding padding until the batch ends (HF generate)");
  app.add_option("--trace", trace_path, "JSONL trace replacing A, B, C...: one request a line, "
                 "{\"output_tokens\": N, \"prompt_tokens\": M (optional)}; --scale applies to N");
  app.add_option("--extra", extra, "Requests after A, B, C (lengths cycle 60 40 400 200 120 20)")
      ->capture_default_str();
  app.add_option("--max-num-seqs", max_num_seqs, "Batch size: sequences in one step at most")
      ->capture_default_str();
  app.add_option("--prompt-tokens", prompt_tokens, "Prompt length of every request (a trace "
                 "line may set its own)")->capture_default_str();
  app.add_option("--scale", scale, "Multiplies every output length (0.1 = a quick run)")
      ->capture_default_str();
  app.add_option("--seed", seed, "Seed of the prompts' token ids")->capture_default_str();

  return lio::run_main(app, argc, argv, [&]() -> int {
    // ---- everything that needs no model first: flags, then the requests ----
    lio::apply_threads(o.threads);
    if (extra < 0) throw lio::InvalidArgument("--extra must be >= 0, got " + std::to_string(extra));
    if (prompt_tokens < 1)
      throw lio::InvalidArgument("--prompt-tokens must be >= 1, got " +
                                 std::to_string(prompt_tokens));
    if (!(scale > 0) || !std::isfinite(scale)) {
      char text[32];
      std::snprintf(text, sizeof text, "%g", scale);
      throw lio::InvalidArgument(std::string("--scale must be a finite number > 0, got ") + text);
    }
    lio::EngineConfig ec;
    ec.scheduler.max_num_seqs = max_num_seqs;
    ec.scheduler.static_padding = !no_padding;
    ec.scheduler.validate();
    ec.enforce_eager = o.enforce_eager;
    lio::parse_device(o.device);
    const std::vector<TraceRequest> trace = trace_path.empty()
                                                ? builtin_trace(extra, prompt_tokens, scale)
                                                : read_trace(trace_path, prompt_tokens, scale);

    // ---- model and runner; a warm-up so the first replay does not pay for cold caches ----
    lio::LoadedModel m = lio::load_from_options(o);
    std::unique_ptr<lio::ModelRunner> runner = lio::runner_from_options(m, o);
    if (!runner) return 0;  // a worker rank, done serving the driver (chapter 08)
    int64_t sum_output = 0;
    for (const TraceRequest& r : trace) {
      sum_output += r.output_tokens;
      if (r.prompt_tokens + r.output_tokens > m.config.context_length)
        throw lio::InvalidArgument("request " + r.name + ": " + std::to_string(r.prompt_tokens) +
                                   " + " + std::to_string(r.output_tokens) + " tokens; the "
                                   "context holds " + std::to_string(m.config.context_length));
    }
    const auto prompts = make_prompts(trace, m.config.vocab_size, seed);
    {
      lio::Engine warm(*runner, *m.tokenizer, ec);
      const TraceRequest& first = trace.front();
      replay(warm, {{"warm-up", first.prompt_tokens, std::min<int64_t>(4, first.output_tokens)}},
             {prompts.front()});
    }

    // ---- the two replays, each through a fresh engine over the same runner ----
    std::map<std::string, Replay> runs;
    for (auto policy : {lio::SchedulingPolicy::Static, lio::SchedulingPolicy::Continuous}) {
      ec.scheduler.policy = policy;
      lio::Engine engine(*runner, *m.tokenizer, ec);
      runs[lio::scheduling_policy_name(policy)] = replay(engine, trace, prompts);
    }

    // ---- report ----
    json requests = json::array();
    int64_t sum_prompt = 0;
    for (const TraceRequest& r : trace) sum_prompt += r.prompt_tokens;
    for (const TraceRequest& r : trace)
      requests.push_back({{"name", r.name}, {"prompt_tokens", r.prompt_tokens},
                          {"output_tokens", r.output_tokens}});
    json j{{"model", m.path}, {"device", runner->device_description()},
           {"max_num_seqs", max_num_seqs}, {"scale", scale}, {"static_padding", !no_padding},
           {"trace", {{"source", trace_path.empty() ? "built-in" : trace_path},
                      {"n_requests", trace.size()},
                      {"mean_prompt_tokens", double(sum_prompt) / double(trace.size())},
                      {"output_tokens", sum_output}, {"requests", requests}}},
           {"static", replay_json(runs["static"], trace, max_num_seqs)},
           {"continuous", replay_json(runs["continuous"], trace, max_num_seqs)}};
    const json &s = j["static"], &c = j["continuous"];
    auto ratio = [](const json& a, const json& b) {
      return b.get<double>() > 0 ? a.get<double>() / b.get<double>() : 0.0;
    };
    j["summary"] = {
        {"static_avg_batch", s["avg_batch"]}, {"continuous_avg_batch", c["avg_batch"]},
        {"avg_batch_ratio", ratio(c["avg_batch"], s["avg_batch"])},
        {"throughput_ratio", ratio(c["tokens_per_s"], s["tokens_per_s"])},
        {"static_mean_ttft_ms", mean_over_requests(s, "ttft_ms")},
        {"continuous_mean_ttft_ms", mean_over_requests(c, "ttft_ms")},
        {"static_mean_e2e_ms", mean_over_requests(s, "e2e_ms")},
        {"continuous_mean_e2e_ms", mean_over_requests(c, "e2e_ms")},
        {"static_first_batch", first_batch_json(runs["static"], trace, max_num_seqs)}};
    for (const auto& [policy, r] : runs)  // the engine ends a request the pool can never hold
      if (r.n_generated != sum_output)
        std::fprintf(stderr, "note: %s: %lld of the %lld output tokens were generated\n",
                     policy.c_str(), (long long)r.n_generated, (long long)sum_output);
    if (o.json) {
      std::cout << j.dump(2) << "\n";
    } else {
      print_text(j);
    }
    return 0;
  });
}
