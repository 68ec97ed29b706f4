// trace.h — chapter 05's request trace and the statistics its benchmark reports.
//
// A trace is a list of requests with a prompt, an output length and an arrival time. Lengths
// are log-uniform (most requests short, a long tail: what makes static batching wait on its
// longest member); arrivals are a Poisson process (exponential gaps), the usual serving-benchmark
// load (vLLM's benchmark_serving.py --request-rate; Kwon et al. 2023, sec. 6.1). The same
// unit-rate gaps are divided by each rate, so every rate replays the same requests in the same
// order, only compressed in time.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace lio::bench {

/// One request of a trace.
struct TraceRequest {
  std::vector<int32_t> prompt;  ///< (n_prompt,) token ids in [first_token_id, vocab_size)
  int64_t output_tokens = 0;    ///< max_tokens (generated exactly: greedy, EOS ignored)
  double unit_gap = 0;          ///< gap before it at 1 request/s (exponential, mean 1 s)
};

/// Length ranges of a trace (tokens, inclusive, before scale).
struct TraceShape {
  int64_t min_prompt = 16, max_prompt = 512;  ///< prompt tokens
  int64_t min_output = 20, max_output = 500;  ///< generated tokens
  double scale = 1.0;                         ///< multiplies every length (>= 1 token after)
  int32_t first_token_id = 100;               ///< prompt ids are drawn from [first, vocab)
};

/// Draws `n_requests` requests with `seed`. Lengths: exp(U(ln min, ln max)) rounded, times
/// shape.scale, at least 1. Precondition: 1 <= min <= max, vocab_size > first_token_id.
inline std::vector<TraceRequest> make_trace(int64_t n_requests, const TraceShape& shape,
                                            int64_t vocab_size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uniform_int_distribution<int32_t> token(shape.first_token_id,
                                               static_cast<int32_t>(vocab_size - 1));
  std::exponential_distribution<double> gap(1.0);
  auto log_uniform = [&](int64_t lo, int64_t hi) {
    const double x = std::exp(
        std::log(static_cast<double>(lo)) +
        unit(rng) * (std::log(static_cast<double>(hi)) - std::log(static_cast<double>(lo))));
    return std::max<int64_t>(1, std::llround(std::round(x) * shape.scale));
  };
  std::vector<TraceRequest> trace(static_cast<size_t>(n_requests));
  for (TraceRequest& r : trace) {
    r.prompt.resize(static_cast<size_t>(log_uniform(shape.min_prompt, shape.max_prompt)));
    for (int32_t& t : r.prompt) t = token(rng);
    r.output_tokens = log_uniform(shape.min_output, shape.max_output);
    r.unit_gap = gap(rng);
  }
  return trace;
}

/// Arrival times (s since the start) of `trace` at `rate_per_s` requests/s: cumulative gaps /
/// rate, the first request at 0. A rate of +inf puts every request at 0 (an offline batch).
inline std::vector<double> arrival_times_s(const std::vector<TraceRequest>& trace,
                                           double rate_per_s) {
  std::vector<double> t(trace.size(), 0.0);
  if (std::isinf(rate_per_s)) return t;
  for (size_t i = 1; i < trace.size(); ++i) t[i] = t[i - 1] + trace[i].unit_gap / rate_per_s;
  return t;
}

/// The q-th percentile (q in [0, 100]) of `values` with linear interpolation between closest
/// ranks (numpy's default). Returns NaN for an empty input (printed as "-").
inline double percentile(std::vector<double> values, double q) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double pos = q / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (pos - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

}  // namespace lio::bench
