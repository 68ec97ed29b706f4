// What chapter 05's grading test shares: a tiny random model (its tokenizer makes Sequences),
// a Scheduler driven one step at a time on a pool small enough to be read by hand (Step), a
// scheduler-level simulation that checks every step's invariants, and engine runs. Every case
// goes through the Scheduler or the Engine, so every case runs your schedule_step.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "lio/cpu_backend.h"
#include "lio/engine.h"
#include "lio/model_loader.h"
#include "lio/scheduler.h"
#include "tiny_model.h"

namespace lio::grade {

/// A tiny random Llama model (context 256), written and loaded once per test.
class TinyModel {
 public:
  TinyModel() {
    testing::TinyModelSpec spec;
    spec.context_length = 256;
    testing::write_tiny_gguf(dir_ + "/m.gguf", spec);
    model_ = std::make_unique<LoadedModel>(load_model(dir_ + "/m.gguf", WeightMode::AsStored));
  }
  const LoadedModel& model() const { return *model_; }
  /// A CPU runner with a pool of n_blocks blocks of block_size tokens.
  std::unique_ptr<ModelRunner> runner(int64_t block_size, int64_t n_blocks) const {
    return std::make_unique<ModelRunner>(std::make_unique<CpuBackend>(model_->config, model_->weights),
                                         KvPoolConfig{block_size, n_blocks});
  }

 private:
  std::string dir_ = testing::make_temp_dir("lio_grade_ch05");
  std::unique_ptr<LoadedModel> model_;
};

/// Prompt i: distinct token ids, `len` of them.
inline std::vector<int32_t> prompt_of(int i, int64_t len) {
  std::mt19937 rng(1000 + i);
  std::uniform_int_distribution<int32_t> id(3, 250);
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (int32_t& t : p) t = id(rng);
  return p;
}

/// Greedy, ignore_eos, exactly `n` tokens.
inline SamplingParams exactly(int64_t n) {
  SamplingParams p;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

/// What a simulation saw.
struct SimStats {
  int64_t steps = 0, max_tokens_in_step = 0, max_running = 0, preemptions = 0;
  std::map<int64_t, int64_t> finish_step;  ///< sequence id -> step it finished
  std::map<int64_t, int64_t> first_step;   ///< sequence id -> step it first ran
};

/// Drives a Scheduler without a model: each scheduled chunk is "computed" (num_computed_tokens
/// advances); a sequence that reaches its last token gets a token appended (id 7). Checks the
/// budget and the seat limit every step; gives up after `max_steps`.
inline SimStats simulate(Scheduler& sched, std::vector<std::unique_ptr<Sequence>>& seqs, int64_t max_steps = 5000) {
  SimStats st;
  for (auto& s : seqs) sched.add(s.get());
  while (sched.has_unfinished() && st.steps < max_steps) {
    const SchedulerOutput out = sched.schedule();
    ++st.steps;
    int64_t rows = 0;
    for (const ScheduledSequence& s : out.scheduled) rows += s.n_new_tokens;
    st.max_tokens_in_step = std::max(st.max_tokens_in_step, rows);
    st.max_running = std::max(st.max_running, sched.n_running());
    st.preemptions += static_cast<int64_t>(out.preempted.size());
    for (Sequence* u : out.unfittable) ADD_FAILURE() << "sequence " << u->id() << " found unfittable";
    for (const ScheduledSequence& s : out.scheduled) {
      Sequence& q = *s.seq;
      st.first_step.emplace(q.id(), st.steps);
      q.num_computed_tokens += s.n_new_tokens;
      if (q.num_computed_tokens == q.n_tokens()) {
        q.append_token(7, 256);
        if (q.finish_reason) {
          st.finish_step[q.id()] = st.steps;
          sched.remove(&q);
        }
      }
    }
  }
  return st;
}

/// Runs every (prompt, params) through one engine; returns generated ids by request id, and
/// for each request the engine step of its first and of its last token.
struct EngineRun {
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::map<int64_t, int64_t> first_step, last_step;
  EngineStats stats;
};
inline EngineRun run_engine(ModelRunner& runner, const Tokenizer& tok, const EngineConfig& cfg,
                            const std::vector<std::pair<std::vector<int32_t>, SamplingParams>>& requests) {
  Engine e(runner, tok, cfg);
  for (const auto& [p, params] : requests) e.add_request(p, params);
  EngineRun r;
  for (int64_t step = 1; e.has_unfinished() && step < 20000; ++step) {
    for (const RequestOutput& o : e.step()) {
      if (!o.new_token_ids.empty()) {
        r.first_step.emplace(o.request_id, step);
        r.last_step[o.request_id] = step;
      }
      r.tokens[o.request_id].insert(r.tokens[o.request_id].end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
  }
  EXPECT_FALSE(e.has_unfinished()) << "the engine did not finish";
  r.stats = e.stats();
  return r;
}

/// Six greedy requests (prompts of 10 .. 25 tokens, 24 tokens each) run twice through one
/// engine configuration: in a pool of 128 blocks of 8, where they never run out, and in one of
/// 16 blocks (128 slots for six sequences growing to 34 .. 49 tokens), where they must.
struct PoolRuns {
  EngineRun unconstrained, small_pool;
};
inline PoolRuns run_in_large_and_small_pool(const TinyModel& tiny, EngineConfig cfg) {
  std::vector<std::pair<std::vector<int32_t>, SamplingParams>> reqs;
  for (int i = 0; i < 6; ++i) reqs.push_back({prompt_of(i, 10 + 3 * i), exactly(24)});
  cfg.scheduler.max_num_seqs = 6;
  PoolRuns r;
  auto large = tiny.runner(8, 128);
  r.unconstrained = run_engine(*large, *tiny.model().tokenizer, cfg, reqs);
  EXPECT_EQ(r.unconstrained.stats.n_preemptions, 0);
  auto small = tiny.runner(8, 16);
  r.small_pool = run_engine(*small, *tiny.model().tokenizer, cfg, reqs);
  return r;
}

constexpr int64_t kBlockSize = 4;

/// (sequence id, rows) in batch order.
using Rows = std::vector<std::pair<int64_t, int64_t>>;

/// A pool of blocks of kBlockSize tokens, an optional swap space, a Scheduler over them, and
/// sequences arriving at set times.
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
        std::make_unique<Sequence>(id, prompt_of(static_cast<int>(id), prompt_len),
                                   exactly(max_tokens), *tiny_.model().tokenizer));
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
  TinyModel tiny_;
  BlockManager blocks_;
  std::unique_ptr<BlockManager> swap_;
  Scheduler sched_;
  std::vector<std::unique_ptr<Sequence>> seqs_;
};

inline SchedulerConfig limits(int64_t max_num_seqs, int64_t max_num_batched_tokens, bool chunked = true) {
  SchedulerConfig cfg;
  cfg.max_num_seqs = max_num_seqs;
  cfg.max_num_batched_tokens = max_num_batched_tokens;
  cfg.enable_chunked_prefill = chunked;
  return cfg;
}

}  // namespace lio::grade
