// Chapter 09, Task 2 — YOUR implementation: TTFT, TPOT, ITL and E2E of one request from its
// token timestamps, and goodput over a run, as vLLM's benchmark defines them.
// Declarations and contracts: chapters/09_server/request_metrics.h.
// Lesson: docs/09_server.md, "Task 2". Grade: ctest -R ch09_task_2, or scripts/grade.sh 09
#include "request_metrics.h"

#include "lio/error.h"

namespace lio::server {

RequestLatency request_latency(double arrival_s, std::span<const double> token_times_s,
                               int64_t n_output_tokens) {
  // TODO(Task 2): one request's latencies, seconds. token_times_s: (n_times) when each token
  //   (or streamed chunk with text) was seen, same clock as arrival_s.
  //   Must hold: ttft_s and e2e_s are measured from the arrival (to the first and to the last
  //   timestamp); itl_s has n_times - 1 entries, each >= 0, summing to e2e_s - ttft_s; tpot_s is
  //   present only for n_output_tokens >= 2 and is the decode time spread over the tokens
  //   after the first (which is not the mean of itl_s when a chunk holds several tokens).
  //   Throw InvalidArgument, naming the argument and its value, as request_metrics.h lists.
  //   Lesson: docs/09_server.md, "Task 2" (vLLM benchmark_serving.py, calculate_metrics).
  (void)arrival_s, (void)token_times_s, (void)n_output_tokens;
  throw NotImplemented(
      "Task 2 (exercises/09_server/request_metrics.cpp): request_latency — "
      "see docs/09_server.md, Task 2");
}

bool meets_slo(const RequestLatency& r, const SloTargets& slo) {
  // TODO(Task 2): whether r met every objective of slo that is > 0 (an objective <= 0 is not
  //   set). A request without a TPOT meets any TPOT objective, as vLLM counts it.
  //   Lesson: docs/09_server.md, "Task 2".
  (void)r, (void)slo;
  throw NotImplemented(
      "Task 2 (exercises/09_server/request_metrics.cpp): meets_slo — "
      "see docs/09_server.md, Task 2");
}

double goodput(std::span<const RequestLatency> completed, const SloTargets& slo,
               double duration_s) {
  // TODO(Task 2): requests per second that met slo, over a run of duration_s seconds.
  //   Throw InvalidArgument, naming duration_s and its value, unless it is > 0 and finite.
  //   Lesson: docs/09_server.md, "Task 2" (DistServe, Zhong et al. 2024, sec. 2).
  (void)completed, (void)slo, (void)duration_s;
  throw NotImplemented(
      "Task 2 (exercises/09_server/request_metrics.cpp): goodput — "
      "see docs/09_server.md, Task 2");
}

}  // namespace lio::server
