// Chapter 05, Task 1: the scheduling step, with every decision in it
// (exercises/05_continuous_batching/schedule_step.cpp, schedule_step). Every case drives the
// Scheduler or the Engine, which run your schedule_step: step by step on a pool small enough to
// be read by hand (blocks of 4 tokens, arrival times set; fixture.h's Step), then many requests
// through a scheduler-level simulation, then the engine on a tiny random model. The cases go
// in the lesson's order: rows and the token budget (section 4), admission, preemption
// (section 5), static batching (section 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <vector>

#include "fixture.h"

namespace {
using namespace lio;
using grade::limits;
using grade::Rows;
using grade::Step;
using grade::kBlockSize;

// ---- rows: the token budget and chunked prefill (section 4) ---------------------------------

TEST(Ch05Task1, RunningDecodesComeFirstThenNewPromptsInArrivalOrder) {
  Step st(limits(8, 64), 32);
  st.add(0, 5, 10, 0);
  st.add(1, 3, 10, 1);
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 5}, {1, 3}})) << "two prompts, whole, in arrival order";
  st.add(2, 6, 10, 2);
  st.add(3, 2, 10, 3);
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 1}, {1, 1}, {2, 6}, {3, 2}}))
      << "the running sequences decode one token each, then the newcomers join in the same step";
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 1}, {1, 1}, {2, 1}, {3, 1}}));
  EXPECT_EQ(st.sched().n_running(), 4);
}

TEST(Ch05Task1, ALongPromptIsChunkedIntoWhatTheDecodesLeaveOfTheBudget) {
  Step st(limits(4, 8), 64);
  st.add(0, 3, 10, 0);
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 3}}));
  st.add(1, 20, 10, 1);  // 20 prompt tokens, 7 rows of budget a step beside the decode
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 1}, {1, 7}}));
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 1}, {1, 7}}))
      << "a prompt being chunked runs on as a running sequence";
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 1}, {1, 6}})) << "its last chunk: the rest";
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 1}, {1, 1}})) << "both decode";
}

TEST(Ch05Task1, APromptOfExactlyTheBudgetRunsWholeChunkedOrNot) {
  for (const bool chunked : {true, false}) {
    Step st(limits(4, 8, chunked), 64);
    st.add(0, 8, 10, 0);
    EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 8}})) << "chunked " << chunked << ": the whole budget, in one step";
    EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 1}})) << "chunked " << chunked;
  }
}

TEST(Ch05Task1, WithoutChunkingAPromptRunsWholeOrWaitsAndNobodyOvertakesIt) {
  Step st(limits(4, 8, false), 64);
  st.add(0, 3, 10, 0);
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 3}}));
  st.add(1, 8, 10, 1);  // 8 rows: the whole budget, so not beside a decode
  st.add(2, 2, 10, 2);  // would fit, but arrived later
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 1}}))
      << "request 1 waits for a step with 8 rows free, 2 waits behind it";
  EXPECT_EQ(st.sched().n_waiting(), 2);
  st.add(3, 9, 10, 3);  // longer than any step: can never run unchunked
  st.sched().remove(st.sched().queues().waiting.front());  // request 1 gives up (an abort)
  const SchedulerOutput out = st.run();
  EXPECT_EQ(Step::rows(out), (Rows{{0, 1}, {2, 2}}));
  EXPECT_EQ(Step::ids(out.unfittable), (std::vector<int64_t>{3}))
      << "a prompt longer than the budget, unchunked";
}

TEST(Ch05Task1, ManyRequestsStayWithinTheBudgetAndFinishChunkedOrNot) {
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

// ---- admission: a seat, a row and the blocks ------------------------------------------------

TEST(Ch05Task1, AWaitingPromptDoesNotJoinWithoutARowLeftInTheBudget) {
  Step st(limits(4, 8), 64);
  st.add(0, 8, 10, 0);  // spends the whole budget
  st.add(1, 2, 10, 1);
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 8}}));
  EXPECT_EQ(st.sched().n_running(), 1) << "request 1 has no row this step: it does not join";
  EXPECT_EQ(st.sched().n_waiting(), 1);
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 1}, {1, 2}}));
}

