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
  const grade::PoolRuns r = grade::run_in_large_and_small_pool(tiny, EngineConfig{});
  EXPECT_GT(r.small_pool.stats.n_preemptions, 0) << "the pool was meant to run out";
  EXPECT_EQ(r.small_pool.tokens, r.unconstrained.tokens);
}

}  // namespace
