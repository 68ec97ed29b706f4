// bench_util.h — what every LIO benchmark prints: the machine, medians over repeats,
// and a read bandwidth measured in the same run (the roofline for batch-1 decode).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
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

// ---------------------------------------------------------------------------------------------
// What a results file records (COURSE.md, "Performance method"): the command line, the commit,
// the machine and the date, and no path of the machine it ran on. bench/common/results_meta.py
// is the Python side; `results_meta.py stamp OUT.json --command ...` adds the same record to a
// JSON a program wrote without one.

/// `text` with every `from` replaced by `to`.
inline std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

/// Standard output of a shell command, without its trailing newlines; "" if it cannot run.
inline std::string shell_output(const char* command) {
  std::string out;
  if (FILE* pipe = popen(command, "r")) {
    std::array<char, 256> buf{};
    while (std::fgets(buf.data(), static_cast<int>(buf.size()), pipe) != nullptr) out += buf.data();
    pclose(pipe);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

/// `text` without the machine's own paths: the git checkout's root and the current directory
/// become relative ("models/x.gguf"), $HOME becomes "~", /tmp becomes "TMP".
inline std::string local_path_free(std::string text) {
  std::error_code ec;
  const std::string roots[] = {shell_output("git rev-parse --show-toplevel 2>/dev/null"),
                               std::filesystem::current_path(ec).string()};
  for (const std::string& root : roots) {
    if (root.size() > 1) text = replace_all(text, root + "/", "");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && std::string(home).size() > 1) {
    text = replace_all(text, std::string(home) + "/", "~/");
  }
  return replace_all(text, "/tmp/", "TMP/");
}

/// The program's command line (argv joined by spaces), without local paths.
inline std::string command_line(int argc, char** argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) line += (i ? " " : "") + std::string(argv[i]);
  return local_path_free(line);
}

/// Short hash of the checkout's HEAD, "-dirty" appended when tracked files other than results
/// and rendered prose (bench/results, docs/*.md, README.md: results_meta.py's NOT_CODE) differ
/// from it; "not recorded" outside a git checkout (read with `git` from the current directory).
/// LIO_COMMIT, when set, is taken as it is: binaries run away from their checkout (the GPU
/// check's bundle, whose manifest records the commit it was built from) say where they came from.
inline std::string git_commit() {
  if (const char* env = std::getenv("LIO_COMMIT"); env != nullptr && *env != '\0') return env;
  const std::string head = shell_output("git rev-parse --short HEAD 2>/dev/null");
  if (head.empty()) return "not recorded";
  return shell_output("git status --porcelain --untracked-files=no -- . ':(exclude)bench/results' "
                      "':(exclude)docs/*.md' ':(exclude)README.md' 2>/dev/null")
                 .empty()
             ? head
             : head + "-dirty";
}

/// The current date and time in UTC, "YYYY-MM-DD HH:MM UTC".
inline std::string utc_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

/// The NVIDIA driver version nvidia-smi reports for GPU 0, or "not recorded".
inline std::string gpu_driver() {
  const std::string v = shell_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1");
  return v.empty() ? "not recorded" : v;
}

/// Markdown lines "- Command: ...", "- Commit: ...", "- Date: ..." for a results file (each
/// benchmark prints its own machine line: it knows its device).
inline std::string provenance_markdown(int argc, char** argv) {
  return "- Command: `" + command_line(argc, argv) + "`\n- Commit: " + git_commit() + "\n- Date: " + utc_date() + "\n";
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
/// Each thread reads its share as `streams` concurrent sequential streams (its share cut in
/// `streams` parts read side by side, as a GEMV reads several weight rows at once): one stream
/// per thread leaves the memory system idle between a core's prefetches and understates what a
/// decode step can read (bench/results/read_bandwidth_streams_cpu.md). This is the ceiling
/// batch-1 decode can reach: every weight byte is read once per token. Throws InvalidArgument
/// if streams is outside [1, 16].
double measure_read_bandwidth(int64_t buffer_bytes, int repeats, int streams = 4);

/// The compute twin of measure_read_bandwidth: what the cores multiply per second when nothing
/// waits on memory, with the instructions LIO's CPU kernels use (kernels/cpu/
/// packed_kernels_simd.h), all OpenMP threads, median of `repeats` passes of ~20 ms. Each
/// thread runs 10 independent accumulator chains (enough to hide each instruction's latency)
/// on register operands:
///   f32_gflops: FMA on 8 (AVX2) or 16 (AVX-512) f32 lanes, 2 flops per lane (GFLOP/s);
///   int8_gops: the int8 dot product, 2 ops per u8 x s8 multiply-add (GOP/s): AVX-512 VNNI
///     vpdpbusd (64 per instruction), AVX2 vpmaddubsw + vpmaddwd + vpaddd (32 per three).
/// This is the ceiling batched decode and prefill can reach (Williams, Waterman, Patterson
/// 2009, "Roofline"). `isa` names the instruction set measured, the one the packed kernels run
/// (cpu::default_cpu_isa: "avx512", "avx2", or "scalar": then both are 0, not measured).
struct ComputePeak {
  std::string isa;
  double f32_gflops = 0;
  double int8_gops = 0;
};
ComputePeak measure_compute_peak(int repeats = 5);

}  // namespace lio::bench
