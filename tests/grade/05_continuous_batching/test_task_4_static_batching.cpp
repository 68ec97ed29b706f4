// Chapter 05, Task 4: the static-batching admission rule
// (exercises/05_continuous_batching/scheduler_policy.cpp, static_may_admit).
#include <gtest/gtest.h>

#include <algorithm>

#include "fixture.h"
#include "lio/scheduler_policy.h"

namespace {
using namespace lio;

TEST(Ch05Task4, OnlyBetweenBatchesAndUpToTheBatchSize) {
  EXPECT_TRUE(static_may_admit(0, 0, 3));
  EXPECT_TRUE(static_may_admit(0, 2, 3));
  EXPECT_FALSE(static_may_admit(0, 3, 3)) << "the batch is full";
  EXPECT_FALSE(static_may_admit(1, 0, 3)) << "a batch is still running";
}

TEST(Ch05Task4, NoRequestJoinsARunningBatch) {
  // Batch size 2: requests 0 and 1 (4 and 30 tokens) run together; 2 and 3 may start only
  // when BOTH have finished, although a seat frees up after 4 steps (continuous batching
  // would take request 2 then).
  grade::TinyModel tiny;
  std::vector<std::pair<std::vector<int32_t>, SamplingParams>> reqs = {
      {grade::prompt_of(0, 6), grade::exactly(4)},
      {grade::prompt_of(1, 6), grade::exactly(30)},
      {grade::prompt_of(2, 6), grade::exactly(5)},
      {grade::prompt_of(3, 6), grade::exactly(5)}};
  EngineConfig cfg;
  cfg.scheduler.max_num_seqs = 2;
  cfg.scheduler.policy = SchedulingPolicy::Static;
  auto r = tiny.runner(16, 32);
  const grade::EngineRun st = grade::run_engine(*r, *tiny.model().tokenizer, cfg, reqs);
  const int64_t batch1_end = std::max(st.last_step.at(0), st.last_step.at(1));
  EXPECT_GT(st.first_step.at(2), batch1_end);
  EXPECT_GT(st.first_step.at(3), batch1_end);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(st.tokens.at(i).size(), static_cast<size_t>(reqs[i].second.max_tokens));
  // The same requests, continuous: request 2 starts while request 1 still runs.
  cfg.scheduler.policy = SchedulingPolicy::Continuous;
  auto r2 = tiny.runner(16, 32);
  const grade::EngineRun ct = grade::run_engine(*r2, *tiny.model().tokenizer, cfg, reqs);
  EXPECT_LT(ct.first_step.at(2), ct.last_step.at(1));
  EXPECT_EQ(ct.tokens, st.tokens) << "greedy tokens do not depend on the schedule";
}

}  // namespace
