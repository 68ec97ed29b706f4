// Chapter 05, Task 2: one engine step (exercises/05_continuous_batching/engine_step.cpp,
// lio/engine_step.h), graded through lio::Engine, whose step() is your engine_step, on a tiny
// random model. The oracle for every generated token is the Llama forward pass written from
// the equations in double precision (tests/support/reference_forward.h), greedy: whatever the
// batch mixes (prefill chunks beside decode rows, static batching's padding, swapped and
// resumed sequences, copy-on-write forks, speculative drafts), each request's tokens are its
// greedy continuation alone. The engine's statistics show each mechanism really ran.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lio/cpu_backend.h"
#include "lio/engine.h"
#include "lio/forwarding_backend.h"
#include "lio/model_loader.h"
#include "reference_forward.h"
#include "tiny_model.h"

namespace {

using Tokens = std::vector<int32_t>;

class Ch05Task2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    spec_ = new lio::testing::TinyModelSpec();
    spec_->context_length = 256;
    const std::string dir = lio::testing::make_temp_dir("lio_grade_ch05_task2");
    lio::testing::write_tiny_gguf(dir + "/m.gguf", *spec_);
    model_ = new lio::LoadedModel(lio::load_model(dir + "/m.gguf", lio::WeightMode::AsStored));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete spec_;
  }

  /// Counts the rows the forward passes run (one embedding lookup per row).
  class RowCounter : public lio::ForwardingBackend {
   public:
    RowCounter(std::unique_ptr<lio::Backend> inner, int64_t* rows) : ForwardingBackend(std::move(inner)), rows_(rows) {}
    void embedding(const int32_t* t, int64_t n, float* out) override {
      *rows_ += n;
      ForwardingBackend::embedding(t, n, out);
    }

   private:
    int64_t* rows_;
  };

  /// A CPU runner over the tiny model; adds every row it runs to *rows when given.
  static std::unique_ptr<lio::ModelRunner> runner(int64_t block_size, int64_t n_blocks, int64_t* rows = nullptr) {
    std::unique_ptr<lio::Backend> be = std::make_unique<lio::CpuBackend>(model_->config, model_->weights);
    if (rows) be = std::make_unique<RowCounter>(std::move(be), rows);
    return std::make_unique<lio::ModelRunner>(std::move(be), lio::KvPoolConfig{block_size, n_blocks});
  }

  /// Prompt i: `len` ids.
  static Tokens prompt(int i, int64_t len) {
    Tokens p;
    for (int64_t j = 0; j < len; ++j) p.push_back(static_cast<int32_t>(3 + (j * 37 + i * 101) % 250));
    return p;
  }

  static lio::SamplingParams greedy(int64_t n) {
    lio::SamplingParams s;
    s.max_tokens = n;
    s.ignore_eos = true;
    return s;
  }

  /// The greedy continuation of `p` by `n` tokens under the double-precision equations.
  static Tokens reference_greedy(Tokens p, int64_t n) {
    Tokens out;
    const int64_t V = spec_->vocab_size();
    for (int64_t t = 0; t < n; ++t) {
      const std::vector<double> logits = lio::testing::reference_logits(*spec_, p);
      const auto last = logits.begin() + static_cast<std::ptrdiff_t>((p.size() - 1) * V);
      const auto next = static_cast<int32_t>(std::max_element(last, last + V) - last);
      out.push_back(next);
      p.push_back(next);
    }
    return out;
  }

  /// Runs the engine to the end; each request's tokens by request id (samples of a request in
  /// sample order under key id * 100 + sample).
  static std::map<int64_t, Tokens> run(lio::Engine& e) {
    std::map<int64_t, Tokens> out;
    for (int guard = 0; e.has_unfinished(); ++guard) {
      if (guard > 5000) {
        ADD_FAILURE() << "the engine did not finish in 5,000 steps";
        break;
      }
      for (const lio::RequestOutput& o : e.step()) {
        Tokens& t = out[o.request_id * 100 + o.sample_index];
        t.insert(t.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      }
    }
    return out;
  }

  static inline lio::testing::TinyModelSpec* spec_ = nullptr;
  static inline lio::LoadedModel* model_ = nullptr;
};

