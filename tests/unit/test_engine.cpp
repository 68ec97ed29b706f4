// The batched engine on tiny random-weight models: batch invariance (tokens and bitwise decode
// logits), paging and chunking against the contiguous path, preemption and recompute, abort,
// block accounting, and bad input. Every generation sets ignore_eos so no run can pass by
// producing nothing; lengths are asserted.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "lio/cpu_backend.h"
#include "lio/engine.h"
#include "lio/error.h"
#include "lio/forward_batch.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "tiny_model.h"

namespace {
using lio::testing::TinyModelSpec;

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TinyModelSpec spec;
    spec.weight_dtype = lio::DType::Q4_1;  // the default model's format
    spec.embd_dtype = lio::DType::Q8_0;
    spec.context_length = 256;
    spec.d_model = 64;
    spec.d_ff = 128;
    lio::testing::write_tiny_gguf(dir_ + "/m.gguf", spec);
    model_ = std::make_unique<lio::LoadedModel>(lio::load_model(dir_ + "/m.gguf", lio::WeightMode::AsStored));
  }
  std::unique_ptr<lio::ModelRunner> runner(int64_t block_size, int64_t n_blocks,
                                           lio::KvCacheDType kv = lio::KvCacheDType::F32) const {
    return std::make_unique<lio::ModelRunner>(std::make_unique<lio::CpuBackend>(model_->config, model_->weights),
                                              lio::KvPoolConfig{block_size, n_blocks, kv});
  }
  /// Prompt `i`: distinct, of length 3 + 9 * i (3 .. 66 tokens for i < 8).
  static std::vector<int32_t> prompt(int i) {
    std::mt19937 rng(100 + i);
    std::uniform_int_distribution<int32_t> id(3, 250);
    std::vector<int32_t> p(static_cast<size_t>(3 + 9 * i));
    for (int32_t& t : p) t = id(rng);
    return p;
  }
  static lio::SamplingParams greedy(int64_t max_tokens) {
    lio::SamplingParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
  }
  /// Runs every prompt through one engine; returns generated ids by request id.
  static std::map<int64_t, std::vector<int32_t>> run_all(lio::Engine& engine) {
    std::map<int64_t, std::vector<int32_t>> out;
    int guard = 0;
    while (engine.has_unfinished()) {
      for (const lio::RequestOutput& o : engine.step())
        out[o.request_id].insert(out[o.request_id].end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (++guard > 10000) ADD_FAILURE() << "engine did not finish";
      if (guard > 10000) break;
    }
    return out;
  }
  std::string dir_ = lio::testing::make_temp_dir("lio_test_engine");
  std::unique_ptr<lio::LoadedModel> model_;
};

TEST_F(EngineTest, BatchOfEightGivesTheTokensEachGivesAlone) {
  constexpr int kN = 8;
  constexpr int64_t kGen = 20;
  std::vector<std::vector<int32_t>> alone(kN);
  for (int i = 0; i < kN; ++i) {
    auto r = runner(16, 64);
    lio::EngineConfig cfg;
    cfg.scheduler.max_num_batched_tokens = 256;
    lio::Engine e(*r, *model_->tokenizer, cfg);
    const int64_t id = e.add_request(prompt(i), greedy(kGen));
    alone[i] = run_all(e)[id];
    ASSERT_EQ(static_cast<int64_t>(alone[i].size()), kGen);
  }
  // Together, with a small token budget so long prompts are chunked and mixed with decodes.
  auto r = runner(16, 64);
  lio::EngineConfig cfg;
  cfg.scheduler.max_num_batched_tokens = 24;
  cfg.scheduler.enable_chunked_prefill = true;
  lio::Engine e(*r, *model_->tokenizer, cfg);
  std::vector<int64_t> ids;
  for (int i = 0; i < kN; ++i) ids.push_back(e.add_request(prompt(i), greedy(kGen)));
  auto together = run_all(e);
  for (int i = 0; i < kN; ++i) EXPECT_EQ(together[ids[i]], alone[i]) << "request " << i;
  EXPECT_GT(e.stats().max_running, 1) << "the requests never shared a step";
  EXPECT_EQ(e.n_free_blocks(), 64) << "finished sequences must free their blocks";
}

/// Fills a runner's pool with sequence `tokens` on blocks `table` (prefill, no logits).
void prefill(lio::ModelRunner& r, const std::vector<int32_t>& tokens, const std::vector<int32_t>& table) {
  lio::ForwardBatch b(r.kv_pool().block_size());
  b.add_sequence(tokens, 0, table, 0);
  r.forward(b);
}

