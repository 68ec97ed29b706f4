// Chapter 05, Task 5: the scheduling step, the loop that asks Tasks 1-4
// (exercises/05_continuous_batching/schedule_step.cpp, schedule_step). Each case drives the
// Scheduler, which runs your schedule_step, on a pool small enough to be read by hand: blocks
// of 4 tokens, sequences whose arrival times are set.
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "fixture.h"
#include "lio/scheduler_policy.h"

namespace {
using namespace lio;
using Rows = std::vector<std::pair<int64_t, int64_t>>;  // (sequence id, rows) in batch order

constexpr int64_t kBlockSize = 4;

/// A pool, an optional swap space, a Scheduler over them, and sequences arriving at set times.
class Step {
 public:
  Step(const SchedulerConfig& cfg, int64_t n_blocks, int64_t n_swap_blocks = 0)
      : blocks_(n_blocks, kBlockSize),
        swap_(n_swap_blocks > 0 ? std::make_unique<BlockManager>(n_swap_blocks, kBlockSize)
                                : nullptr),
        sched_(cfg, blocks_, nullptr, swap_.get()) {}

  /// Adds sequence `id` with a prompt of `prompt_len` tokens, `max_tokens` to generate,
  /// arriving `ms` after time zero.
  Sequence* add(int64_t id, int64_t prompt_len, int64_t max_tokens, int ms) {
    seqs_.push_back(
        std::make_unique<Sequence>(id, grade::prompt_of(static_cast<int>(id), prompt_len),
                                   grade::exactly(max_tokens), *tiny_.model().tokenizer));
    Sequence* s = seqs_.back().get();
    s->arrival_time = Sequence::Clock::time_point{} + std::chrono::milliseconds(ms);
    sched_.add(s);
    return s;
  }

  /// One scheduler step; its rows are "computed" at once: a sequence that reaches its last
  /// token samples one (id 7) and, when done, leaves.
  SchedulerOutput run() {
    SchedulerOutput out = sched_.schedule();
    EXPECT_LE(out.n_tokens, sched_.config().max_num_batched_tokens) << "over the token budget";
    EXPECT_LE(sched_.n_running(), sched_.config().max_num_seqs) << "more running than seats";
    for (const ScheduledSequence& s : out.scheduled) {
      EXPECT_GT(s.n_new_tokens, 0) << "sequence " << s.seq->id() << " scheduled with no rows";
      s.seq->num_computed_tokens += s.n_new_tokens;
      if (s.seq->num_computed_tokens == s.seq->n_tokens()) {
        s.seq->append_token(7, 256);
        if (s.seq->finish_reason) sched_.remove(s.seq);
      }
    }
    return out;
  }

  static Rows rows(const SchedulerOutput& out) {
    Rows r;
    for (const ScheduledSequence& s : out.scheduled) r.emplace_back(s.seq->id(), s.n_new_tokens);
    return r;
  }
  static std::vector<int64_t> ids(std::span<Sequence* const> seqs) {
    std::vector<int64_t> r;
    for (const Sequence* s : seqs) r.push_back(s->id());
    return r;
  }

  Scheduler& sched() { return sched_; }
  BlockManager& blocks() { return blocks_; }

 private:
  grade::TinyModel tiny_;
  BlockManager blocks_;
  std::unique_ptr<BlockManager> swap_;
  Scheduler sched_;
  std::vector<std::unique_ptr<Sequence>> seqs_;
};

SchedulerConfig limits(int64_t max_num_seqs, int64_t max_num_batched_tokens, bool chunked = true) {
  SchedulerConfig cfg;
  cfg.max_num_seqs = max_num_seqs;
  cfg.max_num_batched_tokens = max_num_batched_tokens;
  cfg.enable_chunked_prefill = chunked;
  return cfg;
}

TEST(Ch05Task5, RunningDecodesComeFirstThenNewPromptsInArrivalOrder) {
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

TEST(Ch05Task5, ALongPromptIsChunkedIntoWhatTheDecodesLeaveOfTheBudget) {
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

TEST(Ch05Task5, WithoutChunkingAPromptRunsWholeOrWaitsAndNobodyOvertakesIt) {
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

TEST(Ch05Task5, AdmissionStopsAtThePromptWhoseBlocksDoNotFit) {
  Step st(limits(8, 64), 4);  // 4 blocks of 4 tokens
  st.add(0, 8, 10, 0);        // 2 blocks
  st.add(1, 12, 10, 1);       // 3 blocks: only 2 left
  st.add(2, 4, 10, 2);        // 1 block would fit, but it must not overtake request 1
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 8}}));
  EXPECT_EQ(st.sched().n_running(), 1);
  EXPECT_EQ(st.sched().n_waiting(), 2);
  EXPECT_EQ(st.blocks().n_free_blocks(), 2) << "a refused prompt holds no block";
}

TEST(Ch05Task5, AdmissionStopsWhenTheSeatsAreTaken) {
  Step st(limits(2, 64), 64);
  for (int i = 0; i < 4; ++i) st.add(i, 3, 10, i);
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 3}, {1, 3}}));
  EXPECT_EQ(Step::rows(st.run()), (Rows{{0, 1}, {1, 1}})) << "two seats, both taken";
  EXPECT_EQ(st.sched().n_waiting(), 2);
}

TEST(Ch05Task5, ThePoolRunningOutPreemptsTheLatestArrivalNotYetScheduled) {
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
    EXPECT_TRUE(s->block_table.empty());
  }
  const std::deque<Sequence*>& waiting = st.sched().queues().waiting;
  ASSERT_EQ(waiting.size(), 2u);
  EXPECT_EQ(waiting[0], s3) << "requeued at the front: 3 arrived before 2";
  EXPECT_EQ(waiting[1], s2);
  EXPECT_EQ(st.sched().n_running(), 2);
}

TEST(Ch05Task5, SwappedSequencesComeBackBeforeAnyNewPromptJoins) {
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

TEST(Ch05Task5, AStaticBatchIsAdmittedTogetherAndNobodyJoinsItLater) {
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

TEST(Ch05Task5, ManyRequestsInASmallPoolAllFinishWithEitherPreemption) {
  grade::TinyModel tiny;
  for (const PreemptionMode mode : {PreemptionMode::Recompute, PreemptionMode::Swap}) {
    BlockManager blocks(10,
                        kBlockSize);  // 40 slots for 4 seats of requests growing to 10 .. 33 tokens
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

TEST(Ch05Task5, SwappingGivesTheTokensOfAnUnpreemptedRun) {
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

}  // namespace
