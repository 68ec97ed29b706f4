// bench_paged_memory — chapter 04's memory benchmark: how much of a KV budget holds token
// states under a static reservation vs the paged pool, and how many sequences then run at once.
//
// A trace of requests (fixed seed; prompt and output lengths drawn from lognormal spreads whose
// means are the ShareGPT and Alpaca figures of Kwon et al. 2023, Fig. 11: ShareGPT 161.31 input
// / 337.99 output tokens, Alpaca 19.31 / 58.45) is served by an iteration-level simulation with
// no model: each step every running request grows by one token, finished requests leave, and
// waiting requests are admitted FCFS while the budget allows. Schemes (Kwon et al. 2023, sec. 3
// and Fig. 2):
//   static max     each request reserves max_len slots at admission (Orca (Max))
//   static pow2    reserves its final length rounded up to a power of two (Orca (Pow2))
//   static oracle  reserves exactly its final length, known in advance (Orca (Oracle))
//   paged bs=N     the engine's BlockManager hands out blocks of N slots as tokens arrive
//                  (append_slots); when none is free the newest request is preempted
// Per step: token states = sum of the running requests' lengths; reserved = slots held.
// Reported, summed over the steps: token states as % of reserved (the paper's Fig. 2 measure),
// waste as % of the token states ((reserved - used) / used, the measure of the issue's "under 4%
// at block 16"), and the mean and peak number of running requests (the batch the budget allows).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "lio/atomic_file.h"
#include "lio/block_manager.h"
#include "lio/error.h"

