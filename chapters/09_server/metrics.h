// metrics.h — the server's Prometheus metrics, named as vLLM names them under a `lio:` prefix.
//
// Names, meanings and histogram buckets follow vLLM's metrics design
// (docs/design/metrics.md, "v1 Metrics") and its Prometheus logger
// (vllm/v1/metrics/loggers.py): TTFT, inter-token latency, end-to-end latency and queue
// time histograms; running / waiting request gauges; KV-cache usage (0-1); prefix-cache
// queries and hits (tokens); prompt and generation token counters; preemptions; finished
// requests by reason. One metric none of the peers exports: goodput, the requests that met
// the service-level objectives given at start-up (DistServe, Zhong et al. 2024, sec. 2).
// Text format: Prometheus exposition format 0.0.4.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "lio/engine.h"
#include "request_metrics.h"

namespace lio::server {

/// A cumulative Prometheus histogram over fixed upper bounds (+Inf implied).
class Histogram {
 public:
  /// `upper_bounds` must be ascending (checked: throws InvalidArgument otherwise).
  explicit Histogram(std::vector<double> upper_bounds);
  /// Counts `value` in every bucket whose bound is >= value.
  void observe(double value);
  /// Appends `# HELP`, `# TYPE name histogram`, the name_bucket{le=...} lines (cumulative,
  /// ending with le="+Inf"), name_sum and name_count.
  void render(std::string& out, const std::string& name, const std::string& help) const;
  /// Observations so far.
  int64_t count() const { return count_; }
  /// Their sum.
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  ///< (bounds + 1) per bucket, not cumulative; the last is +Inf
  int64_t count_ = 0;
  double sum_ = 0;
};

/// vLLM's TTFT buckets, seconds.
std::vector<double> ttft_buckets_s();
/// vLLM's inter-token latency / time-per-output-token buckets, seconds.
std::vector<double> itl_buckets_s();
/// vLLM's request latency buckets (e2e and queue time), seconds.
std::vector<double> request_latency_buckets_s();

/// Service-level objectives for the goodput counter; <= 0 = no constraint.
struct SloConfig {
  double ttft_ms = 0;  ///< a request's time to first token must be <= this
  double tpot_ms = 0;  ///< its mean time per output token after the first must be <= this
};

/// What the engine's thread reads off the engine after each step.
struct EngineGauges {
  int64_t n_running = 0;             ///< sequences in the running batch
  int64_t n_waiting = 0;             ///< sequences waiting (new, preempted or swapped out)
  double kv_cache_usage = 0;         ///< fraction of KV blocks held by live sequences (0-1)
  int64_t prefix_cache_queries = 0;  ///< prompt tokens looked up in the prefix cache
  int64_t prefix_cache_hits = 0;     ///< of those, tokens found
  int64_t n_preemptions = 0;         ///< sequences preempted so far
  int64_t spec_num_drafts = 0;            ///< chapter 06: verification rounds with drafts
  int64_t spec_num_draft_tokens = 0;      ///< chapter 06: drafts verified
  int64_t spec_num_accepted_tokens = 0;   ///< chapter 06: drafts accepted
  /// Chapter 06: rounds that accepted a draft at each depth (EngineStats::spec_accepted_per_position).
  std::vector<int64_t> spec_accepted_per_position;
  /// Structured outputs: token masks filled (EngineStats::n_grammar_masks) and their time, s.
  int64_t structured_output_masks = 0;
  double structured_output_mask_seconds = 0;  ///< see structured_output_masks
};

/// The server's metrics. Thread-safe: the engine thread records, HTTP threads render.
class ServerMetrics {
 public:
  /// `slo` decides what counts as goodput.
  explicit ServerMetrics(const SloConfig& slo = {});

  /// Records one engine output: generated tokens; on a sequence's first token its TTFT and
  /// queue time (and, for sample 0, the prompt's tokens); when it finishes its e2e latency,
  /// finish reason, and from its token timestamps (request_latency, chapter 09 Task 2) its
  /// inter-token latencies and whether it met the SLOs (meets_slo; aborted sequences never
  /// count as goodput).
  void on_output(const RequestOutput& out);
  /// Replaces the engine gauges.
  void set_engine_gauges(const EngineGauges& gauges);
  /// The engine gauges last set.
  EngineGauges engine_gauges() const;
  /// Counts a request refused because the queue was full (lio:request_rejected_total).
  void on_rejected();
  /// Every metric in the Prometheus text format.
  std::string render() const;

 private:
  mutable std::mutex mutex_;
  SloConfig slo_;
  EngineGauges gauges_;
  Histogram ttft_s_, itl_s_, e2e_s_, queue_s_;
  int64_t prompt_tokens_ = 0;
  int64_t generation_tokens_ = 0;
  int64_t finished_stop_ = 0, finished_length_ = 0, finished_abort_ = 0;
  int64_t goodput_ = 0;
  int64_t rejected_ = 0;
};

}  // namespace lio::server
