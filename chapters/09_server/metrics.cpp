// metrics.cpp — histograms and the Prometheus text (see the header).
#include "metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "lio/error.h"

namespace lio::server {

namespace {

/// A number as Prometheus text shows it (shortest round-trip form, "+Inf" for infinity).
std::string prom_number(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    return std::to_string(static_cast<int64_t>(v));  // counters
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  // Prefer a short form when it reads back exactly (0.1, not 0.10000000000000001).
  for (int precision = 1; precision < 17; ++precision) {
    char shorter[32];
    std::snprintf(shorter, sizeof(shorter), "%.*g", precision, v);
    if (std::strtod(shorter, nullptr) == v) return shorter;
  }
  return buf;
}

void header(std::string& out, const std::string& name, const std::string& help, const char* type) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void scalar(std::string& out, const std::string& name, const std::string& help, const char* type,
            double value) {
  header(out, name, help, type);
  out += name + " " + prom_number(value) + "\n";
}

}  // namespace

// ==== histogram ===============================================================================

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  if (!std::is_sorted(bounds_.begin(), bounds_.end()) ||
      std::adjacent_find(bounds_.begin(), bounds_.end()) != bounds_.end()) {
    throw InvalidArgument("histogram bucket bounds must be strictly ascending");
  }
}

void Histogram::observe(double value) {
  // Bucket i counts bounds_[i-1] < v <= bounds_[i] (Prometheus `le` is inclusive).
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  counts_[static_cast<size_t>(it - bounds_.begin())] += 1;
  count_ += 1;
  sum_ += value;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  header(out, name, help, "histogram");
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + prom_number(bounds_[i]) + "\"} " + std::to_string(cumulative) +
           "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum " + prom_number(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
}

// vLLM v1 (vllm/v1/metrics/loggers.py, PrometheusStatLogger) uses these bounds.
std::vector<double> ttft_buckets_s() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}

std::vector<double> itl_buckets_s() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}

std::vector<double> request_latency_buckets_s() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

// ==== server metrics ==========================================================================

ServerMetrics::ServerMetrics(const SloConfig& slo)
    : slo_(slo),
      ttft_s_(ttft_buckets_s()),
      itl_s_(itl_buckets_s()),
      e2e_s_(request_latency_buckets_s()),
      queue_s_(request_latency_buckets_s()) {}

void ServerMetrics::on_output(const RequestOutput& out) {
  std::lock_guard lock(mutex_);
  const auto n_new = static_cast<int64_t>(out.new_token_ids.size());
  generation_tokens_ += n_new;
  // The sequence's first token: this output brought all its tokens so far, or it ended at
  // once on EOS (no token kept, but a first token was sampled: ttft is known).
  const bool first_token = (n_new > 0 && out.n_generated_tokens == n_new) ||
                           (out.finished && out.n_generated_tokens == 0 && out.ttft_ms > 0);
  if (first_token) {
    ttft_s_.observe(out.ttft_ms / 1e3);
    queue_s_.observe(out.queue_ms / 1e3);
    if (out.sample_index == 0) prompt_tokens_ += out.n_prompt_tokens;
  }
  if (!out.finished) return;
  e2e_s_.observe(out.e2e_ms / 1e3);
  const FinishReason reason = out.finish_reason.value_or(FinishReason::Abort);
  switch (reason) {
    case FinishReason::Stop: finished_stop_ += 1; break;
    case FinishReason::Length: finished_length_ += 1; break;
    case FinishReason::Abort: finished_abort_ += 1; break;
  }
  // TTFT, TPOT and ITL from the token timestamps (chapter 09 Task 2); none before a first token.
  if (out.token_times_ms.empty()) {
    if (reason != FinishReason::Abort) goodput_ += 1;  // no token: no latency missed
    return;
  }
  std::vector<double> times_s;
  times_s.reserve(out.token_times_ms.size());
  for (const double t : out.token_times_ms) times_s.push_back(t / 1e3);
  try {
    const RequestLatency latency = request_latency(0.0, times_s, out.n_generated_tokens);
    for (const double itl : latency.itl_s) itl_s_.observe(itl);
    const bool good = meets_slo(latency, SloTargets{slo_.ttft_ms / 1e3, slo_.tpot_ms / 1e3});
    if (good && reason != FinishReason::Abort) goodput_ += 1;  // aborts never count
  } catch (const std::exception& e) {  // a metric must not take the engine thread down
    std::fprintf(stderr, "lio-server: request metrics failed: %s\n", e.what());
  }
}

void ServerMetrics::set_engine_gauges(const EngineGauges& gauges) {
  std::lock_guard lock(mutex_);
  gauges_ = gauges;
}

