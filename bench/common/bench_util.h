// bench_util.h — what every LIO benchmark prints: the machine, medians over repeats,
// and a read bandwidth measured in the same run (the roofline for batch-1 decode).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace lio::bench {

/// Median of `values` (copies). Returns 0 for an empty input.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

/// Seconds since an arbitrary epoch (steady clock).
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// "model name" from /proc/cpuinfo, or "unknown".
inline std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown";
}

/// `x` with `digits` decimals, "-" for NaN (a table cell).
inline std::string fmt(double x, int digits = 1) {
  if (std::isnan(x)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

/// The 1-minute load average (/proc/loadavg), or NaN: other work on the machine skews timings.
inline double load_average_1min() {
  std::ifstream in("/proc/loadavg");
  double load = NAN;
  in >> load;
  return in ? load : NAN;
}

/// The text the decode benchmarks tokenize and repeat into prompts of any length.
inline constexpr const char* kPromptText =
    "The quick brown fox jumps over the lazy dog while the engine measures how fast it can read "
    "its weights from memory, one token at a time. ";

/// `base` repeated and cut to exactly n_tokens tokens (a fixed prompt of a chosen length).
/// Returns an empty vector when base is empty.
inline std::vector<int32_t> repeat_to_length(const std::vector<int32_t>& base, int64_t n_tokens) {
  std::vector<int32_t> out;
  if (base.empty()) return out;
  while (static_cast<int64_t>(out.size()) < n_tokens) out.insert(out.end(), base.begin(), base.end());
  out.resize(static_cast<size_t>(n_tokens));
  return out;
}

/// Measures sustained read bandwidth (bytes/s) with all OpenMP threads summing a buffer
/// of `buffer_bytes` (much larger than the last-level cache), median of `repeats` passes.
/// This is the ceiling batch-1 decode can reach: every weight byte is read once per token.
double measure_read_bandwidth(int64_t buffer_bytes, int repeats);

}  // namespace lio::bench
