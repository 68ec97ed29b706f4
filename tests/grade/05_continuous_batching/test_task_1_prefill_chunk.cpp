// Chapter 05, Task 1: how many tokens a sequence runs this step
// (exercises/05_continuous_batching/scheduler_policy.cpp, prefill_chunk).
#include <gtest/gtest.h>

#include "fixture.h"
#include "lio/scheduler_policy.h"

namespace {
using namespace lio;

TEST(Ch05Task1, ChunkedPrefillSplitsALongPromptAtTheBudget) {
  EXPECT_EQ(prefill_chunk(1000, 512, true), 512);
  EXPECT_EQ(prefill_chunk(300, 512, true), 300);
  EXPECT_EQ(prefill_chunk(1, 40, true), 1);  // a decode step
  EXPECT_EQ(prefill_chunk(10, 0, true), 0);  // no budget left
  EXPECT_EQ(prefill_chunk(0, 10, true), 0);  // nothing to run
}

TEST(Ch05Task1, WithoutChunkingAPromptRunsWholeOrWaits) {
  EXPECT_EQ(prefill_chunk(1000, 512, false), 0);
  EXPECT_EQ(prefill_chunk(512, 512, false), 512);
  EXPECT_EQ(prefill_chunk(1, 3, false), 1);
  EXPECT_EQ(prefill_chunk(4, -1, false), 0);
}

TEST(Ch05Task1, TheSchedulerNeverExceedsTheTokenBudgetAndEveryRequestFinishes) {
  grade::TinyModel tiny;
  for (const bool chunked : {true, false}) {
    BlockManager blocks(64, 16);
    SchedulerConfig cfg;
    cfg.max_num_batched_tokens = 48;
    cfg.max_num_seqs = 6;
    cfg.enable_chunked_prefill = chunked;
    Scheduler sched(cfg, blocks);
    std::vector<std::unique_ptr<Sequence>> seqs;
    for (int i = 0; i < 10; ++i)  // prompts of 5 .. 41 tokens, 3 .. 21 output tokens
      seqs.push_back(std::make_unique<Sequence>(i, grade::prompt_of(i, 5 + 4 * i), grade::exactly(3 + 2 * i),
                                                *tiny.model().tokenizer));
    const grade::SimStats st = grade::simulate(sched, seqs);
    EXPECT_LE(st.max_tokens_in_step, 48) << "chunked " << chunked;
    EXPECT_EQ(st.finish_step.size(), 10u) << "chunked " << chunked << ": not every request finished";
    for (const auto& s : seqs) EXPECT_EQ(s->n_generated(), 3 + 2 * s->id());
    EXPECT_EQ(blocks.n_free_blocks(), 64);
  }
}

}  // namespace