TEST_F(EngineTest, DecodeLogitsAreBitwiseEqualAloneAndInABatch) {
  // 65 sequences of different lengths in disjoint, scattered blocks: one decode row each, run
  // as one batch (the "alone or in a batch of up to 64 others") and one at a time.
  constexpr int kN = 65;
  constexpr int kBlocksPerSeq = 6;  // 96 slots >= the longest prompt (66) + 1
  auto r = runner(16, kN * kBlocksPerSeq);
  std::vector<std::vector<int32_t>> tables(kN);
  std::vector<std::vector<int32_t>> prompts(kN);
  for (int i = 0; i < kN; ++i) {
    prompts[i] = prompt(i % 8);
    prompts[i][0] = static_cast<int32_t>(3 + i);  // distinct sequences
    for (int b = 0; b < kBlocksPerSeq; ++b)
      tables[i].push_back(static_cast<int32_t>(i * kBlocksPerSeq + (kBlocksPerSeq - 1 - b)));  // scattered
    prefill(*r, prompts[i], tables[i]);
  }
  const int64_t vocab = model_->config.vocab_size;
  lio::ForwardBatch batch(16);
  for (int i = 0; i < kN; ++i)
    batch.add_sequence(std::vector<int32_t>{static_cast<int32_t>(7 + i)}, static_cast<int64_t>(prompts[i].size()),
                       tables[i], 1);
  const auto together_span = r->forward(batch);
  const std::vector<float> together(together_span.begin(), together_span.end());
  ASSERT_EQ(static_cast<int64_t>(together.size()), kN * vocab);
  for (int i = 0; i < kN; ++i) {
    lio::ForwardBatch one(16);
    one.add_sequence(std::vector<int32_t>{static_cast<int32_t>(7 + i)}, static_cast<int64_t>(prompts[i].size()),
                     tables[i], 1);
    const auto alone = r->forward(one);
    for (int64_t v = 0; v < vocab; ++v)
      ASSERT_EQ(alone[static_cast<size_t>(v)], together[static_cast<size_t>(i * vocab + v)])
          << "sequence " << i << " logit " << v;
  }
}

/// All-position logits of `tokens` fed in chunks of `chunk` on blocks of `block_size`.
std::vector<float> chunked_logits(lio::ModelRunner& r, const std::vector<int32_t>& tokens, int64_t chunk) {
  lio::SoloSequence seq(r, static_cast<int64_t>(tokens.size()));
  std::vector<float> all;
  for (size_t at = 0; at < tokens.size(); at += static_cast<size_t>(chunk)) {
    const size_t n = std::min(tokens.size() - at, static_cast<size_t>(chunk));
    auto l = seq.forward(std::span(tokens.data() + at, n), true);
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

TEST_F(EngineTest, BlockSizesAndChunkSizesGiveTheContiguousLogits) {
  std::vector<int32_t> tokens = prompt(7);  // 66 tokens
  const std::vector<int32_t> tail = prompt(5);
  tokens.insert(tokens.end(), tail.begin(), tail.end());  // 114 tokens
  const auto n = static_cast<int64_t>(tokens.size());
  // Contiguous: chapter 01's cache, one block holding the whole sequence.
  auto contiguous_runner = runner(256, 1);
  const std::vector<float> want = chunked_logits(*contiguous_runner, tokens, n);
  // Every row goes through the same paged decode loop, keys in position order, whatever the
  // block size: the table only says where key j lives, so the bits are equal.
  for (int64_t bs : {1, 16, 256}) {
    auto r = runner(bs, (n + bs - 1) / bs + 1);
    const auto got = chunked_logits(*r, tokens, n);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], want[i]) << "block size " << bs << " at " << i;
  }
  // Chunking: the kernels are chunk-invariant, so the bits are equal, not just close.
  auto r16 = runner(16, 16);
  const auto whole = chunked_logits(*r16, tokens, n);
  for (int64_t chunk : {1, 7, 64}) {
    auto r = runner(16, 16);
    const auto got = chunked_logits(*r, tokens, chunk);
    ASSERT_EQ(got.size(), whole.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], whole[i]) << "chunk " << chunk << " at " << i;
  }
}

TEST_F(EngineTest, PreemptionRecomputesAndFinishesWithUnconstrainedTokens) {
  constexpr int kN = 6;
  constexpr int64_t kGen = 24;
  auto big = runner(4, 256);
  lio::Engine free_engine(*big, *model_->tokenizer);
  std::vector<int64_t> ids;
  for (int i = 0; i < kN; ++i) ids.push_back(free_engine.add_request(prompt(i), greedy(kGen)));
  auto want = run_all(free_engine);
  EXPECT_EQ(free_engine.stats().n_preemptions, 0);

  // 24 blocks of 4 tokens = 96 slots for 6 sequences that end at up to 48 + 24 tokens each.
  auto small = runner(4, 24);
  lio::Engine tight(*small, *model_->tokenizer);
  std::vector<int64_t> tight_ids;
  for (int i = 0; i < kN; ++i) tight_ids.push_back(tight.add_request(prompt(i), greedy(kGen)));
  auto got = run_all(tight);
  EXPECT_GT(tight.stats().n_preemptions, 0) << "the pool was meant to run out";
  for (int i = 0; i < kN; ++i) {
    ASSERT_EQ(static_cast<int64_t>(got[tight_ids[i]].size()), kGen) << "request " << i;
    EXPECT_EQ(got[tight_ids[i]], want[ids[i]]) << "request " << i;
  }
  EXPECT_EQ(tight.n_free_blocks(), 24) << "every block is free again at the end";
}