TEST_F(Ch05Task2, PrefillChunksBesideDecodeRowsGiveEachRequestsGreedyTokens) {
  // A 12-token budget: the longer prompts arrive in chunks while the others decode.
  auto r = runner(4, 128);
  lio::EngineConfig cfg;
  cfg.scheduler.max_num_batched_tokens = 12;
  lio::Engine e(*r, *model_->tokenizer, cfg);
  const int64_t lens[] = {3, 30, 9, 21, 1};
  std::map<int64_t, Tokens> want;
  for (int i = 0; i < 5; ++i)
    want[e.add_request(prompt(i, lens[i]), greedy(6)) * 100] = reference_greedy(prompt(i, lens[i]), 6);
  EXPECT_EQ(run(e), want);
  EXPECT_EQ(e.n_free_blocks(), 128);
  const lio::EngineStats& st = e.stats();
  EXPECT_EQ(st.n_prompt_tokens_computed, 3 + 30 + 9 + 21 + 1) << "each prompt token runs once";
  EXPECT_EQ(st.n_decode_tokens, 5 * 5) << "after each prompt's first token, 5 decode rows";
  EXPECT_GE(st.n_steps, (64 + 25) / 12) << "the statistics count every step that ran";
}

TEST_F(Ch05Task2, StaticBatchingPadsWithoutChangingATokenAndReturnsThePaddingsBlocks) {
  int64_t rows = 0;
  auto r = runner(8, 64, &rows);
  lio::EngineConfig cfg;
  cfg.scheduler.max_num_seqs = 3;
  cfg.scheduler.policy = lio::SchedulingPolicy::Static;
  cfg.scheduler.static_padding = true;
  lio::Engine e(*r, *model_->tokenizer, cfg);
  const int64_t max_tokens[] = {5, 2, 3, 2};
  std::map<int64_t, Tokens> want;
  for (int i = 0; i < 4; ++i)
    want[e.add_request(prompt(i, 7), greedy(max_tokens[i])) * 100] = reference_greedy(prompt(i, 7), max_tokens[i]);
  EXPECT_EQ(run(e), want);
  const lio::EngineStats& st = e.stats();
  EXPECT_EQ(st.n_padding_tokens, 3 + 2) << "finished rows pad until their batch ends";
  EXPECT_EQ(rows, st.n_prompt_tokens_computed + st.n_decode_tokens + st.n_padding_tokens)
      << "the passes ran every scheduled row, the padding rows included";
  EXPECT_EQ(e.n_free_blocks(), 64);
}

TEST_F(Ch05Task2, SwappedSequencesResumeWithTheirOwnKv) {
  // 24 blocks of 8 tokens for 6 requests of 14 + 24 tokens: some must be swapped out and back.
  auto r = runner(8, 24);
  lio::EngineConfig cfg;
  cfg.scheduler.preemption = lio::PreemptionMode::Swap;
  cfg.swap_space_mib = 4;
  lio::Engine e(*r, *model_->tokenizer, cfg);
  std::map<int64_t, Tokens> want;
  for (int i = 0; i < 6; ++i)
    want[e.add_request(prompt(i % 4, 14), greedy(24)) * 100] = reference_greedy(prompt(i % 4, 14), 24);
  EXPECT_EQ(run(e), want);
  EXPECT_GT(e.stats().n_blocks_swapped_out, 0) << "the pool is small enough to swap";
  EXPECT_EQ(e.n_free_blocks(), 24);
}

