// request_metrics.h — one request's serving latencies from its token timestamps, and goodput,
// as vLLM's benchmark defines them.
//
// Source: vLLM benchmarks/backend_request_func.py (the client: TTFT, ITL, latency per request)
// and benchmarks/benchmark_serving.py, calculate_metrics (TPOT, and goodput under `--goodput
// ttft:MS tpot:MS`); goodput itself: Zhong et al. 2024, DistServe (OSDI), sec. 2. All times and
// durations here are seconds; the callers convert to the ms their tables and flags use.
// Used by lio-server's metrics (metrics.cpp: the ITL histogram and the goodput counter) and by
// the serving benchmark's client (bench/serve).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace lio::server {

/// One request's latencies, seconds.
struct RequestLatency {
  double ttft_s = 0;  ///< time to first token: first token's time - arrival
  double e2e_s = 0;   ///< end-to-end latency: last token's time - arrival
  /// Time per output token after the first: (e2e - ttft) / (output tokens - 1). Empty for a
  /// request with fewer than 2 output tokens (vLLM leaves it out of the TPOT statistics and
  /// counts it as 0 against a TPOT objective).
  std::optional<double> tpot_s;
  /// Inter-token latencies: the gaps between consecutive token timestamps, (n_times - 1).
  std::vector<double> itl_s;
};

/// Service-level objectives for goodput, seconds; <= 0 = no constraint on that metric.
struct SloTargets {
  double ttft_s = 0;  ///< a good request's TTFT is at most this
  double tpot_s = 0;  ///< a good request's TPOT is at most this
};

// ---- Chapter 09, Task 2 (solutions/09_server/request_metrics.cpp) ---------------------------
// Lesson: docs/09_server.md, "Task 2".

/// The latencies of one request that arrived at `arrival_s` and whose tokens (or streamed
/// chunks with text) were seen at `token_times_s` (n_times >= 1 timestamps on the same clock,
/// seconds, non-decreasing, none before the arrival), having produced `n_output_tokens` tokens
/// (>= 0; may differ from n_times: a chunk can hold several tokens, and an end-of-sequence
/// token is timed but not counted). Throws InvalidArgument, naming the argument and its value,
/// for an empty or decreasing token_times_s, a time before arrival_s, a time or arrival that is
/// not finite, or n_output_tokens < 0.
RequestLatency request_latency(double arrival_s, std::span<const double> token_times_s,
                               int64_t n_output_tokens);

/// Whether `r` met `slo`: TTFT <= slo.ttft_s and TPOT <= slo.tpot_s, each only when that
/// objective is > 0; a request without a TPOT (one output token) meets any TPOT objective.
bool meets_slo(const RequestLatency& r, const SloTargets& slo);

/// Goodput, requests per second: how many of `completed` (the requests that finished
/// successfully in a run) met `slo`, over the run's `duration_s` (> 0, else InvalidArgument).
double goodput(std::span<const RequestLatency> completed, const SloTargets& slo, double duration_s);

}  // namespace lio::server
