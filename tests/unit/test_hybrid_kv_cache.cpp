// The hybrid KV cache (lio/kv_pool.h KvCacheGroups, lio/kv_cache_coordinator.h) on a tiny
// gemma3 model whose windowed layers see 8 keys: blocks that slide out of the window go back to
// the pool, and every engine path — chunked batches, parallel sampling (copy-on-write),
// preemption by recompute or swap, the hash and radix prefix caches, speculative decoding, static batching —
// gives exactly the tokens of the one-group pool, which keeps every block.
#include <gtest/gtest.h>

#include <algorithm>

#include <map>
#include <memory>
#include <random>
#include <vector>

#include "lio/cpu_backend.h"
#include "lio/engine.h"
#include "lio/error.h"
#include "lio/generate.h"
#include "lio/kv_cache_coordinator.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "lio/parallel.h"
#include "tiny_model.h"

namespace {
using lio::testing::TinyModelSpec;

TEST(KvCacheGroupsTest, GemmaLayersSplitIntoGroupsOfTheGlobalLayerCount) {
  lio::ModelConfig c;
  c.n_layers = 12;
  c.sliding_window = 512;
  c.sliding_window_pattern = 6;  // layers 5 and 11 global, as Gemma 3
  const lio::KvCacheGroups g = lio::kv_cache_groups(c, true);
  ASSERT_EQ(g.n_lanes, 2);
  ASSERT_EQ(g.n_groups(), 6);
  EXPECT_EQ(g.layers[0], (std::vector<int64_t>{5, 11}));
  EXPECT_EQ(g.window[0], 0);
  EXPECT_EQ(g.layers[1], (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(g.layers[3], (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(g.layers[5], (std::vector<int64_t>{9, 10}));
  for (int64_t gi = 1; gi < 6; ++gi) EXPECT_EQ(g.window[static_cast<size_t>(gi)], 512);
  EXPECT_EQ(g.layer_group[11], 0);
  EXPECT_EQ(g.layer_lane[11], 1);
  EXPECT_EQ(g.layer_group[6], 3);
  EXPECT_EQ(g.layer_lane[6], 1);
  // Without the hybrid layout, or without windows: one group of every layer.
  EXPECT_EQ(lio::kv_cache_groups(c, false).n_groups(), 1);
  EXPECT_EQ(lio::kv_cache_groups(c, false).n_lanes, 12);
  // A block holds 2 layers instead of 12: 6x more blocks in the same bytes.
  EXPECT_EQ(lio::kv_block_bytes(c, 16, lio::KvCacheDType::F32, false),
            6 * lio::kv_block_bytes(c, 16, lio::KvCacheDType::F32, true));
  lio::ModelConfig llama;
  llama.n_layers = 4;
  EXPECT_EQ(lio::kv_cache_groups(llama, true).n_groups(), 1);
}

// Pipeline stages keep the whole model's groups (issue 62, item 1): on tiny_model's gemma3 spec
// (Gemma 3's pattern: every sixth layer global), each stage's layer sits in the group and lane one
// process gives that global layer, every stage has one process's group count, windows and block
// bytes, and a pool built from a stage's groups stores each layer in that lane.
TEST(KvCacheGroupsTest, PipelineStagesKeepTheWholeModelsGroupsAndLanes) {
  TinyModelSpec spec;
  spec.architecture = "gemma3";
  spec.n_layers = 12;  // layers 5 and 11 global: lanes 2, six groups
  const std::string dir = lio::testing::make_temp_dir("lio_test_hybrid_kv_pp");
  lio::testing::write_tiny_gguf(dir + "/g.gguf", spec);
  const lio::LoadedModel model = lio::load_model(dir + "/g.gguf", lio::WeightMode::AsStored);
  const lio::KvCacheGroups whole = lio::kv_cache_groups(model.config, true);
  ASSERT_EQ(whole.n_groups(), 6);
  ASSERT_EQ(whole.n_lanes, 2);
  const int64_t one_process = lio::kv_block_bytes(model.config, 4, lio::KvCacheDType::F32, true);
  for (const int64_t pp : {2, 3}) {
    int64_t covered = 0;
    for (int64_t rank = 0; rank < pp; ++rank) {
      SCOPED_TRACE("pp " + std::to_string(pp) + " stage " + std::to_string(rank));
      const lio::RankPlan plan = lio::make_rank_plan(model.config, model.weights, lio::ParallelConfig{1, pp}, rank);
      const lio::LoadedModel shard = lio::shard_model(model, plan);
      const lio::ModelConfig& stage = shard.config;
      ASSERT_EQ(stage.first_layer, plan.layer_begin);
      const lio::KvCacheGroups g = lio::kv_cache_groups(model.config, true, stage.first_layer, stage.n_layers);
      EXPECT_EQ(g.n_lanes, whole.n_lanes);
      EXPECT_EQ(g.window, whole.window);
      ASSERT_EQ(g.n_groups(), whole.n_groups());
      ASSERT_EQ(static_cast<int64_t>(g.layer_lane.size()), stage.n_layers);
      for (int64_t l = 0; l < stage.n_layers; ++l) {
        const auto global = static_cast<size_t>(stage.first_layer + l);
        EXPECT_EQ(g.layer_group[static_cast<size_t>(l)], whole.layer_group[global]) << "layer " << global;
        EXPECT_EQ(g.layer_lane[static_cast<size_t>(l)], whole.layer_lane[global]) << "layer " << global;
        const auto& mine = g.layers[static_cast<size_t>(g.layer_group[static_cast<size_t>(l)])];
        EXPECT_NE(std::find(mine.begin(), mine.end(), l), mine.end());
      }
      for (const auto& layers : g.layers) covered += static_cast<int64_t>(layers.size());
      EXPECT_EQ(lio::kv_block_bytes(stage, 4, lio::KvCacheDType::F32, g), one_process);
      // Restricting to the stage's own config instead gives other groups (why the driver's are used).
      if (pp == 2) {
        EXPECT_NE(lio::kv_cache_groups(stage, true).n_lanes, whole.n_lanes);
      }
      const lio::HostKvPool pool(stage, lio::KvPoolConfig{4, 8, lio::KvCacheDType::F32, true, g});
      EXPECT_EQ(pool.n_groups(), whole.n_groups());
      EXPECT_EQ(pool.block_bytes(), one_process);
      for (int64_t l = 0; l < stage.n_layers; ++l)
        EXPECT_EQ(pool.lane(l), whole.layer_lane[static_cast<size_t>(stage.first_layer + l)]);
      // One group (--disable-hybrid-kv-cache-manager): a stage's block holds its own layers only.
      const lio::KvCacheGroups one = lio::kv_cache_groups(model.config, false, stage.first_layer, stage.n_layers);
      EXPECT_EQ(one.n_groups(), 1);
      EXPECT_EQ(one.n_lanes, stage.n_layers);
      EXPECT_EQ(lio::kv_block_bytes(stage, 4, lio::KvCacheDType::F32, one),
                lio::kv_block_bytes(stage, 4, lio::KvCacheDType::F32, false));
    }
    EXPECT_EQ(covered, spec.n_layers) << "every layer on exactly one stage";
  }
  EXPECT_THROW(lio::kv_cache_groups(model.config, true, 8, 5), lio::InvalidArgument);
  lio::ModelConfig half = model.config;
  half.n_layers = 6;
  EXPECT_THROW(lio::HostKvPool(half, lio::KvPoolConfig{4, 8, lio::KvCacheDType::F32, true, whole}),
               lio::InvalidArgument);
}

TEST(KvCacheCoordinatorTest, WindowedTablesGiveBackWhatSlidOut) {
  lio::BlockManager blocks(32, 4);
  lio::KvCacheCoordinator kv(blocks, {0, 8});  // group 0 full attention, group 1 window 8
  ASSERT_EQ(kv.null_block(), 0);
  EXPECT_EQ(blocks.n_free_blocks(), 31);
  lio::GroupTables tables = kv.empty_tables();
  ASSERT_EQ(tables.size(), 2u);
  std::vector<lio::BlockCopy> copies;
  ASSERT_TRUE(kv.append_slots(tables, 0, 20, copies));  // a 20-token prefill: 5 + 5 blocks
  EXPECT_EQ(blocks.n_free_blocks(), 21);
  // The next query at position 20 sees keys 13..20: blocks 0..2 (positions 0..11) slide out.
  EXPECT_EQ(kv.first_kept_block(8, 20), 3);
  // Position 20 starts block 5 in both tables (2 new blocks), and 3 come back first: none needed.
  EXPECT_EQ(kv.blocks_needed(tables, 20, 1), 0);
  ASSERT_TRUE(kv.append_slots(tables, 20, 1, copies));
  EXPECT_EQ(tables[1][0], kv.null_block());
  EXPECT_EQ(tables[1][2], kv.null_block());
  EXPECT_NE(tables[1][3], kv.null_block());
  EXPECT_EQ(tables[0].size(), 6u);
  EXPECT_EQ(tables[1].size(), 6u);
  EXPECT_EQ(kv.n_blocks_held(tables), 6 + 3);
  EXPECT_EQ(blocks.n_free_blocks(), 21 - 2 + 3);
  EXPECT_TRUE(copies.empty());
  kv.free(tables);
  EXPECT_EQ(blocks.n_free_blocks(), 31) << "only the null block stays held";
  EXPECT_EQ(blocks.ref_count(kv.null_block()), 1);
}

TEST(KvCacheCoordinatorTest, BlocksNeededNeverOvercommits) {
  lio::BlockManager blocks(6, 4);
  lio::KvCacheCoordinator kv(blocks, {0, 8});
  lio::GroupTables tables;  // a new sequence holds nothing yet
  std::vector<lio::BlockCopy> copies;
  EXPECT_EQ(kv.blocks_needed(tables, 0, 12), 6);
  EXPECT_FALSE(kv.append_slots(tables, 0, 12, copies)) << "5 free blocks, 6 needed";
  ASSERT_EQ(tables.size(), 2u);
  EXPECT_TRUE(tables[0].empty());
  EXPECT_TRUE(tables[1].empty());
  EXPECT_EQ(blocks.n_free_blocks(), 5);
  ASSERT_TRUE(kv.append_slots(tables, 0, 8, copies));
  EXPECT_EQ(blocks.n_free_blocks(), 1);
}

TEST(KvCacheCoordinatorTest, OneFullAttentionGroupIsTheBlockManagerItself) {
  lio::BlockManager blocks(8, 4);
  lio::KvCacheCoordinator kv(blocks, {0});
  EXPECT_EQ(kv.null_block(), -1) << "no window: no null block";
  EXPECT_EQ(blocks.n_free_blocks(), 8);
  EXPECT_EQ(kv.peak_blocks(10), 3);
  lio::GroupTables a;
  std::vector<lio::BlockCopy> copies;
  ASSERT_TRUE(kv.append_slots(a, 0, 10, copies));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].size(), 3u);
  lio::GroupTables b = kv.fork(a, 10);  // parallel sampling: the last, partial block is shared
  EXPECT_EQ(kv.blocks_needed(b, 10, 1), 1) << "the shared block's copy";
  ASSERT_TRUE(kv.append_slots(b, 10, 1, copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, a[0][2]);
  kv.free(a);
  kv.free(b);
  EXPECT_EQ(blocks.n_free_blocks(), 8);
}

TEST(KvCacheCoordinatorTest, SwapMovesOnlyTheBlocksInsideEachWindow) {
  lio::BlockManager blocks(32, 4);
  lio::BlockManager host(16, 4);
  lio::KvCacheCoordinator kv(blocks, {0, 8});
  lio::GroupTables tables;
  std::vector<lio::BlockCopy> copies;
  ASSERT_TRUE(kv.append_slots(tables, 0, 20, copies));
  ASSERT_TRUE(kv.append_slots(tables, 20, 1, copies));  // window group: blocks 0..2 slid out
  const int64_t free_before = blocks.n_free_blocks();
  // 21 computed positions: 6 blocks in group 0, 3 live ones in group 1.
  lio::GroupTables on_host;
  std::vector<lio::BlockCopy> out;
  ASSERT_TRUE(kv.swap_out(tables, 21, host, on_host, out));
  EXPECT_EQ(out.size(), 9u);
  EXPECT_EQ(host.n_free_blocks(), 16 - 9);
  ASSERT_EQ(on_host.size(), 2u);
  EXPECT_EQ(on_host[1][0], -1) << "what slid out of the window is not swapped";
  EXPECT_EQ(blocks.n_free_blocks(), free_before + 9);
  EXPECT_TRUE(tables[0].empty()) << "swap_out freed the device tables";
  // Back in, for one more position: every live block copied back, the null block where it was.
  std::vector<lio::BlockCopy> in;
  ASSERT_TRUE(kv.swap_in(on_host, 21, 1, host, tables, in));
  EXPECT_EQ(in.size(), 9u);
  EXPECT_EQ(host.n_free_blocks(), 16);
  EXPECT_EQ(tables[0].size(), 6u);
  EXPECT_EQ(tables[1].size(), 6u);
  EXPECT_EQ(tables[1][2], kv.null_block());
  EXPECT_NE(tables[1][3], kv.null_block());
  EXPECT_EQ(blocks.n_free_blocks(), free_before);
  kv.free(tables);
  EXPECT_EQ(blocks.n_free_blocks(), 31);
}

class HybridEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TinyModelSpec spec;
    spec.architecture = "gemma3";
    spec.n_layers = 6;  // layer 5 global, 0..4 windowed: lanes 1, six groups
    spec.sliding_window = 8;
    spec.context_length = 256;
    spec.weight_dtype = lio::DType::Q8_0;
    lio::testing::write_tiny_gguf(dir_ + "/g.gguf", spec);
    model_ = std::make_unique<lio::LoadedModel>(lio::load_model(dir_ + "/g.gguf", lio::WeightMode::AsStored));
  }
  /// A pool of `bytes_blocks` one-group blocks' worth of memory (x6 blocks when hybrid).
  std::unique_ptr<lio::ModelRunner> runner(bool hybrid, int64_t bytes_blocks, int64_t block_size = 4) const {
    const int64_t n = hybrid ? bytes_blocks * 6 : bytes_blocks;
    return std::make_unique<lio::ModelRunner>(std::make_unique<lio::CpuBackend>(model_->config, model_->weights),
                                              lio::KvPoolConfig{block_size, n, lio::KvCacheDType::F32, hybrid});
  }
  static std::vector<int32_t> prompt(int i, int64_t len = 0) {
    std::mt19937 rng(300 + i);
    std::uniform_int_distribution<int32_t> id(3, 250);
    std::vector<int32_t> p(static_cast<size_t>(len > 0 ? len : 5 + 11 * i));
    for (int32_t& t : p) t = id(rng);
    return p;
  }
  static lio::SamplingParams greedy(int64_t max_tokens, int64_t n = 1, float temperature = 0.0f) {
    lio::SamplingParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.n = n;
    p.sampler.temperature = temperature;
    p.sampler.seed = 7;
    return p;
  }
  using Requests = std::vector<std::pair<std::vector<int32_t>, lio::SamplingParams>>;
  /// Five greedy requests of 10 tokens: one 40-token system prompt, then 3 .. 7 tokens of their own.
  static Requests shared_prefix_requests() {
    const std::vector<int32_t> system = prompt(7, 40);
    Requests reqs;
    for (int i = 0; i < 5; ++i) {
      std::vector<int32_t> p = system;
      const std::vector<int32_t> tail = prompt(i, 3 + i);
      p.insert(p.end(), tail.begin(), tail.end());
      reqs.push_back({p, greedy(10)});
    }
    return reqs;
  }
  using Outputs = std::map<std::pair<int64_t, int64_t>, std::vector<int32_t>>;
  static Outputs run_all(lio::Engine& e) {
    Outputs out;
    for (int guard = 0; e.has_unfinished() && guard < 20000; ++guard)
      for (const lio::RequestOutput& o : e.step()) {
        auto& v = out[{o.request_id, o.sample_index}];
        v.insert(v.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      }
    EXPECT_FALSE(e.has_unfinished()) << "engine did not finish";
    return out;
  }
  /// Serves `requests` on a pool of `bytes_blocks` one-group blocks' worth of memory, hybrid or not.
  Outputs serve(bool hybrid, const lio::EngineConfig& cfg, int64_t bytes_blocks,
                const std::vector<std::pair<std::vector<int32_t>, lio::SamplingParams>>& requests,
                lio::EngineStats* stats = nullptr) const {
    auto r = runner(hybrid, bytes_blocks);
    EXPECT_EQ(r->kv_pool().n_groups(), hybrid ? 6 : 1);
    lio::Engine e(*r, *model_->tokenizer, cfg);
    for (const auto& [p, s] : requests) e.add_request(p, s);
    Outputs out = run_all(e);
    EXPECT_EQ(e.n_free_blocks(), r->kv_pool().n_blocks() - (hybrid ? 1 : 0)) << "every block but the null block comes back";
    if (stats) *stats = e.stats();
    return out;
  }
  std::string dir_ = lio::testing::make_temp_dir("lio_test_hybrid_kv");
  std::unique_ptr<lio::LoadedModel> model_;
};

TEST_F(HybridEngineTest, ChunkedBatchGivesTheTokensOfTheOneGroupPool) {
  std::vector<std::pair<std::vector<int32_t>, lio::SamplingParams>> reqs;
  for (int i = 0; i < 6; ++i) reqs.push_back({prompt(i), greedy(24)});
  lio::EngineConfig cfg;
  cfg.scheduler.max_num_batched_tokens = 16;  // prompts in chunks beside decode rows
  lio::EngineStats one, hybrid;
  const Outputs want = serve(false, cfg, 256, reqs, &one);
  ASSERT_EQ(want.size(), 6u);
  for (const auto& [k, v] : want) ASSERT_EQ(v.size(), 24u);
  EXPECT_EQ(serve(true, cfg, 256, reqs, &hybrid), want);
  // Bytes held at the peak: hybrid blocks are 1/6 of a one-group block.
  EXPECT_LT(hybrid.peak_blocks_used, 6 * one.peak_blocks_used * 3 / 4)
      << "windowed layers must give blocks back (" << hybrid.peak_blocks_used << " sixth-blocks vs "
      << one.peak_blocks_used << " blocks)";
}

TEST_F(HybridEngineTest, OneLongSequenceHoldsOnlyItsWindowOnWindowedLayers) {
  auto r = runner(true, 256);
  lio::EngineConfig cfg;
  cfg.scheduler.max_num_batched_tokens = 16;
  lio::Engine e(*r, *model_->tokenizer, cfg);
  e.add_request(prompt(0, 40), greedy(120));
  int64_t held_at_end = 0;
  while (e.has_unfinished()) {
    e.step();
    held_at_end = r->kv_pool().n_blocks() - e.n_free_blocks();
  }
  // 160 tokens: the full group holds 40 blocks of 4; each of 5 windowed groups holds the blocks
  // of the window of 8 plus the block being written (at most 4), never 40.
  const int64_t peak = e.stats().peak_blocks_used;
  EXPECT_LE(peak, 1 + 40 + 5 * 4) << "peak blocks held";
  EXPECT_GE(peak, 40);
  EXPECT_EQ(held_at_end, 1) << "the null block only";
}

TEST_F(HybridEngineTest, ParallelSamplingSharesAndCopiesEveryGroup) {
  std::vector<std::pair<std::vector<int32_t>, lio::SamplingParams>> reqs;
  for (int i = 1; i < 4; ++i) reqs.push_back({prompt(i), greedy(16, 3, 0.8f)});
  lio::EngineConfig cfg;
  cfg.scheduler.max_num_batched_tokens = 32;
  const Outputs want = serve(false, cfg, 256, reqs);
  ASSERT_EQ(want.size(), 9u);
  EXPECT_EQ(serve(true, cfg, 256, reqs), want);
}

TEST_F(HybridEngineTest, PreemptionByRecomputeGivesTheSameTokens) {
  std::vector<std::pair<std::vector<int32_t>, lio::SamplingParams>> reqs;
  for (int i = 0; i < 6; ++i) reqs.push_back({prompt(i), greedy(30)});
  lio::EngineConfig cfg;
  cfg.scheduler.max_num_batched_tokens = 16;  // prompt chunks a windowed group can hold
  const Outputs want = serve(false, cfg, 256, reqs);
  ASSERT_EQ(want.size(), 6u);
  lio::EngineStats tight;
  // 14 one-group blocks' worth: 84 sixth-blocks, too few for six sequences at once.
  EXPECT_EQ(serve(true, cfg, 14, reqs, &tight), want);
  EXPECT_GT(tight.n_preemptions, 0) << "the pool was meant to be too small";
}

TEST_F(HybridEngineTest, HashPrefixCacheHitsOnEveryGroupAndChangesNoToken) {
  const Requests reqs = shared_prefix_requests();
  lio::EngineConfig cfg;
  cfg.scheduler.max_num_seqs = 1;  // one after another: each finds the last one's blocks
  const Outputs want = serve(false, cfg, 256, reqs);
  cfg.prefix_cache = lio::PrefixCacheMode::Hash;
  auto r = runner(true, 256);
  lio::Engine e(*r, *model_->tokenizer, cfg);
  for (const auto& [p, s] : reqs) e.add_request(p, s);
  EXPECT_EQ(run_all(e), want);
  const lio::PrefixCacheStats& pc = e.prefix_cache()->stats;
  EXPECT_GE(pc.hits, 4 * 40) << "requests 2-5 reuse the 40-token system prompt";
}

TEST_F(HybridEngineTest, SpeculativeRollbackKeepsEveryGroupConsistent) {
  std::vector<std::pair<std::vector<int32_t>, lio::SamplingParams>> reqs;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p = prompt(i, 12);
    const std::vector<int32_t> again = p;
    p.insert(p.end(), again.begin(), again.end());  // repeats: n-gram lookup finds drafts
    reqs.push_back({p, greedy(24)});
  }
  lio::EngineConfig plain;
  plain.scheduler.max_num_batched_tokens = 32;
  const Outputs want = serve(false, plain, 256, reqs);
  for (const lio::SpecMethod m : {lio::SpecMethod::Ngram, lio::SpecMethod::EarlyExit}) {
    lio::EngineConfig cfg = plain;
    cfg.speculative.method = m;
    cfg.speculative.num_speculative_tokens = 3;
    cfg.speculative.draft_layers = 2;
    cfg.speculative.ngram_min = 2;
    cfg.speculative.ngram_max = 4;
    lio::EngineStats st;
    EXPECT_EQ(serve(true, cfg, 256, reqs, &st), want) << static_cast<int>(m);
    EXPECT_GT(st.spec_num_draft_tokens, 0);
  }
}

TEST_F(HybridEngineTest, StaticBatchingPaddingRowsKeepTheirGroups) {
  std::vector<std::pair<std::vector<int32_t>, lio::SamplingParams>> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back({prompt(i), greedy(6 + 6 * i)});
  lio::EngineConfig cfg;
  cfg.scheduler.policy = lio::SchedulingPolicy::Static;
  cfg.scheduler.max_num_batched_tokens = 128;
  const Outputs want = serve(false, cfg, 256, reqs);
  EXPECT_EQ(serve(true, cfg, 256, reqs), want);
}

TEST_F(HybridEngineTest, SwapPreemptionGivesTheSameTokens) {
  // vLLM v1 has no swap preemption (it recomputes); here swap moves every group's live blocks.
  std::vector<std::pair<std::vector<int32_t>, lio::SamplingParams>> reqs;
  for (int i = 0; i < 6; ++i) reqs.push_back({prompt(i), greedy(30)});
  lio::EngineConfig cfg;
  cfg.scheduler.max_num_batched_tokens = 16;
  const Outputs want = serve(false, cfg, 256, reqs);
  ASSERT_EQ(want.size(), 6u);
  cfg.scheduler.preemption = lio::PreemptionMode::Swap;
  lio::EngineStats tight;
  EXPECT_EQ(serve(true, cfg, 14, reqs, &tight), want);
  EXPECT_GT(tight.n_preemptions, 0) << "the pool was meant to be too small";
  EXPECT_GT(tight.n_blocks_swapped_out, 0);
  EXPECT_GT(tight.n_blocks_swapped_in, 0);
  EXPECT_LE(tight.n_blocks_swapped_in, tight.n_blocks_swapped_out) << "what a window passed stays on the host";
}

TEST_F(HybridEngineTest, RadixPrefixCacheHitsOnEveryGroupAndChangesNoToken) {
  // SGLang's SWA radix cache serves hybrid models; here one tree per KV cache group.
  const Requests reqs = shared_prefix_requests();
  lio::EngineConfig cfg;
  cfg.scheduler.max_num_seqs = 1;  // one after another: each finds the last one's blocks
  cfg.scheduler.max_num_batched_tokens = 16;  // a prompt fits the small pool below without a hit
  const Outputs want = serve(false, cfg, 256, reqs);
  cfg.prefix_cache = lio::PrefixCacheMode::Radix;
  for (const int64_t bytes_blocks : {256, 12}) {  // 12: the trees must evict (and tombstone)
    SCOPED_TRACE(bytes_blocks);
    auto r = runner(true, bytes_blocks);
    lio::Engine e(*r, *model_->tokenizer, cfg);
    for (const auto& [p, s] : reqs) e.add_request(p, s);
    EXPECT_EQ(run_all(e), want);
    const lio::PrefixCacheStats& pc = e.prefix_cache()->stats;
    if (bytes_blocks == 256) {
      EXPECT_GE(pc.hits, 4 * 40) << "requests 2-5 reuse the 40-token system prompt";
    }
    EXPECT_EQ(e.n_free_blocks() + e.prefix_cache()->n_evictable(), r->kv_pool().n_blocks() - 1)
        << "every block but the null block is free or evictable";
  }
}

TEST_F(HybridEngineTest, RadixHitThatCannotGrowInATinyPoolDoesNotLivelock) {
  // A pool of 5 blocks of 16 tokens, smaller than one request's 65-token prompt plus its 24
  // tokens of output, the radix cache, and a shared 60-token prefix: the hit ends inside a block,
  // so it needs a copy-on-write copy. With nothing running, the hit pinned blocks the sequence
  // then could not grow around, while it fitted without the hit; the scheduler undid the match
  // and tried the same lookup every step, forever (found by lio batch on Gemma 3 at
  // --kv-cache-mib 3). Now the cache gives its blocks back and the request runs from scratch.
  const std::vector<int32_t> system = prompt(7, 60);
  Requests reqs;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p = system;
    const std::vector<int32_t> tail = prompt(i, 5);
    p.insert(p.end(), tail.begin(), tail.end());
    reqs.push_back({p, greedy(24)});
  }
  for (const bool hybrid : {false, true}) {
    SCOPED_TRACE(hybrid ? "hybrid pool" : "one group");
    lio::EngineConfig cfg;
    const int64_t bytes_blocks = hybrid ? 8 : 5;  // the windowed groups need blocks of their own
    auto plain_runner = runner(hybrid, bytes_blocks, 16);
    lio::Engine plain_engine(*plain_runner, *model_->tokenizer, cfg);
    for (const auto& [p, sp] : reqs) plain_engine.add_request(p, sp);
    const Outputs plain = run_all(plain_engine);
    cfg.prefix_cache = lio::PrefixCacheMode::Radix;
    auto r = runner(hybrid, bytes_blocks, 16);
    lio::Engine e(*r, *model_->tokenizer, cfg);
    for (const auto& [p, sp] : reqs) e.add_request(p, sp);
    const Outputs got = run_all(e);  // "engine did not finish" without the fix
    ASSERT_EQ(got.size(), plain.size());
    for (const auto& [key, tokens] : got) {
      const std::vector<int32_t>& want = plain.at(key);
      EXPECT_FALSE(tokens.empty()) << "request " << key.first << " plain " << want.size();
      ASSERT_LE(tokens.size(), want.size());
      EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), want.begin())) << "request " << key.first;
    }
  }
}