EngineGauges ServerMetrics::engine_gauges() const {
  std::lock_guard lock(mutex_);
  return gauges_;
}

void ServerMetrics::on_rejected() {
  std::lock_guard lock(mutex_);
  rejected_ += 1;
}

std::string ServerMetrics::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  scalar(out, "lio:num_requests_running", "Sequences in the running batch.", "gauge",
         static_cast<double>(gauges_.n_running));
  scalar(out, "lio:num_requests_waiting",
         "Sequences waiting to run (new, preempted or swapped out).", "gauge",
         static_cast<double>(gauges_.n_waiting));
  scalar(out, "lio:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0-1; 1 = full).",
         "gauge", gauges_.kv_cache_usage);
  scalar(out, "lio:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
         "counter", static_cast<double>(gauges_.prefix_cache_queries));
  scalar(out, "lio:prefix_cache_hits_total", "Prompt tokens whose K/V came from the prefix cache.",
         "counter", static_cast<double>(gauges_.prefix_cache_hits));
  scalar(out, "lio:num_preemptions_total", "Sequences preempted (KV blocks reclaimed) so far.",
         "counter", static_cast<double>(gauges_.n_preemptions));
  // Speculative decoding (chapter 06), vLLM's counter names under lio:.
  scalar(out, "lio:spec_decode_num_drafts_total", "Verification rounds that carried drafts.",
         "counter", static_cast<double>(gauges_.spec_num_drafts));
  scalar(out, "lio:spec_decode_num_draft_tokens_total", "Draft tokens verified.", "counter",
         static_cast<double>(gauges_.spec_num_draft_tokens));
  scalar(out, "lio:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", "counter",
         static_cast<double>(gauges_.spec_num_accepted_tokens));
  // vLLM's num_accepted_tokens_per_pos: rounds whose draft at depth `position` (0 = the first
  // after the sequence's last token; a Medusa tree's depth, head position + 1) was accepted.
  header(out, "lio:spec_decode_num_accepted_tokens_per_pos_total",
         "Rounds that accepted a draft at this depth (0 = the first draft).", "counter");
  for (size_t i = 0; i < gauges_.spec_accepted_per_position.size(); ++i) {
    out += "lio:spec_decode_num_accepted_tokens_per_pos_total{position=\"" + std::to_string(i) + "\"} " +
           std::to_string(gauges_.spec_accepted_per_position[i]) + "\n";
  }
  // Structured outputs: the grammar's token masks, filled on the engine thread before each pass.
  scalar(out, "lio:structured_output_masks_total",
         "Token masks filled for constrained sequences (one per sampled row, drafts' rows included).", "counter",
         static_cast<double>(gauges_.structured_output_masks));
  scalar(out, "lio:structured_output_mask_seconds_total", "Time spent filling those masks, seconds.", "counter",
         gauges_.structured_output_mask_seconds);
  scalar(out, "lio:prompt_tokens_total", "Prompt tokens of requests that produced a first token.",
         "counter", static_cast<double>(prompt_tokens_));
  scalar(out, "lio:generation_tokens_total", "Tokens generated.", "counter",
         static_cast<double>(generation_tokens_));
  header(out, "lio:request_success_total", "Finished sequences by finish reason.", "counter");
  out += "lio:request_success_total{finished_reason=\"stop\"} " + std::to_string(finished_stop_) +
         "\n";
  out += "lio:request_success_total{finished_reason=\"length\"} " +
         std::to_string(finished_length_) + "\n";
  out += "lio:request_success_total{finished_reason=\"abort\"} " + std::to_string(finished_abort_) +
         "\n";
  scalar(out, "lio:request_goodput_total",
         "Finished sequences that met the SLOs (--slo-ttft-ms " + prom_number(slo_.ttft_ms) +
             ", --slo-tpot-ms " + prom_number(slo_.tpot_ms) + "; 0 = no constraint).",
         "counter", static_cast<double>(goodput_));
  scalar(out, "lio:request_rejected_total", "Requests refused with 503 because the queue was full.",
         "counter", static_cast<double>(rejected_));
  ttft_s_.render(out, "lio:time_to_first_token_seconds", "Time to first token, seconds.");
  itl_s_.render(out, "lio:inter_token_latency_seconds",
                "Time between consecutive generated tokens, seconds.");
  e2e_s_.render(out, "lio:e2e_request_latency_seconds", "Arrival to finish, seconds.");
  queue_s_.render(out, "lio:request_queue_time_seconds",
                  "Arrival to first scheduled step, seconds.");
  return out;
}

}  // namespace lio::server