TEST_F(EngineTest, AbortFreesBlocksAtOnce) {
  auto r = runner(4, 64);
  lio::Engine e(*r, *model_->tokenizer);
  const int64_t a = e.add_request(prompt(5), greedy(100));
  const int64_t b = e.add_request(prompt(3), greedy(100));
  e.step();  // both admitted and prefilled
  e.step();
  EXPECT_LT(e.n_free_blocks(), 64);
  const int64_t free_before = e.n_free_blocks();
  e.abort_request(a);
  const auto outs = e.step();
  bool saw_abort = false;
  for (const auto& o : outs) {
    if (o.request_id == a) {
      saw_abort = true;
      EXPECT_TRUE(o.finished);
      EXPECT_EQ(o.finish_reason, lio::FinishReason::Abort);
    }
  }
  EXPECT_TRUE(saw_abort);
  // a's blocks (48 tokens + 2 generated -> 13 blocks) are back; b grew by at most one block.
  EXPECT_GE(e.n_free_blocks(), free_before + 13 - 1);
  e.abort_request(b);
  e.abort_request(12345);  // unknown: ignored
  e.step();
  EXPECT_FALSE(e.has_unfinished());
  EXPECT_EQ(e.n_free_blocks(), 64);
}

TEST_F(EngineTest, SnapshotCountsWhatTheEngineHolds) {
  // max_num_seqs 1: the second request waits while the first runs.
  auto r = runner(4, 64);
  lio::EngineConfig config;
  config.scheduler.max_num_seqs = 1;
  lio::Engine e(*r, *model_->tokenizer, config);
  const int64_t a = e.add_request(prompt(2), greedy(3));
  const int64_t b = e.add_request(prompt(1), greedy(3));
  lio::EngineSnapshot s = e.snapshot();
  EXPECT_TRUE(s.requests.empty()) << "still in the inbox";
  EXPECT_EQ(s.n_used_blocks, 0);
  e.step();
  s = e.snapshot();
  EXPECT_EQ(s.n_running, 1);
  EXPECT_EQ(s.n_waiting, 1);
  ASSERT_EQ(s.requests.size(), 2u);
  EXPECT_EQ(s.requests[0].request_id, a);
  EXPECT_TRUE(s.requests[0].scheduled);
  EXPECT_EQ(s.requests[1].request_id, b);
  EXPECT_FALSE(s.requests[1].scheduled);
  EXPECT_EQ(s.n_blocks, 64);
  EXPECT_EQ(s.n_used_blocks, 64 - e.n_free_blocks());
  EXPECT_GT(s.n_used_blocks, 0);
  EXPECT_DOUBLE_EQ(s.kv_cache_usage, static_cast<double>(s.n_used_blocks) / 64.0);
  EXPECT_EQ(s.stats.n_steps, 1);
  run_all(e);
  s = e.snapshot();
  EXPECT_TRUE(s.requests.empty());
  EXPECT_EQ(s.n_running + s.n_waiting + s.n_swapped, 0);
  EXPECT_EQ(s.kv_cache_usage, 0.0);
  EXPECT_EQ(s.stats.n_decode_tokens + s.stats.n_prompt_tokens_computed,
            e.stats().n_decode_tokens + e.stats().n_prompt_tokens_computed);
  EXPECT_GE(s.stats.n_steps, 6) << "two requests of 3 tokens, one at a time";
}

TEST_F(EngineTest, RequestsFromAnotherThreadAreServed) {
  auto r = runner(16, 64);
  lio::Engine e(*r, *model_->tokenizer);
  std::vector<int64_t> ids(4);
  std::thread producer([&] {
    for (int i = 0; i < 4; ++i) ids[static_cast<size_t>(i)] = e.add_request(prompt(i), greedy(5));
  });
  producer.join();
  auto got = run_all(e);
  for (int64_t id : ids) EXPECT_EQ(got[id].size(), 5u);
}

TEST_F(EngineTest, BadRequestsAreRefusedAloneAndTheOthersGoOn) {
  auto r = runner(16, 8);  // 128 slots; context 256
  lio::Engine e(*r, *model_->tokenizer);
  const int64_t ok = e.add_request(prompt(2), greedy(6));
  std::vector<int32_t> too_long(256, 5);
  EXPECT_THROW(e.add_request(too_long, greedy(4)), lio::InvalidArgument);  // >= context
  std::vector<int32_t> too_big_for_pool(200, 5);
  try {
    e.add_request(too_big_for_pool, greedy(4));
    ADD_FAILURE() << "a prompt larger than the whole pool was accepted";
  } catch (const lio::InvalidArgument& err) {
    EXPECT_NE(std::string(err.what()).find("--kv-cache-mib"), std::string::npos) << err.what();
  }
  EXPECT_THROW(e.add_request({}, greedy(4)), lio::InvalidArgument);
  EXPECT_THROW(e.add_request({1, 100000}, greedy(4)), lio::InvalidArgument);
  EXPECT_THROW(e.add_request(prompt(1), greedy(0)), lio::InvalidArgument);
  auto got = run_all(e);
  EXPECT_EQ(got.size(), 1u);
  EXPECT_EQ(got[ok].size(), 6u);
}