TEST(Ch05Task1, AdmissionStopsAtThePromptWhoseBlocksDoNotFit) {
  Step st(limits(8, 64), 4);  // 4 blocks of 4 tokens
  st.add(0, 8, 10, 0);        // 2 blocks
  st.add(1, 12, 10, 1);       // 3 blocks: only 2 left
  st.add(2, 4, 10, 2);        // 1 block would fit, but it must not overtake request 1
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 8}}));
  EXPECT_EQ(st.sched().n_running(), 1);
  EXPECT_EQ(st.sched().n_waiting(), 2);
  EXPECT_EQ(st.blocks().n_free_blocks(), 2) << "a refused prompt holds no block";
}

TEST(Ch05Task1, APromptWhoseBlocksExactlyFillThePoolIsAdmitted) {
  Step st(limits(8, 64), 3);  // 3 blocks of 4 tokens
  st.add(0, 4, 10, 0);         // 1 block
  st.add(1, 8, 10, 1);         // 2 blocks: exactly what is left
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 4}, {1, 8}}));
  EXPECT_EQ(st.blocks().n_free_blocks(), 0);
  EXPECT_EQ(st.sched().n_running(), 2);
}

TEST(Ch05Task1, AdmissionStopsWhenTheSeatsAreTaken) {
  Step st(limits(2, 64), 64);
  for (int i = 0; i < 4; ++i) st.add(i, 3, 10, i);
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 3}, {1, 3}}));
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 1}, {1, 1}})) << "two seats, both taken";
  EXPECT_EQ(st.sched().n_waiting(), 2);
}

TEST(Ch05Task1, ManyRequestsRespectSeatsAndBlocksAndNobodyStarves) {
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

// ---- preemption: the victim, recompute and swap (section 5) ---------------------------------

TEST(Ch05Task1, ThePoolRunningOutPreemptsTheLatestArrivalNotYetScheduled) {
  Step st(limits(8, 64), 5);
  // Admission order 0, 1, 2, 3; arrival order 1, 3, 2, 0. Each prompt fills one block, so
  // each decode needs a second block, and the pool has one to spare.
  st.add(0, 4, 10, 9);
  st.add(1, 4, 10, 0);
  Sequence* s2 = st.add(2, 4, 10, 2);
  Sequence* s3 = st.add(3, 4, 10, 1);
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 4}, {1, 4}, {2, 4}, {3, 4}}));
  const SchedulerOutput out = st.run();
  // 0 takes the spare block. 1 finds none: of 2 and 3 (0 already runs this step, though it
  // arrived last) 2 is the latest arrival and loses its block to 1. 3 then finds none and no
  // one left to preempt but itself.
  EXPECT_EQ(Step::rows(out), (Rows{{0, 1}, {1, 1}}));
  EXPECT_EQ(Step::ids(out.preempted), (std::vector<int64_t>{2, 3}));
  for (const Sequence* s : {s2, s3}) {
    EXPECT_EQ(s->num_computed_tokens, 0) << "recompute: its K/V are gone";
    EXPECT_EQ(s->status, SequenceStatus::Waiting);
    EXPECT_EQ(s->n_preemptions, 1);
    EXPECT_FALSE(s->holds_blocks());
  }
  const std::deque<Sequence*>& waiting = st.sched().queues().waiting;
  ASSERT_EQ(waiting.size(), 2u);
  EXPECT_EQ(waiting[0], s3) << "requeued at the front: 3 arrived before 2";
  EXPECT_EQ(waiting[1], s2);
  EXPECT_EQ(st.sched().n_running(), 2);
}