TEST_F(HybridEngineTest, SoloSequenceLogitsEqualTheOneGroupPool) {
  auto a = runner(false, 64);
  auto b = runner(true, 64);
  lio::SoloSequence sa(*a, 100), sb(*b, 100);
  const std::vector<int32_t> p = prompt(3, 50);
  const std::span<const float> la = sa.forward(p, true);
  const std::vector<float> want(la.begin(), la.end());
  const std::span<const float> lb = sb.forward(p, true);
  ASSERT_EQ(lb.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(lb[i], want[i]) << "logit " << i;
}

TEST_F(HybridEngineTest, GenerateCountsTheBlocksOfEveryGroup) {
  // lio generate --json's kv_bytes_allocated (issue 62: it multiplied one group's block bytes by
  // the token blocks, so a hybrid pool lost the windowed groups' blocks). 40 + 12 tokens, blocks
  // of 4: the full group holds every block of the 51 computed positions; each of the 5 windowed
  // groups holds its window of 8 plus the block being written: 2 or 3 blocks.
  const std::vector<int32_t> p = prompt(1, 40);
  lio::GenerateOptions options;
  options.max_tokens = 12;
  options.ignore_eos = true;
  for (const bool hybrid : {false, true}) {
    SCOPED_TRACE(hybrid ? "hybrid pool" : "one group");
    auto r = runner(hybrid, 64);
    const lio::GenerateResult g = lio::generate(*r, *model_->tokenizer, p, options);
    ASSERT_EQ(g.kv_tokens, 40 + 12 - 1);
    const int64_t full_blocks = (g.kv_tokens + 3) / 4;
    const int64_t block_bytes = r->kv_pool().block_bytes();
    if (!hybrid) {
      EXPECT_EQ(g.kv_bytes_allocated, full_blocks * block_bytes);
      continue;
    }
    EXPECT_GE(g.kv_bytes_allocated, (full_blocks + 5 * 2) * block_bytes);
    EXPECT_LE(g.kv_bytes_allocated, (full_blocks + 5 * 3) * block_bytes);
  }
}

}  // namespace