TEST_F(EngineTest, ASequenceThatOutgrowsThePoolEndsWithLengthInsteadOfHanging) {
  auto r = runner(4, 4);  // 16 slots
  lio::Engine e(*r, *model_->tokenizer);
  const int64_t id = e.add_request(prompt(1), greedy(100));  // 12 tokens + 100 never fit
  std::optional<lio::FinishReason> reason;
  int steps = 0;
  while (e.has_unfinished() && steps++ < 1000)
    for (const auto& o : e.step())
      if (o.request_id == id && o.finished) reason = o.finish_reason;
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(*reason, lio::FinishReason::Length);
  EXPECT_EQ(e.n_free_blocks(), 4);
}

TEST_F(EngineTest, MaxTokensEndsARequestWithLength) {
  auto r = runner(16, 32);
  lio::Engine e(*r, *model_->tokenizer);
  lio::SamplingParams p = greedy(7);
  const int64_t id = e.add_request(prompt(2), p);
  lio::RequestOutput last;
  std::vector<int32_t> ids;
  while (e.has_unfinished())
    for (auto& o : e.step()) {
      ids.insert(ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      last = o;
    }
  EXPECT_EQ(last.request_id, id);
  EXPECT_TRUE(last.finished);
  EXPECT_EQ(last.finish_reason, lio::FinishReason::Length);
  EXPECT_EQ(ids.size(), 7u);
  EXPECT_EQ(last.n_generated_tokens, 7);
}

TEST(ForwardBatchTest, SlotMappingFollowsTheBlockTable) {
  lio::ForwardBatch b(4);
  const std::vector<int32_t> table = {7, 2, 9};
  b.add_sequence(std::vector<int32_t>{1, 2, 3}, 3, table, 1);  // positions 3, 4, 5
  EXPECT_EQ(b.slot_mapping, (std::vector<int32_t>{7 * 4 + 3, 2 * 4 + 0, 2 * 4 + 1}));
  EXPECT_EQ(b.positions, (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(b.seq_lens, (std::vector<int32_t>{6}));
  EXPECT_EQ(b.logits_rows, (std::vector<int32_t>{2}));
  b.add_sequence(std::vector<int32_t>{5}, 2, table, 1, /*write_kv=*/false);  // a padding row
  EXPECT_EQ(b.slot_mapping.back(), lio::kPadSlotId);
  EXPECT_EQ(b.seq_lens.back(), 3) << "it still attends to positions 0..2";
  EXPECT_NO_THROW(b.validate(256, 64, 16));
  b.slot_mapping.back() = -2;
  EXPECT_THROW(b.validate(256, 64, 16), lio::InvalidArgument) << "only kPadSlotId may be negative";
}

TEST(ForwardBatchTest, RejectsShortBlockTablesAndBadIds) {
  lio::ForwardBatch b(4);
  const std::vector<int32_t> table = {7, 2, 9};
  EXPECT_THROW(b.add_sequence(std::vector<int32_t>{4}, 12, table, 1), lio::InvalidArgument);
  EXPECT_THROW(b.add_sequence(std::vector<int32_t>{}, 0, table, 0), lio::InvalidArgument);
  b.add_sequence(std::vector<int32_t>{1, 999}, 0, table, 2);
  EXPECT_THROW(b.validate(/*vocab=*/500, /*context=*/64, /*n_blocks=*/10), lio::InvalidArgument);  // id 999
  EXPECT_THROW(b.validate(1000, 64, /*n_blocks=*/5), lio::InvalidArgument);  // block 7 >= 5
  EXPECT_NO_THROW(b.validate(1000, 64, 10));
}

// ---- chapter 04: prefix caching, copy-on-write, parallel sampling ------------------------

/// Generated ids by (request id, sample index).
using Samples = std::map<std::pair<int64_t, int64_t>, std::vector<int32_t>>;

Samples run_samples(lio::Engine& engine) {
  Samples out;
  for (int guard = 0; engine.has_unfinished() && guard < 10000; ++guard) {
    for (const lio::RequestOutput& o : engine.step()) {
      auto& v = out[{o.request_id, o.sample_index}];
      v.insert(v.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
  }
  EXPECT_FALSE(engine.has_unfinished()) << "engine did not finish";
  return out;
}

/// A 40-token shared "system prompt" followed by prompt(i)'s tokens.
std::vector<int32_t> with_system_prompt(int i) {
  std::vector<int32_t> p(40);
  for (int j = 0; j < 40; ++j) p[static_cast<size_t>(j)] = 7 + (j * 37) % 200;
  const std::vector<int32_t> tail = [&] {
    std::mt19937 rng(500 + i);
    std::uniform_int_distribution<int32_t> id(3, 250);
    std::vector<int32_t> t(static_cast<size_t>(5 + 3 * i));
    for (int32_t& x : t) x = id(rng);
    return t;
  }();
  p.insert(p.end(), tail.begin(), tail.end());
  return p;
}

class PrefixCacheTest : public EngineTest, public ::testing::WithParamInterface<lio::PrefixCacheMode> {};

TEST_P(PrefixCacheTest, SharedSystemPromptHitsAndChangesNoToken) {
  // Wave 1: one request alone (fills the cache); wave 2: five more with the same system prompt.
  auto serve = [&](lio::PrefixCacheMode mode, lio::EngineStats* stats, lio::PrefixCacheStats* pc) {
    auto r = runner(16, 40);
    lio::EngineConfig cfg;
    cfg.prefix_cache = mode;
    lio::Engine e(*r, *model_->tokenizer, cfg);
    e.add_request(with_system_prompt(0), greedy(6));
    Samples out = run_samples(e);
    for (int i = 1; i < 6; ++i) e.add_request(with_system_prompt(i), greedy(6));
    Samples more = run_samples(e);
    out.insert(more.begin(), more.end());
    *stats = e.stats();
    if (e.prefix_cache() != nullptr) *pc = e.prefix_cache()->stats;
    const int64_t held = e.block_manager().n_used_blocks();
    EXPECT_EQ(e.n_free_blocks() + held, 40);
    return out;
  };
  lio::EngineStats base_stats, stats;
  lio::PrefixCacheStats none_pc, pc;
  const Samples base = serve(lio::PrefixCacheMode::None, &base_stats, &none_pc);
  const Samples cached = serve(GetParam(), &stats, &pc);
  ASSERT_EQ(base.size(), 6u);
  EXPECT_EQ(cached, base) << "a prefix-cache hit changed a token";
  // Each of the 5 later requests reuses at least the 2 full blocks (32 tokens) of the system prompt.
  EXPECT_GE(pc.hits, 5 * 32);
  EXPECT_GT(pc.queries, pc.hits);
  EXPECT_LE(stats.n_prompt_tokens_computed, base_stats.n_prompt_tokens_computed - 5 * 32);
}

TEST_P(PrefixCacheTest, EvictionUnderPressureNeverServesStaleKv) {
  // A pool too small to keep everything cached: blocks are evicted and reused while other
  // requests look up the same prefixes. Tokens must equal the uncached run.
  auto serve = [&](lio::PrefixCacheMode mode) {
    auto r = runner(8, 24);
    lio::EngineConfig cfg;
    cfg.prefix_cache = mode;
    cfg.scheduler.max_num_seqs = 3;
    lio::Engine e(*r, *model_->tokenizer, cfg);
    Samples out;
    for (int wave = 0; wave < 3; ++wave) {
      for (int i = 0; i < 4; ++i) e.add_request(with_system_prompt((i + wave) % 5), greedy(5));
      Samples o = run_samples(e);
      for (auto& [k, v] : o) out[{k.first, 0}] = v;
    }
    return out;
  };
  EXPECT_EQ(serve(GetParam()), serve(lio::PrefixCacheMode::None));
}

INSTANTIATE_TEST_SUITE_P(HashAndRadix, PrefixCacheTest,
                         ::testing::Values(lio::PrefixCacheMode::Hash, lio::PrefixCacheMode::Radix),
                         [](const auto& info) { return std::string(lio::prefix_cache_mode_name(info.param)); });

TEST_F(EngineTest, RadixReusesTheNextTurnsPartialBlockAHashChainCannot) {
  // Turn 1: a 20-token prompt, 6 tokens generated (K/V computed for 25). Turn 2's prompt is
  // turn 1's whole text plus 3 new tokens: the radix tree matches all 25 computed tokens
  // (a partial second block, copied on the first write), the hash chain only the full block.
  std::vector<int32_t> turn1 = prompt(2);
  turn1.resize(20);
  auto serve = [&](lio::PrefixCacheMode mode, int64_t* hits, int64_t* copies) {
    auto r = runner(16, 16);
    lio::EngineConfig cfg;
    cfg.prefix_cache = mode;
    lio::Engine e(*r, *model_->tokenizer, cfg);
    const int64_t id1 = e.add_request(turn1, greedy(6));
    Samples a = run_samples(e);
    std::vector<int32_t> turn2 = turn1;
    const std::vector<int32_t>& out1 = a[std::make_pair(id1, int64_t{0})];
    turn2.insert(turn2.end(), out1.begin(), out1.end());
    turn2.insert(turn2.end(), {11, 12, 13});
    e.add_request(turn2, greedy(6));
    Samples b = run_samples(e);
    *hits = e.prefix_cache() != nullptr ? e.prefix_cache()->stats.hits : 0;
    *copies = e.stats().n_block_copies;
    return b.begin()->second;
  };
  int64_t h_none = 0, h_hash = 0, h_radix = 0, c_none = 0, c_hash = 0, c_radix = 0;
  const auto none = serve(lio::PrefixCacheMode::None, &h_none, &c_none);
  EXPECT_EQ(serve(lio::PrefixCacheMode::Hash, &h_hash, &c_hash), none);
  EXPECT_EQ(serve(lio::PrefixCacheMode::Radix, &h_radix, &c_radix), none);
  EXPECT_EQ(h_hash, 16);
  EXPECT_EQ(h_radix, 25);
  EXPECT_EQ(c_hash, 0);
  EXPECT_GE(c_radix, 1) << "the shared partial block must be copied before turn 2 writes into it";
}

TEST_F(EngineTest, ParallelSamplesShareThePromptAndMatchIndependentRequests) {
  const std::vector<int32_t> p = prompt(3);  // 30 tokens: the last prompt token is in block 1
  lio::SamplingParams params = greedy(8);
  params.sampler.temperature = 0.9f;
  params.sampler.seed = 1000;
  // Reference: four independent requests with seeds 1000 .. 1003.
  auto r0 = runner(16, 64);
  lio::Engine e0(*r0, *model_->tokenizer);
  std::vector<int64_t> ids;
  for (int i = 0; i < 4; ++i) {
    lio::SamplingParams pi = params;
    pi.sampler.seed += static_cast<uint64_t>(i);
    ids.push_back(e0.add_request(p, pi));
  }
  Samples independent = run_samples(e0);
  // Forked: one request, n = 4.
  auto r = runner(16, 64);
  lio::Engine e(*r, *model_->tokenizer);
  params.n = 4;
  const int64_t id = e.add_request(p, params);
  Samples forked = run_samples(e);
  ASSERT_EQ(forked.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const std::vector<int32_t>& sample = forked[std::make_pair(id, int64_t{i})];
    ASSERT_EQ(sample.size(), 8u);
    EXPECT_EQ(sample, (independent[std::make_pair(ids[static_cast<size_t>(i)], int64_t{0})])) << "sample " << i;
  }
  EXPECT_EQ(e.stats().n_forks, 3);
  EXPECT_EQ(e.stats().n_block_copies, 3) << "each fork copies the shared block of the last prompt token once";
  EXPECT_LT(e.stats().peak_blocks_used, e0.stats().peak_blocks_used) << "the prompt's first block is shared";
  EXPECT_LT(e.stats().n_prompt_tokens_computed, e0.stats().n_prompt_tokens_computed);
  EXPECT_EQ(e.n_free_blocks(), 64);
}

TEST_F(EngineTest, AbortingAParallelRequestEndsEverySample) {
  auto r = runner(16, 64);
  lio::Engine e(*r, *model_->tokenizer);
  lio::SamplingParams params = greedy(50);
  params.n = 3;
  const int64_t id = e.add_request(prompt(2), params);
  int finished = 0;
  for (int s = 0; s < 3; ++s) e.step();  // prompt computed, samples forked and decoding
  e.abort_request(id);
  for (const lio::RequestOutput& o : e.step()) {
    EXPECT_EQ(o.request_id, id);
    if (o.finished) {
      EXPECT_EQ(o.finish_reason, lio::FinishReason::Abort);
      ++finished;
    }
  }
  EXPECT_EQ(finished, 3);
  EXPECT_FALSE(e.has_unfinished());
  EXPECT_EQ(e.n_free_blocks(), 64);
}

// ---- chapter 03: the KV cache in f16 and int8 ---------------------------------------------

class KvCacheDTypeTest : public EngineTest {
 protected:
  /// Greedy tokens (16 each) of prompts 0 .. n-1 (of 3 + 9 i tokens) served together, by prompt.
  std::vector<std::vector<int32_t>> serve(int n, lio::KvCacheDType kv, int64_t n_blocks, lio::PreemptionMode mode,
                                          lio::EngineStats* stats = nullptr) const {
    auto r = runner(8, n_blocks, kv);
    lio::EngineConfig cfg;
    cfg.scheduler.preemption = mode;
    cfg.swap_space_mib = 4;
    lio::Engine e(*r, *model_->tokenizer, cfg);
    std::map<int64_t, size_t> index;  // request id -> prompt
    for (int i = 0; i < n; ++i) index[e.add_request(prompt(i), greedy(16))] = static_cast<size_t>(i);
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(n));
    for (const auto& [id, tokens] : run_all(e)) out[index.at(id)] = tokens;
    EXPECT_EQ(e.n_free_blocks(), n_blocks);
    if (stats != nullptr) *stats = e.stats();
    return out;
  }
  /// All-position logits of `tokens` with a `kv` cache.
  std::vector<float> logits(const std::vector<int32_t>& tokens, lio::KvCacheDType kv) const {
    auto r = runner(8, 16, kv);
    lio::SoloSequence seq(*r, 128);
    const std::span<const float> l = seq.forward(tokens, /*all_logits=*/true);
    return {l.begin(), l.end()};
  }
};

TEST_F(KvCacheDTypeTest, LogitsStayNearTheF32Cache) {
  const std::vector<int32_t> tokens = prompt(6);  // 57 tokens: several blocks of 8
  const std::vector<float> f32 = logits(tokens, lio::KvCacheDType::F32);
  const std::vector<float> l16 = logits(tokens, lio::KvCacheDType::F16), l8 = logits(tokens, lio::KvCacheDType::Int8);
  double d16 = 0, d8 = 0, mag = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    d16 = std::max(d16, static_cast<double>(std::fabs(l16[i] - f32[i])));
    d8 = std::max(d8, static_cast<double>(std::fabs(l8[i] - f32[i])));
    mag = std::max(mag, static_cast<double>(std::fabs(f32[i])));
  }
  EXPECT_GT(d8, 0.0) << "the int8 cache changed nothing";
  EXPECT_LT(d16, 1e-2 * mag) << d16;
  EXPECT_LT(d8, 0.05 * mag) << d8;
  EXPECT_GT(d8, d16) << "int8 " << d8 << ", f16 " << d16 << ", max |logit| " << mag;
}

TEST_F(KvCacheDTypeTest, BatchedGivesTheTokensOfAloneAndSwapResumes) {
  for (lio::KvCacheDType kv : {lio::KvCacheDType::F16, lio::KvCacheDType::Int8}) {
    const auto together = serve(5, kv, 128, lio::PreemptionMode::Recompute);
    for (int i = 0; i < 5; ++i) {
      auto r = runner(8, 32, kv);
      lio::Engine e(*r, *model_->tokenizer);
      const int64_t id = e.add_request(prompt(i), greedy(16));
      const std::vector<int32_t> alone = run_all(e)[id];
      ASSERT_EQ(alone.size(), 16u);
      EXPECT_EQ(alone, together[static_cast<size_t>(i)]) << kv_cache_dtype_name(kv) << " prompt " << i;
    }
    lio::EngineStats swapped;
    EXPECT_EQ(serve(5, kv, 20, lio::PreemptionMode::Swap, &swapped), together) << kv_cache_dtype_name(kv);
    EXPECT_GT(swapped.n_blocks_swapped_out, 0) << kv_cache_dtype_name(kv);
  }
}

// ---- chapter 05: swap preemption, static batching, per-request timings -------------------

TEST_F(EngineTest, SwapPreemptionResumesWithTheSameTokens) {
  auto serve = [&](int64_t n_blocks, lio::PreemptionMode mode, lio::EngineStats* stats) {
    auto r = runner(8, n_blocks);
    lio::EngineConfig cfg;
    cfg.scheduler.preemption = mode;
    cfg.swap_space_mib = 4;
    lio::Engine e(*r, *model_->tokenizer, cfg);
    for (int i = 0; i < 6; ++i) e.add_request(prompt(i % 4), greedy(24));
    Samples out = run_samples(e);
    *stats = e.stats();
    EXPECT_EQ(e.n_free_blocks(), n_blocks);
    return out;
  };
  lio::EngineStats big, swapped, recomputed;
  const Samples want = serve(128, lio::PreemptionMode::Recompute, &big);
  ASSERT_EQ(big.n_preemptions, 0);
  EXPECT_EQ(serve(24, lio::PreemptionMode::Swap, &swapped), want);
  EXPECT_EQ(serve(24, lio::PreemptionMode::Recompute, &recomputed), want);
  EXPECT_GT(swapped.n_preemptions, 0);
  EXPECT_GT(swapped.n_blocks_swapped_out, 0);
  EXPECT_EQ(swapped.n_blocks_swapped_in, swapped.n_blocks_swapped_out) << "every swapped block comes back";
  EXPECT_LT(swapped.n_prompt_tokens_computed, recomputed.n_prompt_tokens_computed) << "swap recomputes nothing";
}

TEST_F(EngineTest, StaticBatchingPadsFinishedRowsUntilTheBatchEnds) {
  // Batch of 3 (max_tokens 5, 2, 3), then D: B finishes after step 2 and pads steps 3-5, C
  // after step 3 and pads steps 4-5 (HF generate keeps finished rows in the batch); D starts
  // at step 6 with the padding's blocks back in the pool. Tokens never depend on padding.
  auto serve = [&](lio::SchedulingPolicy policy, bool padding, lio::EngineStats* stats,
                   std::vector<int64_t>* free_after_step) {
    auto r = runner(16, 64);
    lio::EngineConfig cfg;
    cfg.scheduler.max_num_seqs = 3;
    cfg.scheduler.policy = policy;
    cfg.scheduler.static_padding = padding;
    lio::Engine e(*r, *model_->tokenizer, cfg);
    const int64_t max_tokens[] = {5, 2, 3, 2};
    for (int i = 0; i < 4; ++i) e.add_request(prompt(i), greedy(max_tokens[i]));
    std::map<int64_t, std::vector<int32_t>> out;
    while (e.has_unfinished()) {
      for (const lio::RequestOutput& o : e.step())
        out[o.request_id].insert(out[o.request_id].end(), o.new_token_ids.begin(), o.new_token_ids.end());
      free_after_step->push_back(e.n_free_blocks());
      if (free_after_step->size() > 100) break;
    }
    *stats = e.stats();
    EXPECT_EQ(e.n_free_blocks(), 64) << "padding rows give their blocks back";
    return out;
  };
  lio::EngineStats padded, unpadded, continuous;
  std::vector<int64_t> free_padded, free_unpadded, free_continuous;
  const auto want = serve(lio::SchedulingPolicy::Continuous, true, &continuous, &free_continuous);
  EXPECT_EQ(serve(lio::SchedulingPolicy::Static, true, &padded, &free_padded), want);
  EXPECT_EQ(serve(lio::SchedulingPolicy::Static, false, &unpadded, &free_unpadded), want);
  EXPECT_EQ(continuous.n_padding_tokens, 0);
  EXPECT_EQ(unpadded.n_padding_tokens, 0);
  EXPECT_EQ(padded.n_padding_tokens, 3 + 2);
  ASSERT_EQ(free_padded.size(), 7u) << "A runs 5 steps, then D 2";
  EXPECT_EQ(free_unpadded.size(), 7u);
  // After step 3, B and C are done: padded, their blocks are still held; unpadded, freed.
  EXPECT_LT(free_padded[2], free_unpadded[2]);
  EXPECT_EQ(free_padded[4], 64) << "the batch ended at step 5: everything is back";
  EXPECT_EQ(padded.n_decode_tokens, unpadded.n_decode_tokens) << "padding rows are not decode tokens";
}

TEST_F(EngineTest, StaticBatchWithSwapPreemptionFinishes) {
  // A static batch whose rows finish (and pad, holding their blocks) while others are swapped
  // out: nothing runs, and the swapped rows must get the padding's blocks back, or the engine
  // steps forever (found with lio batch --scheduling static --preemption swap on a small pool).
  auto serve = [&](lio::SchedulingPolicy policy, int64_t n_blocks, lio::EngineStats* stats) {
    auto r = runner(8, n_blocks);
    lio::EngineConfig cfg;
    cfg.scheduler.max_num_seqs = 4;
    cfg.scheduler.policy = policy;
    cfg.scheduler.static_padding = true;
    cfg.scheduler.preemption = lio::PreemptionMode::Swap;
    cfg.swap_space_mib = 4;
    lio::Engine e(*r, *model_->tokenizer, cfg);
    const int64_t max_tokens[] = {40, 8, 12, 40, 30, 6, 40, 20};
    for (int i = 0; i < 8; ++i) e.add_request(prompt(i % 4), greedy(max_tokens[i]));
    Samples out = run_samples(e);
    *stats = e.stats();
    EXPECT_EQ(e.n_free_blocks(), n_blocks);
    return out;
  };
  lio::EngineStats big, small;
  const Samples want = serve(lio::SchedulingPolicy::Continuous, 128, &big);
  EXPECT_EQ(serve(lio::SchedulingPolicy::Static, 14, &small), want);
  EXPECT_GT(small.n_blocks_swapped_out, 0) << "the pool must be small enough to swap";
  EXPECT_GT(small.n_padding_tokens, 0) << "and rows must pad while others are swapped out";
}

TEST_F(EngineTest, TimingsFollowVllmDefinitions) {
  auto r = runner(16, 64);
  lio::Engine e(*r, *model_->tokenizer);
  e.add_request(prompt(2), greedy(6));
  std::vector<lio::RequestOutput> finished;
  while (e.has_unfinished())
    for (lio::RequestOutput& o : e.step())
      if (o.finished) finished.push_back(o);
  ASSERT_EQ(finished.size(), 1u);
  const lio::RequestOutput& o = finished[0];
  ASSERT_EQ(o.itl_ms.size(), 5u) << "6 tokens: 5 gaps";
  double sum = 0;
  for (double x : o.itl_ms) sum += x;
  EXPECT_NEAR(o.tpot_ms, sum / 5, 1e-6) << "TPOT is the mean inter-token latency (first token excluded)";
  EXPECT_LE(o.queue_ms, o.ttft_ms);
  EXPECT_LE(o.ttft_ms, o.e2e_ms);
}

}  // namespace
