// Chapter 09, Task 2: TTFT, TPOT, ITL, E2E from token timestamps and goodput, as vLLM's
// benchmark_serving.py defines them (exercises/09_server/request_metrics.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "lio/error.h"
#include "metrics.h"
#include "request_metrics.h"

namespace {
using namespace lio::server;
constexpr double kTol = 1e-12;

TEST(Ch09Task2, WorkedExampleFromTheLesson) {
  // Arrives at 10.0 s; four tokens at 10.5, 10.55, 10.6 and 10.8 s.
  const std::vector<double> times = {10.5, 10.55, 10.6, 10.8};
  const RequestLatency r = request_latency(10.0, times, 4);
  EXPECT_NEAR(r.ttft_s, 0.5, kTol);
  EXPECT_NEAR(r.e2e_s, 0.8, kTol);
  ASSERT_TRUE(r.tpot_s.has_value());
  EXPECT_NEAR(*r.tpot_s, 0.1, kTol) << "(0.8 - 0.5) / (4 - 1)";
  ASSERT_EQ(r.itl_s.size(), 3u);
  EXPECT_NEAR(r.itl_s[0], 0.05, kTol);
  EXPECT_NEAR(r.itl_s[1], 0.05, kTol);
  EXPECT_NEAR(r.itl_s[2], 0.2, kTol);
}

TEST(Ch09Task2, ChunksOfSeveralTokensSpreadTpotOverTokens) {
  // Two chunks carried 7 tokens: one ITL (per chunk, as vLLM's client records it) but TPOT
  // divides the decode time by the 6 tokens after the first.
  const std::vector<double> times = {1.2, 1.5};
  const RequestLatency r = request_latency(1.0, times, 7);
  EXPECT_NEAR(r.ttft_s, 0.2, kTol);
  EXPECT_NEAR(r.e2e_s, 0.5, kTol);
  ASSERT_TRUE(r.tpot_s.has_value());
  EXPECT_NEAR(*r.tpot_s, 0.05, kTol);
  ASSERT_EQ(r.itl_s.size(), 1u);
  EXPECT_NEAR(r.itl_s[0], 0.3, kTol);
}

TEST(Ch09Task2, OneTokenHasNoTpot) {
  const std::vector<double> one = {2.0};
  const RequestLatency r = request_latency(1.5, one, 1);
  EXPECT_NEAR(r.ttft_s, 0.5, kTol);
  EXPECT_NEAR(r.e2e_s, 0.5, kTol);
  EXPECT_FALSE(r.tpot_s.has_value()) << "TPOT is undefined for a single output token";
  EXPECT_TRUE(r.itl_s.empty());
  // An immediate end of sequence: a token was sampled (and timed) but none was kept.
  const std::vector<double> eos = {3.0, 3.25};
  const RequestLatency e = request_latency(2.0, eos, 0);
  EXPECT_FALSE(e.tpot_s.has_value());
  EXPECT_NEAR(e.e2e_s, 1.25, kTol);
  ASSERT_EQ(e.itl_s.size(), 1u);
}

TEST(Ch09Task2, ItlSumsToDecodeTimeOnRandomTraces) {
  double t = 100.0;
  for (int n = 1; n <= 40; ++n) {
    std::vector<double> times;
    const double arrival = t;
    for (int i = 0; i < n; ++i)
      times.push_back(t += 0.001 * ((i * 7 + n) % 13 + (i == 0 ? 50 : 0)));
    const RequestLatency r = request_latency(arrival, times, n);
    double sum = 0;
    for (const double g : r.itl_s) {
      EXPECT_GE(g, 0.0);
      sum += g;
    }
    ASSERT_EQ(r.itl_s.size(), static_cast<size_t>(n - 1));
    EXPECT_NEAR(sum, r.e2e_s - r.ttft_s, 1e-9);
    EXPECT_NEAR(r.ttft_s, times.front() - arrival, 1e-9);
    if (n > 1) {
      EXPECT_NEAR(*r.tpot_s, sum / (n - 1), 1e-9) << "one token per timestamp: TPOT = mean ITL";
    }
  }
}

TEST(Ch09Task2, BadTimestampsThrow) {
  const std::vector<double> none;
  const std::vector<double> backwards = {1.0, 0.9};
  const std::vector<double> early = {0.5};
  const std::vector<double> nan = {1.0, std::nan("")};
  const std::vector<double> ok = {1.0};
  EXPECT_THROW(request_latency(0.0, none, 0), lio::InvalidArgument);
  EXPECT_THROW(request_latency(0.0, backwards, 2), lio::InvalidArgument);
  EXPECT_THROW(request_latency(1.0, early, 1), lio::InvalidArgument)
      << "a token before its arrival";
  EXPECT_THROW(request_latency(0.0, nan, 2), lio::InvalidArgument);
  EXPECT_THROW(request_latency(0.0, ok, -1), lio::InvalidArgument);
  EXPECT_THROW(request_latency(std::numeric_limits<double>::infinity(), ok, 1),
               lio::InvalidArgument);
}

TEST(Ch09Task2, SloObjectivesAreInclusiveAndOptional) {
  RequestLatency r;
  r.ttft_s = 0.5;
  r.tpot_s = 0.05;
  EXPECT_TRUE(meets_slo(r, {0.5, 0.05})) << "at the objective is within it";
  EXPECT_FALSE(meets_slo(r, {0.4, 0.05}));
  EXPECT_FALSE(meets_slo(r, {0.5, 0.04}));
  EXPECT_TRUE(meets_slo(r, {0, 0})) << "no objective set";
  EXPECT_TRUE(meets_slo(r, {0, 0.05}));
  EXPECT_FALSE(meets_slo(r, {0.1, 0}));
  r.tpot_s.reset();
  EXPECT_TRUE(meets_slo(r, {0.5, 0.001})) << "one token: vLLM counts TPOT as 0";
}

TEST(Ch09Task2, GoodputIsGoodRequestsPerSecond) {
  // Four finished requests in a 2 s run, SLO TTFT <= 1 s and TPOT <= 0.1 s: the second
  // misses TTFT, the third TPOT; two are good -> 1.0 request/s (throughput is 2.0).
  const std::vector<double> a = {0.2, 0.3, 0.35}, b = {1.5, 1.6}, c = {0.1, 0.9}, d = {0.8};
  const std::vector<RequestLatency> done = {request_latency(0.0, a, 3), request_latency(0.0, b, 2),
                                            request_latency(0.0, c, 2), request_latency(0.0, d, 1)};
  EXPECT_NEAR(goodput(done, {1.0, 0.1}, 2.0), 1.0, kTol);
  EXPECT_NEAR(goodput(done, {0, 0}, 2.0), 2.0, kTol) << "no objectives: goodput = throughput";
  EXPECT_NEAR(goodput(done, {0.15, 0}, 4.0), 0.25, kTol);
  EXPECT_NEAR(goodput({}, {1.0, 0.1}, 2.0), 0.0, kTol);
  EXPECT_THROW(goodput(done, {1.0, 0.1}, 0.0), lio::InvalidArgument);
}

TEST(Ch09Task2, ServerGoodputCounterAndItlHistogramUseIt) {
  // lio-server's /metrics (metrics.cpp): SLOs TTFT <= 100 ms, TPOT <= 50 ms.
  ServerMetrics m({/*ttft_ms=*/100, /*tpot_ms=*/50});
  lio::RequestOutput fast;  // 3 tokens at 80, 110, 140 ms: TTFT 80 ms, TPOT 30 ms
  fast.request_id = 1;
  fast.new_token_ids = {1, 2, 3};
  fast.n_generated_tokens = 3;
  fast.finished = true;
  fast.finish_reason = lio::FinishReason::Length;
  fast.ttft_ms = 80;
  fast.token_times_ms = {80, 110, 140};
  m.on_output(fast);
  lio::RequestOutput slow = fast;  // TTFT 90 ms but TPOT (290 - 90) / 2 = 100 ms
  slow.request_id = 2;
  slow.ttft_ms = 90;
  slow.token_times_ms = {90, 95, 290};
  m.on_output(slow);
  const std::string text = m.render();
  for (const char* line :
       {"\nlio:request_goodput_total 1\n", "\nlio:inter_token_latency_seconds_count 4\n",
        "\nlio:inter_token_latency_seconds_bucket{le=\"0.01\"} 1\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << "no line" << line << "in:\n" << text;
  }
}

}  // namespace
