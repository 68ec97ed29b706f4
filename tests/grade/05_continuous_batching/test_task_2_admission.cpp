// Chapter 05, Task 2: may a waiting request join the running batch
// (exercises/05_continuous_batching/scheduler_policy.cpp, can_admit).
#include <gtest/gtest.h>

#include "fixture.h"
#include "lio/scheduler_policy.h"

namespace {
using namespace lio;

TEST(Ch05Task2, ASeatTokensAndBlocksAreAllNeeded) {
  EXPECT_TRUE(can_admit({3, 4, 10, 1, 1}));
  EXPECT_FALSE(can_admit({4, 4, 10, 1, 5})) << "no seat";
  EXPECT_FALSE(can_admit({0, 4, 0, 0, 5})) << "no token to run (budget spent or prompt too long)";
  EXPECT_FALSE(can_admit({0, 4, 10, 6, 5})) << "its blocks do not fit";
  EXPECT_TRUE(can_admit({0, 1, 1, 0, 0})) << "a decode row in an owned block needs no new block";
}

TEST(Ch05Task2, TheSchedulerRespectsSeatsAndBlocksAndNobodyStarves) {
  grade::TinyModel tiny;
  BlockManager blocks(12, 8);  // 96 slots for 12 requests of up to 40 tokens: they must take turns
  SchedulerConfig cfg;
  cfg.max_num_seqs = 3;
  cfg.max_num_batched_tokens = 64;
  Scheduler sched(cfg, blocks);
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (int i = 0; i < 12; ++i)
    seqs.push_back(std::make_unique<Sequence>(i, grade::prompt_of(i, 8 + 2 * i), grade::exactly(10),
                                              *tiny.model().tokenizer));
  const grade::SimStats st = grade::simulate(sched, seqs);
  EXPECT_LE(st.max_running, 3);
  EXPECT_EQ(st.finish_step.size(), 12u) << "a request starved";
  // FCFS: nobody overtakes an earlier arrival by more than the batch it could share.
  for (int i = 3; i < 12; ++i) EXPECT_GE(st.first_step.at(i), st.first_step.at(i - 3)) << "request " << i;
  EXPECT_EQ(blocks.n_free_blocks(), 12);
}

}  // namespace
