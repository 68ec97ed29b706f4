// Chapter 05, Task 3: choosing the preemption victim and requeueing it
// (exercises/05_continuous_batching/scheduler_policy.cpp, choose_victim, requeue_for_recompute).
#include <gtest/gtest.h>

#include <chrono>

#include "fixture.h"
#include "lio/scheduler_policy.h"

namespace {
using namespace lio;

TEST(Ch05Task3, TheLatestArrivalIsTheVictim) {
  grade::TinyModel tiny;
  std::vector<std::unique_ptr<Sequence>> s;
  for (int i = 0; i < 4; ++i) s.push_back(std::make_unique<Sequence>(i, grade::prompt_of(i, 4), grade::exactly(2), *tiny.model().tokenizer));
  const auto t0 = s[0]->arrival_time;
  s[0]->arrival_time = t0 + std::chrono::milliseconds(30);  // arrived last
  s[1]->arrival_time = t0;
  s[2]->arrival_time = t0 + std::chrono::milliseconds(10);
  s[3]->arrival_time = t0 + std::chrono::milliseconds(30);  // same time as 0, larger id
  std::vector<Sequence*> c = {s[0].get(), s[1].get(), s[2].get(), s[3].get()};
  EXPECT_EQ(choose_victim(c), s[3].get());
  c = {s[0].get(), s[1].get(), s[2].get()};
  EXPECT_EQ(choose_victim(c), s[0].get());
  c = {s[1].get()};
  EXPECT_EQ(choose_victim(c), s[1].get());
  EXPECT_EQ(choose_victim({}), nullptr);
}

TEST(Ch05Task3, ARecomputedVictimGoesToTheFrontWithNothingComputed) {
  grade::TinyModel tiny;
  Sequence victim(5, grade::prompt_of(5, 12), grade::exactly(4), *tiny.model().tokenizer);
  Sequence other(6, grade::prompt_of(6, 12), grade::exactly(4), *tiny.model().tokenizer);
  victim.num_computed_tokens = 12;
  victim.status = SequenceStatus::Running;
  victim.append_token(9, 256);
  std::deque<Sequence*> waiting = {&other};
  requeue_for_recompute(victim, waiting);
  EXPECT_EQ(victim.num_computed_tokens, 0);
  EXPECT_EQ(victim.n_tokens(), 13) << "its prompt and generated tokens stay";
  EXPECT_EQ(victim.status, SequenceStatus::Waiting);
  EXPECT_EQ(victim.n_preemptions, 1);
  ASSERT_EQ(waiting.size(), 2u);
  EXPECT_EQ(waiting.front(), &victim);
}

TEST(Ch05Task3, APreemptedRequestGivesTheTokensOfAnUnpreemptedRun) {
  grade::TinyModel tiny;
  std::vector<std::pair<std::vector<int32_t>, SamplingParams>> reqs;
  for (int i = 0; i < 6; ++i) reqs.push_back({grade::prompt_of(i, 10 + 3 * i), grade::exactly(24)});
  EngineConfig cfg;
  cfg.scheduler.max_num_seqs = 6;
  auto big = tiny.runner(8, 128);
  const grade::EngineRun want = grade::run_engine(*big, *tiny.model().tokenizer, cfg, reqs);
  EXPECT_EQ(want.stats.n_preemptions, 0);
  auto small = tiny.runner(8, 16);  // 128 slots for six sequences growing to 34 .. 49 tokens
  const grade::EngineRun got = grade::run_engine(*small, *tiny.model().tokenizer, cfg, reqs);
  EXPECT_GT(got.stats.n_preemptions, 0) << "the pool was meant to run out";
  EXPECT_EQ(got.tokens, want.tokens);
}

}  // namespace