TEST(Ch05Task1, AnArrivalTieIsBrokenByIdAndRecomputedRequestsWaitAheadOfLaterOnes) {
  Step st(limits(8, 64), 3);  // 3 blocks of 4 tokens, each prompt fills one
  st.add(0, 4, 3, 0);
  Sequence* s2 = st.add(2, 4, 10, 5);  // admitted before 1, arriving at the same time
  Sequence* s1 = st.add(1, 4, 10, 5);
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 4}, {2, 4}, {1, 4}}));
  EXPECT_EQ(st.blocks().n_free_blocks(), 0);
  Sequence* s3 = st.add(3, 4, 10, 10);  // a later arrival, waiting
  // 0's decode needs a block and none is free. 2 and 3 tie on arrival: the larger id, 2,
  // goes first; then 1 finds no block and nobody left to preempt but itself.
  SchedulerOutput out = st.run();
  EXPECT_EQ(Step::rows(out), (Rows{{0, 1}}));
  EXPECT_EQ(Step::ids(out.preempted), (std::vector<int64_t>{2, 1}));
  for (const Sequence* s : {s1, s2}) {
    EXPECT_EQ(s->num_computed_tokens, 0) << "recompute: its K/V are gone";
    EXPECT_EQ(s->n_tokens(), 5) << "its prompt and its generated token stay";
    EXPECT_EQ(s->status, SequenceStatus::Waiting);
    EXPECT_EQ(s->n_preemptions, 1);
  }
  const std::deque<Sequence*>& waiting = st.sched().queues().waiting;
  ASSERT_EQ(waiting.size(), 3u);
  EXPECT_EQ(waiting[0], s1) << "both preempted requests wait ahead of request 3, 1 before 2";
  EXPECT_EQ(waiting[1], s2);
  EXPECT_EQ(waiting[2], s3);
  // 1 needs 2 blocks for its 5 tokens and 1 is free: it waits, and 3, which would fit, waits
  // behind it. 0 finishes in this step and gives back its 2 blocks.
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 1}}));
  EXPECT_EQ(st.sched().n_running(), 0);
  // 1 recomputes its prompt and its generated token as one prefill; 2 does not fit after it.
  EXPECT_EQ(Step::rows(st.run()), (Rows{{1, 5}}));
  EXPECT_EQ(st.sched().n_waiting(), 2);
}

TEST(Ch05Task1, SwappedSequencesComeBackBeforeAnyNewPromptJoins) {
  SchedulerConfig cfg = limits(8, 64);
  cfg.preemption = PreemptionMode::Swap;
  Step st(cfg, 5, 16);
  Sequence* s0 = st.add(0, 4, 3, 0);
  st.add(1, 4, 10, 1);
  Sequence* s2 = st.add(2, 4, 10, 2);
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 4}, {1, 4}, {2, 4}}));
  // Two spare blocks: 0 and 1 take them, 2 finds none and is swapped out.
  SchedulerOutput out = st.run();
  EXPECT_EQ(Step::rows(out), (Rows{{0, 1}, {1, 1}}));
  EXPECT_EQ(Step::ids(out.preempted), (std::vector<int64_t>{2}));
  EXPECT_EQ(out.swap_out.size(), 1u) << "its one computed block goes to host";
  EXPECT_EQ(s2->status, SequenceStatus::Swapped);
  EXPECT_EQ(s2->num_computed_tokens, 4) << "swap keeps its K/V";
  EXPECT_EQ(st.blocks().n_free_blocks(), 1);
  // 2 needs 2 blocks to come back and 1 is free. Request 3 needs only that one, yet it waits:
  // nobody new joins while a preempted sequence is swapped out.
  st.add(3, 2, 10, 3);
  out = st.run();
  EXPECT_EQ(Step::rows(out), (Rows{{0, 1}, {1, 1}}));
  EXPECT_EQ(st.sched().n_swapped(), 1);
  EXPECT_EQ(st.sched().n_waiting(), 1);
  ASSERT_TRUE(s0->finish_reason.has_value()) << "request 0 generated its 3 tokens and left";
  // Its 2 blocks are back: 2 resumes first (its K/V copied in), then 3 takes the last block.
  out = st.run();
  EXPECT_EQ(Step::rows(out), (Rows{{1, 1}, {2, 1}, {3, 2}}));
  EXPECT_EQ(out.swap_in.size(), 1u);
  EXPECT_EQ(s2->status, SequenceStatus::Running);
  EXPECT_EQ(st.sched().n_swapped(), 0);
}