TEST_F(Ch05Task2, ForkedSamplesCopyOnWriteTheSharedBlock) {
  // n = 3 samples of one prompt share its blocks; the last, partly filled block is copied on
  // the first write of each sample. Greedy samples all equal the greedy continuation.
  auto r = runner(4, 64);
  lio::Engine e(*r, *model_->tokenizer);
  lio::SamplingParams p = greedy(5);
  p.n = 3;
  const int64_t id = e.add_request(prompt(7, 10), p);
  const Tokens g = reference_greedy(prompt(7, 10), 5);
  EXPECT_EQ(run(e), (std::map<int64_t, Tokens>{{id * 100, g}, {id * 100 + 1, g}, {id * 100 + 2, g}}));
  EXPECT_GT(e.stats().n_block_copies, 0) << "the shared partial block was copied before a sample wrote it";
  EXPECT_EQ(e.n_free_blocks(), 64);
}

TEST_F(Ch05Task2, SpeculativeDraftsRunAsRowsOfTheSameBatch) {
  // n-gram drafting: each prompt is seed + the model's own continuation of it + seed again, so
  // the lookup always finds a continuation to draft. Each decoding sequence runs its last token
  // and its drafts as rows of the step's one batch; greedy verification keeps the greedy tokens.
  auto r = runner(4, 256);
  lio::EngineConfig cfg;
  cfg.scheduler.max_num_batched_tokens = 16;
  cfg.speculative.method = lio::SpecMethod::Ngram;
  cfg.speculative.num_speculative_tokens = 3;
  cfg.speculative.ngram_min = 1;
  lio::Engine e(*r, *model_->tokenizer, cfg);
  std::map<int64_t, Tokens> want;
  for (int i = 0; i < 3; ++i) {
    const Tokens seed = prompt(i, 6);
    Tokens p = seed;
    for (const int32_t t : reference_greedy(seed, 12)) p.push_back(t);
    p.insert(p.end(), seed.begin(), seed.end());
    want[e.add_request(p, greedy(10)) * 100] = reference_greedy(p, 10);
  }
  EXPECT_EQ(run(e), want);
  EXPECT_GT(e.stats().spec_num_draft_tokens, 0) << "drafts were proposed and verified";
  EXPECT_EQ(e.n_free_blocks(), 256);
}

TEST_F(Ch05Task2, DraftModelDraftsAreProposedAfterSchedulingAndRunInThePass) {
  // A draft model (here the target's own weights, so greedy drafts are always right) proposes
  // once the step is scheduled; its drafts are rows of the pass that verifies them.
  auto r = runner(4, 256);
  auto dr = runner(4, 256);
  lio::EngineConfig cfg;
  cfg.speculative.method = lio::SpecMethod::Draft;
  cfg.speculative.num_speculative_tokens = 3;
  lio::Engine e(*r, *model_->tokenizer, cfg, dr.get());
  std::map<int64_t, Tokens> want;
  for (int i = 0; i < 3; ++i) want[e.add_request(prompt(i, 9), greedy(10)) * 100] = reference_greedy(prompt(i, 9), 10);
  EXPECT_EQ(run(e), want);
  const lio::EngineStats& st = e.stats();
  EXPECT_GT(st.spec_num_draft_tokens, 0) << "drafts were proposed";
  EXPECT_EQ(st.spec_num_accepted_tokens, st.spec_num_draft_tokens)
      << "the target drafting for itself has every draft accepted, once the drafts are rows of the pass";
  EXPECT_GT(e.stats().spec_num_accepted_tokens, 0)
      << "drafts the model itself wrote were accepted: they ran as rows of the pass that verified them";
  EXPECT_EQ(e.n_free_blocks(), 256);
}

TEST_F(Ch05Task2, AStepThatRunsNothingStillReturnsTheAbortedRequestsOutputs) {
  auto r = runner(4, 64);
  lio::Engine e(*r, *model_->tokenizer);
  const int64_t id = e.add_request(prompt(1, 5), greedy(3));
  e.abort_request(id);
  const std::vector<lio::RequestOutput> out = e.step();
  ASSERT_EQ(out.size(), 1u) << "the inbox's abort is this step's output, though nothing ran";
  EXPECT_EQ(out[0].request_id, id);
  EXPECT_TRUE(out[0].finished);
  EXPECT_EQ(e.stats().n_steps, 0) << "no forward pass ran";
  EXPECT_FALSE(e.has_unfinished());
}

}  // namespace
