// Chapter 09, Task 2 — reference: TTFT, TPOT, ITL and E2E of one request from its token
// timestamps, and goodput over a run, as vLLM's benchmark_serving.py computes them.
// Declarations and contracts: chapters/09_server/request_metrics.h.
// Lesson: docs/09_server.md, "Task 2".
#include "request_metrics.h"

#include <cmath>
#include <string>

#include "lio/error.h"

namespace lio::server {

RequestLatency request_latency(double arrival_s, std::span<const double> token_times_s,
                               int64_t n_output_tokens) {
  if (!std::isfinite(arrival_s))
    throw InvalidArgument("request_latency: arrival_s must be finite, got " +
                          std::to_string(arrival_s));
  if (token_times_s.empty()) throw InvalidArgument("request_latency: token_times_s is empty");
  if (n_output_tokens < 0)
    throw InvalidArgument("request_latency: n_output_tokens must be >= 0, got " +
                          std::to_string(n_output_tokens));
  double previous = arrival_s;
  for (size_t i = 0; i < token_times_s.size(); ++i) {
    const double t = token_times_s[i];
    if (!std::isfinite(t) || t < previous) {
      throw InvalidArgument("request_latency: token_times_s[" + std::to_string(i) +
                            "] = " + std::to_string(t) + " is not finite or comes before " +
                            (i == 0 ? "arrival_s = " : "the previous time, ") +
                            std::to_string(previous));
    }
    previous = t;
  }
  RequestLatency r;
  r.ttft_s = token_times_s.front() - arrival_s;
  r.e2e_s = token_times_s.back() - arrival_s;
  if (n_output_tokens > 1)
    r.tpot_s = (r.e2e_s - r.ttft_s) / static_cast<double>(n_output_tokens - 1);
  r.itl_s.reserve(token_times_s.size() - 1);
  for (size_t i = 1; i < token_times_s.size(); ++i)
    r.itl_s.push_back(token_times_s[i] - token_times_s[i - 1]);
  return r;
}

bool meets_slo(const RequestLatency& r, const SloTargets& slo) {
  const bool ttft_ok = slo.ttft_s <= 0 || r.ttft_s <= slo.ttft_s;
  const bool tpot_ok = slo.tpot_s <= 0 || !r.tpot_s || *r.tpot_s <= slo.tpot_s;
  return ttft_ok && tpot_ok;
}

double goodput(std::span<const RequestLatency> completed, const SloTargets& slo,
               double duration_s) {
  if (!(duration_s > 0) || !std::isfinite(duration_s))
    throw InvalidArgument("goodput: duration_s must be > 0 and finite, got " +
                          std::to_string(duration_s));
  int64_t good = 0;
  for (const RequestLatency& r : completed) good += meets_slo(r, slo) ? 1 : 0;
  return static_cast<double>(good) / duration_s;
}

}  // namespace lio::server
