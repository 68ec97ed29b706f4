// bench_serve — a serving benchmark in the manner of `vllm bench serve`
// (vLLM benchmarks/benchmark_serving.py): one fixed-seed dataset of real English prompts and
// output lengths (serve_dataset.h), sent to one or more OpenAI-compatible servers as streamed
// /v1/completions with Poisson arrivals at each --request-rates (inf = all at once), at most
// --max-concurrency in flight. Per request: TTFT, TPOT, ITL, E2E (serve_client.h). Per run:
// request and output-token throughput, mean / p50 / p99 of each latency, and goodput (requests
// per second that met --slo-ttft-ms and --slo-tpot-ms; Zhong et al. 2024, DistServe, sec. 2).
// Targets (--target lio=http://127.0.0.1:8000 --target llama=http://127.0.0.1:8001) run in
// turn at each rate on the same requests (new ones at each rate, so no server's prompt cache
// carries a run into the next), so one run compares servers side by side; ratios are of the
// first target over each other one.
//   build/bin/bench_serve --target lio=http://127.0.0.1:8000 --request-rates 1,4,inf
//       --num-prompts 100 --max-concurrency 32 --json out.json
// scripts/bench_serve.sh starts lio-server and llama-server and runs this against both.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <semaphore>
#include <sstream>
#include <thread>

#include "bench_util.h"
#include "lio/atomic_file.h"
#include "lio/cli_common.h"
#include "lio/error.h"
#include "lio/model_loader.h"
#include "serve_client.h"
#include "serve_dataset.h"

namespace {

using json = nlohmann::ordered_json;
using namespace lio::bench;  // this file is the benchmark's main: its helpers, unqualified

// ============================================================================
// Settings and small helpers
// ============================================================================

struct Settings {
  std::vector<std::string> target_args;  ///< name=URL
  std::string model_name;                ///< "model" sent; empty: each target's first /v1/models id
  std::string api_key;
  std::string tokenizer_path;  ///< GGUF whose tokenizer counts prompt tokens
  std::string corpus_path = "/usr/share/common-licenses/GPL-3";
  int64_t num_prompts = 200;
  ServeShape shape;
  std::vector<std::string> rates = {"1", "4", "inf"};
  int64_t max_concurrency = 0;  ///< 0 = unlimited
  uint64_t seed = 0;
  double slo_ttft_ms = 0, slo_tpot_ms = 0;  ///< 0 = no bound
  int64_t warmup = 2;
  double timeout_s = 600;
  std::string json_path;
};

/// NaN -> null (JSON has no NaN).
json num(double x) { return std::isnan(x) ? json(nullptr) : json(x); }

/// "name=http://host:port" -> target. Throws InvalidArgument on another shape.
ServeTarget parse_target(const std::string& arg, const Settings& s) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0 || arg.compare(eq + 1, 7, "http://") != 0)
    throw lio::InvalidArgument("--target must be NAME=http://HOST:PORT, got '" + arg + "'");
  ServeTarget t{arg.substr(0, eq), arg.substr(eq + 1), s.model_name, s.api_key};
  while (!t.url.empty() && t.url.back() == '/') t.url.pop_back();
  return t;
}

/// Requests per second from text: a positive number or "inf". Throws InvalidArgument.
double rate_value(const std::string& text) {
  if (text == "inf") return INFINITY;
  char* end = nullptr;
  const double r = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(r > 0))
    throw lio::InvalidArgument("--request-rates takes positive numbers or inf, got '" + text + "'");
  return r;
}

// ============================================================================
// One run: every request of the dataset to one target at one rate
// ============================================================================

struct RunResult {
  std::vector<RequestOutcome> outcomes;  ///< (n_requests), dataset order
  double wall_s = 0;                     ///< first send -> last response end
  int64_t max_in_flight = 0;
};