namespace {

using json = nlohmann::ordered_json;

/// One request of the trace: prompt tokens and output tokens.
struct Request {
  int64_t prompt = 0, output = 0;
  int64_t final_len() const { return prompt + output; }
};

/// `n` requests with lognormal prompt/output lengths of the given means (sigma 0.8), each
/// clipped to >= 1 and prompt + output <= max_len.
std::vector<Request> make_trace(int64_t n, double mean_prompt, double mean_output, int64_t max_len, uint32_t seed) {
  std::mt19937_64 rng(seed);
  constexpr double kSigma = 0.8;  // a lognormal's mean is exp(mu + sigma^2 / 2)
  std::lognormal_distribution<double> p(std::log(mean_prompt) - kSigma * kSigma / 2, kSigma);
  std::lognormal_distribution<double> o(std::log(mean_output) - kSigma * kSigma / 2, kSigma);
  std::vector<Request> t(static_cast<size_t>(n));
  for (Request& r : t) {
    r.prompt = std::clamp<int64_t>(std::llround(p(rng)), 1, max_len - 1);
    r.output = std::clamp<int64_t>(std::llround(o(rng)), 1, max_len - r.prompt);
  }
  return t;
}

/// Averages over the simulated steps.
struct SimResult {
  std::string scheme;
  double mean_running = 0, peak_running = 0;
  double util_pct = 0;        ///< token states / reserved, %
  double waste_of_used = 0;   ///< (reserved - used) / used, %
  int64_t steps = 0, preemptions = 0;
};

/// Static reservation: `reserve(r)` slots held from admission to finish.
template <typename Reserve>
SimResult simulate_static(const std::string& name, const std::vector<Request>& trace, int64_t budget, Reserve reserve) {
  struct Running {
    Request r;
    int64_t len, reserved;
  };
  std::deque<Request> waiting(trace.begin(), trace.end());
  std::vector<Running> running;
  int64_t held = 0;
  double used_sum = 0, reserved_sum = 0, running_sum = 0;
  SimResult out{name};
  while (!waiting.empty() || !running.empty()) {
    while (!waiting.empty() && held + reserve(waiting.front()) <= budget) {
      const Request r = waiting.front();
      waiting.pop_front();
      running.push_back({r, r.prompt + 1, reserve(r)});  // prefill computes the prompt + 1st token
      held += reserve(r);
    }
    int64_t used = 0;
    for (const Running& s : running) used += s.len;
    used_sum += static_cast<double>(used);
    reserved_sum += static_cast<double>(held);
    running_sum += static_cast<double>(running.size());
    out.peak_running = std::max(out.peak_running, static_cast<double>(running.size()));
    ++out.steps;
    for (Running& s : running) s.len += 1;
    std::erase_if(running, [&](const Running& s) {
      if (s.len <= s.r.final_len()) return false;
      held -= s.reserved;
      return true;
    });
  }
  out.mean_running = running_sum / static_cast<double>(out.steps);
  out.util_pct = 100.0 * used_sum / reserved_sum;
  out.waste_of_used = std::max(0.0, 100.0 * (reserved_sum - used_sum) / used_sum);
  return out;
}

/// The paged pool: the engine's BlockManager with budget / block_size blocks; slots grow with
/// append_slots; when it fails the newest running request is preempted (recompute).
SimResult simulate_paged(const std::vector<Request>& trace, int64_t budget, int64_t block_size) {
  struct Running {
    Request r;
    int64_t len = 0;  // tokens whose K/V the pool holds
    std::vector<int32_t> table;
  };
  lio::BlockManager blocks(budget / block_size, block_size);
  std::deque<Request> waiting(trace.begin(), trace.end());
  std::vector<Running> running;
  std::vector<lio::BlockCopy> copies;  // never used: nothing is shared here
  double used_sum = 0, reserved_sum = 0, running_sum = 0;
  SimResult out{"paged bs=" + std::to_string(block_size)};
  while (!waiting.empty() || !running.empty()) {
    // Grow every running request by one token, oldest first; preempt the newest on shortage.
    for (size_t i = 0; i < running.size(); ++i) {
      while (!blocks.append_slots(running[i].table, running[i].len, 1, copies)) {
        if (running.size() - 1 == i) break;
        blocks.free(running.back().table);
        waiting.push_front(running.back().r);
        running.pop_back();
        ++out.preemptions;
      }
      running[i].len += 1;
    }
    while (!waiting.empty()) {  // admit while the prompt + first token fit
      Running s{waiting.front()};
      if (!blocks.append_slots(s.table, 0, s.r.prompt + 1, copies)) break;
      s.len = s.r.prompt + 1;
      waiting.pop_front();
      running.push_back(std::move(s));
    }
    int64_t used = 0;
    for (const Running& s : running) used += s.len;
    used_sum += static_cast<double>(used);
    reserved_sum += static_cast<double>(blocks.n_used_blocks() * block_size);
    running_sum += static_cast<double>(running.size());
    out.peak_running = std::max(out.peak_running, static_cast<double>(running.size()));
    ++out.steps;
    std::erase_if(running, [&](Running& s) {
      if (s.len < s.r.final_len()) return false;
      blocks.free(s.table);
      return true;
    });
  }
  out.mean_running = running_sum / static_cast<double>(out.steps);
  out.util_pct = 100.0 * used_sum / reserved_sum;
  out.waste_of_used = std::max(0.0, 100.0 * (reserved_sum - used_sum) / used_sum);
  return out;
}

/// Smallest power of two >= n.
int64_t next_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chapter 04: KV memory of static reservation vs the paged pool (simulation)", "bench_paged_memory"};
  int64_t n_requests = 2000, max_len = 2048, budget_tokens = 23301;
  std::vector<int64_t> block_sizes = {1, 8, 16, 32, 256};
  uint32_t seed = 4;
  std::string json_path;
  app.add_option("--requests", n_requests, "Requests in each trace")->capture_default_str();
  app.add_option("--max-len", max_len, "Longest sequence: the static reservation (OPT's 2048 in the paper)")
      ->capture_default_str();
  app.add_option("--budget-tokens", budget_tokens,
                 "KV budget in token slots (default: 1 GiB of SmolLM2-135M f32 K/V at 46,080 bytes/token)")
      ->capture_default_str();
  app.add_option("--block-sizes", block_sizes, "Paged block sizes")->delimiter(',')->capture_default_str();
  app.add_option("--seed", seed, "Trace seed")->capture_default_str();
  app.add_option("--json", json_path, "Write every number here");
  CLI11_PARSE(app, argc, argv);
  try {
    if (n_requests < 1 || max_len < 2 || budget_tokens < max_len) {
      throw lio::InvalidArgument("need --requests >= 1, --max-len >= 2 and --budget-tokens >= --max-len");
    }
    for (int64_t bs : block_sizes)
      if (bs < 1 || bs > budget_tokens) throw lio::InvalidArgument("--block-sizes must be in [1, budget]");
    std::printf("bench_paged_memory | simulation, no model (host %s) | %lld requests per trace, seed %u | max_len %lld | "
                "KV budget %lld token slots\n\n",
                lio::bench::cpu_name().c_str(), (long long)n_requests, seed, (long long)max_len, (long long)budget_tokens);
    json all = json::object();
    all["provenance"] = {{"command", lio::bench::command_line(argc, argv)},
                         {"commit", lio::bench::git_commit()},
                         {"machine", lio::bench::cpu_name() + " (a simulation: no model, one thread)"},
                         {"date", lio::bench::utc_date()}};
    struct Dataset {
      const char* name;
      double mean_prompt, mean_output;
    };
    for (const Dataset& d : {Dataset{"ShareGPT-like", 161.31, 337.99}, Dataset{"Alpaca-like", 19.31, 58.45}}) {
      const std::vector<Request> trace = make_trace(n_requests, d.mean_prompt, d.mean_output, max_len, seed);
      double mp = 0, mo = 0;
      for (const Request& r : trace) mp += static_cast<double>(r.prompt), mo += static_cast<double>(r.output);
      std::printf("## %s trace: mean prompt %.1f, mean output %.1f tokens\n\n", d.name, mp / n_requests, mo / n_requests);
      std::vector<SimResult> rows;
      rows.push_back(simulate_static("static max", trace, budget_tokens, [&](const Request&) { return max_len; }));
      rows.push_back(simulate_static("static pow2", trace, budget_tokens,
                                     [&](const Request& r) { return std::min(max_len, next_pow2(r.final_len())); }));
      rows.push_back(simulate_static("static oracle", trace, budget_tokens, [](const Request& r) { return r.final_len(); }));
      for (int64_t bs : block_sizes) rows.push_back(simulate_paged(trace, budget_tokens, bs));
      const double base = rows.front().mean_running;
      std::printf("| scheme | token states %% of reserved | waste %% of used | mean running | peak running | batch vs static max | steps | preemptions |\n");
      std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
      json rows_json = json::array();
      for (const SimResult& r : rows) {
        std::printf("| %s | %.1f | %.1f | %.1f | %.0f | %.2fx | %lld | %lld |\n", r.scheme.c_str(), r.util_pct,
                    r.waste_of_used, r.mean_running, r.peak_running, r.mean_running / base, (long long)r.steps,
                    (long long)r.preemptions);
        rows_json.push_back({{"scheme", r.scheme}, {"util_pct", r.util_pct}, {"waste_of_used_pct", r.waste_of_used},
                             {"mean_running", r.mean_running}, {"peak_running", r.peak_running},
                             {"steps", r.steps}, {"preemptions", r.preemptions}});
      }
      std::printf("\n");
      all[d.name] = {{"mean_prompt", mp / n_requests}, {"mean_output", mo / n_requests}, {"rows", rows_json}};
    }
    all["settings"] = {{"requests", n_requests}, {"max_len", max_len}, {"budget_tokens", budget_tokens}, {"seed", seed}};
    if (!json_path.empty()) {
      lio::write_file_atomically(json_path, all.dump(2) + "\n");
    }
  } catch (const lio::Error& e) {
    std::cerr << "bench_paged_memory: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
