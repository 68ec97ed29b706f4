// serve_client.h — one streamed OpenAI /v1/completions request, timed token by token, the way
// vLLM's benchmark client (benchmarks/backend_request_func.py) times it; the arithmetic is
// chapter 09's Task 2 (request_latency, chapters/09_server/request_metrics.h):
//   TTFT  send -> first chunk with text
//   ITL   gaps between successive chunks with text (one per token when the server streams
//         token by token; a chunk holding several tokens counts once, as in vLLM)
//   TPOT  (E2E - TTFT) / (output tokens - 1)
//   E2E   send -> the last chunk with text (vLLM's `latency`)
// Output tokens: the server's usage.completion_tokens when it reports one, else the number of
// chunks with text. Works against any OpenAI-compatible server (lio-server, llama-server, vLLM).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "request_metrics.h"

namespace lio::bench {

/// A server under test: a name for the tables, its base URL (http://host:port), the model name
/// to send, and an API key (empty: none).
struct ServeTarget {
  std::string name;
  std::string url;
  std::string model;
  std::string api_key;
};

/// What one request measured. Times in ms; NaN where not reached.
struct RequestOutcome {
  bool ok = false;    ///< HTTP 200, [DONE] seen, a finish_reason, no error event
  std::string error;  ///< why not ok (status and body, or the transport error)
  int http_status = 0;
  int64_t output_tokens = 0;  ///< see the header comment
  bool usage_reported = false;
  int64_t usage_prompt_tokens = -1;  ///< the server's usage.prompt_tokens (-1: not reported)
  std::string finish_reason;
  double start_s = 0;  ///< send time, seconds since the run started
  double ttft_ms = 0;
  double e2e_ms = 0;
  double tpot_ms = 0;          ///< 0 when there was a single output token
  std::vector<double> itl_ms;  ///< (chunks with text - 1) gaps
  /// The same latencies in seconds, as goodput reads them (set when any chunk had text).
  lio::server::RequestLatency latency;
};

/// Sends `prompt` to target's /v1/completions with stream, ignore_eos, max_tokens and
/// temperature 0, reads the SSE stream to its end and times it. run_t0_s: the run's start
/// (steady clock seconds, lio::bench::now_s()). Never throws for server or transport errors:
/// they come back in RequestOutcome::error.
RequestOutcome stream_completion(const ServeTarget& target, const std::string& prompt,
                                 int64_t max_tokens, double timeout_s, double run_t0_s);

/// GET target.url + path; returns the body, or "" on any error.
std::string http_get(const ServeTarget& target, const std::string& path, double timeout_s = 5);

}  // namespace lio::bench
