// replay.h — chapter 05's trace driver: the engine variants compared, and one real-time replay
// of a trace through a fresh Engine (what bench_continuous_batching measures for each).
//
// One thread drives everything: it adds each request once its arrival time has passed, steps
// the engine while it has work and sleeps until the next arrival when it has none. A request
// that arrives during a step is added after that step (the engine would only see it at the
// next step anyway, as with a second thread feeding its inbox); its latencies are measured from
// its trace arrival time: the engine's (from add_request) plus that lateness.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "lio/engine.h"
#include "lio/error.h"
#include "trace.h"

namespace lio::bench {

/// One engine configuration of the comparison.
struct Variant {
  const char* name;  ///< table and JSON label
  lio::SchedulingPolicy policy;
  bool chunked_prefill;
  lio::PreemptionMode preemption;
  bool small_kv;  ///< runs on the runner whose pool is --small-kv-mib
  bool static_padding = true;  ///< static only: finished rows pad until the batch ends (HF)
};

inline constexpr Variant kVariants[] = {
    {"static", lio::SchedulingPolicy::Static, true, lio::PreemptionMode::Recompute, false, true},
    {"continuous", lio::SchedulingPolicy::Continuous, true, lio::PreemptionMode::Recompute, false},
    {"static_no_padding", lio::SchedulingPolicy::Static, true, lio::PreemptionMode::Recompute, false,
     false},
    {"continuous_no_chunk", lio::SchedulingPolicy::Continuous, false,
     lio::PreemptionMode::Recompute, false},
    {"small_kv_recompute", lio::SchedulingPolicy::Continuous, true, lio::PreemptionMode::Recompute,
     true},
    {"small_kv_swap", lio::SchedulingPolicy::Continuous, true, lio::PreemptionMode::Swap, true},
};

/// What one replay of the trace measured. Latencies in ms, from each request's trace arrival.
struct Run {
  std::vector<double> queue_ms, ttft_ms, tpot_ms, e2e_ms;  ///< one per request (tpot: > 1 token)
  std::vector<double> itl_ms;                              ///< every gap of every request
  int64_t prompt_tokens = 0, output_tokens = 0;            ///< of finished requests
  int64_t incomplete = 0;  ///< requests that ended short of their length (pool too small)
  double wall_s = 0;       ///< first arrival -> last finish
  double busy_s = 0;       ///< inside step()
  double max_late_ms = 0;  ///< most a request was added after its arrival time
  lio::EngineStats stats;
};

/// Replays `trace` with arrival times `arrival_s` (s, ascending) through a fresh Engine on
/// `runner`, in real time, and collects every finished request's timings.
inline Run replay(lio::ModelRunner& runner, const lio::Tokenizer& tok,
                  const lio::EngineConfig& config, const std::vector<TraceRequest>& trace,
                  const std::vector<double>& arrival_s) {
  using Clock = std::chrono::steady_clock;
  lio::Engine e(runner, tok, config);
  Run run;
  const size_t n = trace.size();
  std::vector<double> late_ms(n, 0.0);
  std::map<int64_t, size_t> index_of;  // request id -> trace index
  const Clock::time_point t0 = Clock::now();
  auto since_s = [&]() { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  size_t next = 0, n_done = 0;
  while (n_done < n) {
    while (next < n && arrival_s[next] <= since_s()) {
      lio::SamplingParams p;  // greedy
      p.max_tokens = trace[next].output_tokens;
      p.ignore_eos = true;
      index_of[e.add_request(trace[next].prompt, p)] = next;
      late_ms[next] = 1e3 * (since_s() - arrival_s[next]);
      run.max_late_ms = std::max(run.max_late_ms, late_ms[next]);
      ++next;
    }
    if (!e.has_unfinished()) {  // idle: wait for the next arrival
      LIO_CHECK(next < n,
                "engine idle with " + std::to_string(n - n_done) + " requests unfinished");
      const auto at = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(arrival_s[next]));
      std::this_thread::sleep_until(t0 + at);
      continue;
    }
    const Clock::time_point s0 = Clock::now();
    std::vector<lio::RequestOutput> outs = e.step();
    run.busy_s += std::chrono::duration<double>(Clock::now() - s0).count();
    for (const lio::RequestOutput& o : outs) {
      if (!o.finished) continue;
      const size_t i = index_of.at(o.request_id);
      const double late = late_ms[i];
      ++n_done;
      run.prompt_tokens += o.n_prompt_tokens;
      run.output_tokens += o.n_generated_tokens;
      if (o.n_generated_tokens < trace[i].output_tokens) ++run.incomplete;
      run.queue_ms.push_back(o.queue_ms + late);
      run.e2e_ms.push_back(o.e2e_ms + late);
      if (o.n_generated_tokens >= 1) run.ttft_ms.push_back(o.ttft_ms + late);
      if (o.n_generated_tokens > 1) run.tpot_ms.push_back(o.tpot_ms);
      run.itl_ms.insert(run.itl_ms.end(), o.itl_ms.begin(), o.itl_ms.end());
    }
  }
  run.wall_s = since_s();
  run.stats = e.stats();
  return run;
}

}  // namespace lio::bench