RunResult run_one(const ServeTarget& target, const ServeDataset& d, double rate,
                  const Settings& s) {
  const std::vector<double> arrivals = arrival_times_s(d.trace, rate);
  const size_t n = d.trace.size();
  const auto slots = static_cast<std::ptrdiff_t>(s.max_concurrency > 0 ? s.max_concurrency
                                                                       : static_cast<int64_t>(n));
  std::counting_semaphore<1 << 20> free_slots(slots);
  std::atomic<int64_t> in_flight{0}, max_in_flight{0};
  RunResult r;
  r.outcomes.resize(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  const double t0 = now_s();
  for (size_t i = 0; i < n; ++i) {
    const double wait_s = t0 + arrivals[i] - now_s();
    if (wait_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
    free_slots.acquire();  // a request past its arrival waits here for a slot, as in vLLM
    threads.emplace_back([&, i] {
      const int64_t now = ++in_flight;
      int64_t prev = max_in_flight.load();
      while (now > prev && !max_in_flight.compare_exchange_weak(prev, now)) {
      }
      r.outcomes[i] =
          stream_completion(target, d.texts[i], d.trace[i].output_tokens, s.timeout_s, t0);
      --in_flight;
      free_slots.release();
    });
  }
  for (std::thread& t : threads) t.join();
  r.wall_s = now_s() - t0;
  r.max_in_flight = max_in_flight.load();
  return r;
}

/// The run's summary row: counts, throughput, latency mean / p50 / p99, goodput.
json summarize(const ServeTarget& target, const std::string& rate, const RunResult& r,
               const ServeDataset& d, const Settings& s) {
  std::vector<double> ttft, tpot, itl, e2e;
  std::vector<lio::server::RequestLatency> latencies;  // of the completed requests, for goodput
  int64_t completed = 0, failed = 0, out_tokens = 0, in_tokens = 0, short_outputs = 0,
          prompt_count_mismatch = 0;
  json errors = json::array();
  for (size_t i = 0; i < r.outcomes.size(); ++i) {
    const RequestOutcome& o = r.outcomes[i];
    if (!o.ok) {
      ++failed;
      if (errors.size() < 3) errors.push_back(o.error);
      continue;
    }
    ++completed;
    out_tokens += o.output_tokens;
    in_tokens += static_cast<int64_t>(d.trace[i].prompt.size());
    if (o.output_tokens != d.trace[i].output_tokens) ++short_outputs;
    if (o.usage_prompt_tokens >= 0 &&
        o.usage_prompt_tokens != static_cast<int64_t>(d.trace[i].prompt.size()))
      ++prompt_count_mismatch;
    ttft.push_back(o.ttft_ms);
    e2e.push_back(o.e2e_ms);
    if (o.output_tokens > 1) tpot.push_back(o.tpot_ms);
    itl.insert(itl.end(), o.itl_ms.begin(), o.itl_ms.end());
    latencies.push_back(o.latency);
  }
  const lio::server::SloTargets slo{s.slo_ttft_ms / 1e3, s.slo_tpot_ms / 1e3};
  auto mean = [](const std::vector<double>& v) -> double {
    if (v.empty()) return NAN;
    double sum = 0;
    for (double x : v) sum += x;
    return sum / static_cast<double>(v.size());
  };
  json row = {{"target", target.name},
              {"rate", rate},
              {"completed", completed},
              {"failed", failed},
              {"short_outputs", short_outputs},
              {"prompt_count_mismatch", prompt_count_mismatch},
              {"duration_s", r.wall_s},
              {"max_in_flight", r.max_in_flight},
              {"input_tokens", in_tokens},
              {"output_tokens", out_tokens},
              {"request_throughput", static_cast<double>(completed) / r.wall_s},
              {"output_throughput", static_cast<double>(out_tokens) / r.wall_s},
              {"total_token_throughput", static_cast<double>(out_tokens + in_tokens) / r.wall_s},
              {"goodput", lio::server::goodput(latencies, slo, r.wall_s)}};
  for (const auto& [name, v] : {std::pair<const char*, const std::vector<double>*>{"ttft", &ttft},
                                {"tpot", &tpot},
                                {"itl", &itl},
                                {"e2e", &e2e}}) {
    row[std::string(name) + "_mean_ms"] = num(mean(*v));
    row[std::string(name) + "_p50_ms"] = num(percentile(*v, 50));
    row[std::string(name) + "_p99_ms"] = num(percentile(*v, 99));
  }
  row["errors"] = errors;
  // Per request, for plots (CDFs): dataset order; NaN-free (failed requests carry null).
  json per = {{"start_s", json::array()},
              {"ttft_ms", json::array()},
              {"tpot_ms", json::array()},
              {"e2e_ms", json::array()},
              {"output_tokens", json::array()}};
  for (const RequestOutcome& o : r.outcomes) {
    per["start_s"].push_back(o.start_s);
    per["ttft_ms"].push_back(o.ok ? json(o.ttft_ms) : json(nullptr));
    per["tpot_ms"].push_back(o.ok && o.output_tokens > 1 ? json(o.tpot_ms) : json(nullptr));
    per["e2e_ms"].push_back(o.ok ? json(o.e2e_ms) : json(nullptr));
    per["output_tokens"].push_back(o.output_tokens);
  }
  row["per_request"] = per;
  return row;
}

double get(const json& row, const char* key) {
  return row[key].is_null() ? NAN : row[key].get<double>();
}

void print_table(const json& runs) {
  std::printf(
      "| target | rate (req/s) | done | failed | req/s | out tok/s | goodput req/s | TTFT mean | "
      "TTFT p50 | "
      "TTFT p99 | TPOT mean | TPOT p50 | TPOT p99 | ITL mean | ITL p50 | ITL p99 | E2E mean | E2E "
      "p50 | E2E p99 "
      "| max in flight |\n");
  std::printf(
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---"
      ":|---:|\n");
  for (const json& r : runs) {
    std::printf("| %s | %s | %lld | %lld | %s | %s | %s", r["target"].get<std::string>().c_str(),
                r["rate"].get<std::string>().c_str(), r["completed"].get<long long>(),
                r["failed"].get<long long>(), fmt(get(r, "request_throughput"), 2).c_str(),
                fmt(get(r, "output_throughput")).c_str(), fmt(get(r, "goodput"), 2).c_str());
    for (const char* k : {"ttft_mean_ms", "ttft_p50_ms", "ttft_p99_ms", "tpot_mean_ms",
                          "tpot_p50_ms", "tpot_p99_ms", "itl_mean_ms", "itl_p50_ms", "itl_p99_ms",
                          "e2e_mean_ms", "e2e_p50_ms", "e2e_p99_ms"})
      std::printf(" | %s", fmt(get(r, k)).c_str());
    std::printf(" | %lld |\n", r["max_in_flight"].get<long long>());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Serving benchmark (like vllm bench serve): Poisson load on OpenAI-compatible servers",
      "bench_serve"};
  Settings s;
  app.add_option("--target", s.target_args,
                 "NAME=http://HOST:PORT of a server under test (repeatable; ratios are "
                 "the first over each other)")
      ->required();
  app.add_option("--model-name", s.model_name,
                 "The \"model\" field sent (default: each target's first /v1/models id)");
  app.add_option("--api-key", s.api_key, "Bearer key sent to every target");
  app.add_option("--tokenizer", s.tokenizer_path,
                 "GGUF file whose tokenizer cuts and counts prompts (default: the "
                 "default model)");
  app.add_option("--dataset", s.corpus_path, "UTF-8 text the prompts are cut from")
      ->capture_default_str();
  app.add_option("--num-prompts", s.num_prompts, "Requests per run")->capture_default_str();
  app.add_option("--input-len", s.shape.input_len, "Mean prompt tokens")->capture_default_str();
  app.add_option("--output-len", s.shape.output_len, "Mean output tokens (max_tokens, ignore_eos)")
      ->capture_default_str();
  app.add_option("--range-ratio", s.shape.range_ratio, "Lengths uniform in [len*(1-r), len*(1+r)]")
      ->capture_default_str();
  app.add_option("--request-rates", s.rates, "Poisson arrival rates, req/s; inf = all at once")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--max-concurrency", s.max_concurrency,
                 "Requests in flight at most (0 = unlimited)")
      ->capture_default_str();
  app.add_option("--seed", s.seed, "Dataset seed (prompts, lengths, arrival gaps)")
      ->capture_default_str();
  app.add_option("--slo-ttft-ms", s.slo_ttft_ms, "Goodput: TTFT at most this (0 = no bound)")
      ->capture_default_str();
  app.add_option("--slo-tpot-ms", s.slo_tpot_ms, "Goodput: TPOT at most this (0 = no bound)")
      ->capture_default_str();
  app.add_option("--warmup", s.warmup, "Short requests per target before measuring")
      ->capture_default_str();
  app.add_option("--timeout-s", s.timeout_s, "Read timeout of one request")->capture_default_str();
  app.add_option("--json", s.json_path, "Write settings, machine and every run here");

  return lio::run_main(app, argc, argv, [&]() -> int {
    std::vector<double> rate_values;
    for (const std::string& r : s.rates) rate_values.push_back(rate_value(r));
    if (s.num_prompts < 1) throw lio::InvalidArgument("--num-prompts must be >= 1");
    if (s.max_concurrency < 0) throw lio::InvalidArgument("--max-concurrency must be >= 0");
    std::vector<ServeTarget> targets;
    for (const std::string& a : s.target_args) targets.push_back(parse_target(a, s));

    // ---- dataset ----
    const std::string tok_path =
        s.tokenizer_path.empty() ? lio::default_model_path() : s.tokenizer_path;
    std::unique_ptr<lio::Tokenizer> tok = lio::load_tokenizer(tok_path);
    std::ifstream corpus_in(s.corpus_path, std::ios::binary);
    if (!corpus_in) throw lio::InvalidArgument("cannot read --dataset '" + s.corpus_path + "'");
    std::stringstream corpus;
    corpus << corpus_in.rdbuf();
    // One dataset per rate (seed, seed + 1, ...): a server never sees a prompt twice, so no prompt
    // cache (llama-server keeps each slot's last prompt; lio's --prefix-cache) carries one run
    // into the next. At one rate every target gets the same requests.
    std::vector<ServeDataset> datasets;
    int64_t sum_in = 0, sum_out = 0;
    for (size_t k = 0; k < rate_values.size(); ++k) {
      datasets.push_back(
          make_serve_dataset(*tok, corpus.str(), s.num_prompts, s.shape, s.seed + k));
      for (const auto& r : datasets.back().trace) {
        sum_in += static_cast<int64_t>(r.prompt.size());
        sum_out += r.output_tokens;
      }
    }
    const double n_all =
        static_cast<double>(s.num_prompts) * static_cast<double>(rate_values.size());

    // ---- targets: model names, warm-up ----
    json target_info = json::array();
    for (ServeTarget& t : targets) {
      const std::string models = http_get(t, "/v1/models");
      const json mj = json::parse(models, nullptr, false);
      if (t.model.empty()) {
        if (mj.is_discarded() || !mj.contains("data") || mj["data"].empty())
          throw lio::InvalidArgument("target " + t.name + " (" + t.url +
                                     "): GET /v1/models failed; is it up?");
        t.model = mj["data"][0].value("id", "");
      }
      for (int64_t i = 0; i < s.warmup; ++i) {
        const RequestOutcome o = stream_completion(
            t, "Warm-up " + std::to_string(i) + ": say something.", 8, s.timeout_s, now_s());
        if (!o.ok)
          throw lio::InvalidArgument("target " + t.name + ": warm-up request failed: " + o.error);
      }
      target_info.push_back({{"name", t.name}, {"url", t.url}, {"model", lio::bench::local_path_free(t.model)}});
    }

    const std::string cpu = cpu_name();
    const unsigned n_cores = std::thread::hardware_concurrency();
    const double load_start = load_average_1min();
    std::printf("# Serving benchmark (bench_serve)\n\n");
    std::printf("machine: %s, %u cores; load average at the start %s\n", cpu.c_str(), n_cores,
                fmt(load_start, 2).c_str());
    for (const json& t : target_info)
      std::printf("target %s: %s, model \"%s\"\n", t["name"].get<std::string>().c_str(),
                  t["url"].get<std::string>().c_str(), t["model"].get<std::string>().c_str());
    std::printf(
        "dataset: %lld prompts per run cut from %s (tokenizer %s), prompt tokens mean %.1f, output "
        "tokens mean "
        "%.1f (range ratio %.2f, seed %llu + rate index: new prompts at each rate), greedy, "
        "ignore_eos\n",
        (long long)s.num_prompts, s.corpus_path.c_str(), lio::bench::local_path_free(tok_path).c_str(),
        static_cast<double>(sum_in) / n_all, static_cast<double>(sum_out) / n_all,
        s.shape.range_ratio, (unsigned long long)s.seed);
    std::printf("max concurrency %s, SLOs: TTFT <= %s ms, TPOT <= %s ms; latencies in ms\n\n",
                s.max_concurrency ? std::to_string(s.max_concurrency).c_str() : "unlimited",
                s.slo_ttft_ms > 0 ? fmt(s.slo_ttft_ms, 0).c_str() : "inf",
                s.slo_tpot_ms > 0 ? fmt(s.slo_tpot_ms, 0).c_str() : "inf");
    std::fflush(stdout);

    // ---- runs: at each rate, every target in turn on the same requests ----
    json runs = json::array();
    for (size_t k = 0; k < rate_values.size(); ++k) {
      for (const ServeTarget& t : targets) {
        std::fprintf(stderr, "bench_serve: %s at %s req/s ...\n", t.name.c_str(),
                     s.rates[k].c_str());
        const RunResult r = run_one(t, datasets[k], rate_values[k], s);
        json row = summarize(t, s.rates[k], r, datasets[k], s);
        std::fprintf(stderr,
                     "bench_serve:   %lld done, %lld failed, %.1f out tok/s, TTFT p99 %.0f ms\n",
                     row["completed"].get<long long>(), row["failed"].get<long long>(),
                     get(row, "output_throughput"), get(row, "ttft_p99_ms"));
        runs.push_back(std::move(row));
      }
    }
    json summary_rows = json::array();
    for (const json& r : runs) {
      json copy = r;
      copy.erase("per_request");
      summary_rows.push_back(copy);
    }
    print_table(summary_rows);

    // ---- ratios: the first target over each other one ----
    json ratios = json::array();
    if (targets.size() > 1) {
      std::printf(
          "\n| rate (req/s) | ratio | out tok/s | goodput | TTFT p99 | TPOT p50 | E2E p50 |\n");
      std::printf("|---|---|---:|---:|---:|---:|---:|\n");
      auto find = [&](const std::string& target, const std::string& rate) -> const json& {
        for (const json& r : summary_rows)
          if (r["target"] == target && r["rate"] == rate) return r;
        throw lio::InternalError("no run " + target + " @ " + rate);
      };
      // A ratio over zero (e.g. no request met the SLOs) is no number: NaN, printed "-".
      auto ratio = [](double x, double y) { return y > 0.0 ? x / y : std::nan(""); };
      for (const std::string& rate : s.rates) {
        const json& a = find(targets[0].name, rate);
        for (size_t j = 1; j < targets.size(); ++j) {
          const json& b = find(targets[j].name, rate);
          const json row = {
              {"rate", rate},
              {"numerator", targets[0].name},
              {"denominator", targets[j].name},
              {"output_throughput", num(ratio(get(a, "output_throughput"), get(b, "output_throughput")))},
              {"goodput", num(ratio(get(a, "goodput"), get(b, "goodput")))},
              {"ttft_p99", num(ratio(get(a, "ttft_p99_ms"), get(b, "ttft_p99_ms")))},
              {"tpot_p50", num(ratio(get(a, "tpot_p50_ms"), get(b, "tpot_p50_ms")))},
              {"e2e_p50", num(ratio(get(a, "e2e_p50_ms"), get(b, "e2e_p50_ms")))}};
          std::printf("| %s | %s / %s | %sx | %sx | %sx | %sx | %sx |\n", rate.c_str(),
                      targets[0].name.c_str(), targets[j].name.c_str(),
                      fmt(get(row, "output_throughput"), 2).c_str(),
                      fmt(get(row, "goodput"), 2).c_str(), fmt(get(row, "ttft_p99"), 2).c_str(),
                      fmt(get(row, "tpot_p50"), 2).c_str(), fmt(get(row, "e2e_p50"), 2).c_str());
          ratios.push_back(row);
        }
      }
      std::printf(
          "\nRatios are first target / other: > 1 is better for throughput and goodput, < 1 for "
          "latencies.\n");
    }
    const double load_end = load_average_1min();
    std::printf("\nload average at the end: %s\n", fmt(load_end, 2).c_str());

    if (!s.json_path.empty()) {
      json out;
      const std::string command = lio::bench::command_line(argc, argv);
      out["provenance"] = {{"command", command},
                           {"commit", lio::bench::git_commit()},
                           {"machine", cpu + ", " + std::to_string(n_cores) + " cores"},
                           {"date", lio::bench::utc_date()}};
      out["settings"] = {{"command", command},
                         {"num_prompts", s.num_prompts},
                         {"input_len", s.shape.input_len},
                         {"output_len", s.shape.output_len},
                         {"range_ratio", s.shape.range_ratio},
                         {"mean_prompt_tokens", static_cast<double>(sum_in) / n_all},
                         {"mean_output_tokens", static_cast<double>(sum_out) / n_all},
                         {"dataset", s.corpus_path},
                         {"tokenizer", lio::bench::local_path_free(tok_path)},
                         {"seed", s.seed},
                         {"request_rates", s.rates},
                         {"max_concurrency", s.max_concurrency},
                         {"slo_ttft_ms", s.slo_ttft_ms},
                         {"slo_tpot_ms", s.slo_tpot_ms}};
      out["machine"] = {{"cpu", cpu},
                        {"cores", n_cores},
                        {"load_average_start", num(load_start)},
                        {"load_average_end", num(load_end)}};
      out["targets"] = target_info;
      out["runs"] = runs;
      out["ratios"] = ratios;
      lio::write_file_atomically(s.json_path, out.dump(1) + "\n");
    }
    return 0;
  });
}