TEST(Ch05Task1, ManyRequestsInASmallPoolAllFinishWithEitherPreemption) {
  grade::TinyModel tiny;
  for (const PreemptionMode mode : {PreemptionMode::Recompute, PreemptionMode::Swap}) {
    BlockManager blocks(10, kBlockSize);  // 40 slots for 4 seats of requests growing to 10 .. 33 tokens
    BlockManager swap(64, kBlockSize);
    SchedulerConfig cfg = limits(4, 16);
    cfg.preemption = mode;
    Scheduler sched(cfg, blocks, nullptr, &swap);
    std::vector<std::unique_ptr<Sequence>> seqs;
    for (int i = 0; i < 10; ++i)
      seqs.push_back(std::make_unique<Sequence>(i, grade::prompt_of(i, 4 + 2 * i),
                                                grade::exactly(6 + i % 4 * 3),
                                                *tiny.model().tokenizer));
    const grade::SimStats st = grade::simulate(sched, seqs);
    const char* name = preemption_mode_name(mode);
    EXPECT_GT(st.preemptions, 0) << name << ": the pool was meant to run out";
    EXPECT_LE(st.max_tokens_in_step, 16) << name;
    EXPECT_LE(st.max_running, 4) << name;
    EXPECT_EQ(st.finish_step.size(), 10u) << name << ": not every request finished";
    for (const auto& s : seqs) EXPECT_EQ(s->n_generated(), 6 + s->id() % 4 * 3) << name;
    EXPECT_EQ(blocks.n_free_blocks(), 10) << name;
    EXPECT_EQ(swap.n_free_blocks(), 64) << name;
  }
}

TEST(Ch05Task1, APreemptedRequestGivesTheTokensOfAnUnpreemptedRun) {
  grade::TinyModel tiny;
  const grade::PoolRuns r = grade::run_in_large_and_small_pool(tiny, EngineConfig{});
  EXPECT_GT(r.small_pool.stats.n_preemptions, 0) << "the pool was meant to run out";
  EXPECT_EQ(r.small_pool.tokens, r.unconstrained.tokens);
}

TEST(Ch05Task1, SwappingGivesTheTokensOfAnUnpreemptedRun) {
  grade::TinyModel tiny;
  EngineConfig cfg;
  cfg.scheduler.preemption = PreemptionMode::Swap;
  cfg.swap_space_mib = 4;
  const grade::PoolRuns r = grade::run_in_large_and_small_pool(tiny, cfg);
  EXPECT_GT(r.small_pool.stats.n_blocks_swapped_out, 0) << "the pool was meant to run out";
  EXPECT_EQ(r.small_pool.stats.n_blocks_swapped_in, r.small_pool.stats.n_blocks_swapped_out)
      << "every swapped block comes back";
  EXPECT_EQ(r.small_pool.tokens, r.unconstrained.tokens);
}

// ---- static batching, the baseline (section 1) ----------------------------------------------

TEST(Ch05Task1, AStaticBatchIsAdmittedTogetherAndNobodyJoinsItLater) {
  SchedulerConfig cfg = limits(2, 8);
  cfg.policy = SchedulingPolicy::Static;
  cfg.static_padding = false;
  Step st(cfg, 64);
  st.add(0, 8, 2, 0);
  st.add(1, 6, 4, 1);
  st.add(2, 2, 2, 2);
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 8}})) << "request 0 spends the budget";
  EXPECT_EQ(st.sched().n_running(), 2) << "request 1 joins its batch with no rows this step";
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 1}, {1, 6}}));  // 0 finishes: a seat is free
  EXPECT_EQ(Step::rows(st.run()), (Rows{{1, 1}})) << "request 2 waits for the whole batch to end";
  EXPECT_EQ(Step::rows(st.run()), (Rows{{1, 1}}));
  EXPECT_EQ(Step::rows(st.run()), (Rows{{1, 1}}));  // 1 finishes
  EXPECT_EQ(Step::rows(st.run()), (Rows{{2, 2}}));
}

TEST(Ch05Task1, InTheEngineNoRequestJoinsARunningStaticBatch) {
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
