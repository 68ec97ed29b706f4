// Medusa heads in the batched engine (chapter 06, section 7; issue 63) on tiny random-weight
// models: the best-first tree, the heads file's checks, and the engine's draft trees verified in
// one pass (tree mask, Task 6's rule, the accepted path's K/V moved): greedy Medusa gives plain
// greedy's tokens alone and in a batch, with every KV block back in the pool afterwards; a seeded
// sampled run replays exactly.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <vector>

#include "lio/cpu_backend.h"
#include "lio/engine.h"
#include "lio/error.h"
#include "lio/medusa.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "lio/safetensors.h"
#include "random_inputs.h"
#include "tiny_model.h"

namespace {
using lio::testing::TinyModelSpec;

TEST(BestFirstTree, GrowsTheBestNodesWithParentsFirst) {
  std::vector<lio::MedusaCandidates> c(2);
  c[0] = {{5, 6}, {-0.1f, -2.5f}};
  c[1] = {{7, 8}, {-0.2f, -1.0f}};
  // Scores: 5 -0.1, 5>7 -0.3, 5>8 -1.1, 6 -2.5, 6>7 -2.7, 6>8 -3.5.
  lio::DraftProposal t = lio::best_first_tree(c, 4);
  EXPECT_EQ(t.tokens, (std::vector<int32_t>{5, 7, 8, 6}));
  EXPECT_EQ(t.parents, (std::vector<int32_t>{-1, 0, 1, 1, 0}));
  t = lio::best_first_tree(c, 100);  // every node of the product tree, no more
  EXPECT_EQ(t.tokens.size(), 6u);
  EXPECT_EQ(t.parents.size(), 7u);
  for (size_t i = 1; i < t.parents.size(); ++i) EXPECT_LT(t.parents[i], static_cast<int32_t>(i));
  EXPECT_TRUE(lio::best_first_tree(c, 0).tokens.empty());
  EXPECT_TRUE(lio::best_first_tree(c, 0).parents.empty());
  EXPECT_THROW(lio::best_first_tree(c, -1), lio::InvalidArgument);
}

TinyModelSpec spec() {
  TinyModelSpec s;
  s.n_layers = 2;
  s.weight_dtype = lio::DType::Q4_1;
  s.embd_dtype = lio::DType::Q8_0;
  s.context_length = 512;
  s.seed = 11;
  s.init_std = 0.2f;
  return s;
}

/// A heads file for `s`: K heads with small random W_k, over the whole vocabulary (`every` ids)
/// or its first `n_vocab`, the LM head rows the tiny model's own (pre-quantization) embedding.
void write_heads(const std::string& path, const TinyModelSpec& s, int64_t n_heads, int64_t n_vocab,
                 int64_t d_model_override = 0, bool drop_bias = false) {
  const lio::testing::TinyModelTensors tensors = lio::testing::make_tiny_tensors(s);
  const std::vector<float>& embed = tensors.get("model.embed_tokens.weight");
  const int64_t d = d_model_override > 0 ? d_model_override : s.d_model;
  lio::SafetensorsWriter w;
  std::vector<int32_t> vocab(static_cast<size_t>(n_vocab));
  std::vector<float> lm(static_cast<size_t>(n_vocab * d));
  for (int64_t v = 0; v < n_vocab; ++v) {
    vocab[static_cast<size_t>(v)] = static_cast<int32_t>(v);
    for (int64_t j = 0; j < d; ++j) lm[static_cast<size_t>(v * d + j)] = embed[static_cast<size_t>(v * s.d_model + j % s.d_model)];
  }
  w.add_tensor_i32("medusa.vocab", {n_vocab}, vocab);
  w.add_tensor_f32("medusa.lm_head", lio::DType::F32, {n_vocab, d}, lm);
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 0.05f);
  for (int64_t k = 0; k < n_heads; ++k) {
    std::vector<float> wk(static_cast<size_t>(d * d)), bk(static_cast<size_t>(d));
    for (float& x : wk) x = g(rng);
    for (float& x : bk) x = g(rng);
    w.add_tensor_f32("medusa." + std::to_string(k) + ".weight", lio::DType::F32, {d, d}, wk);
    if (!drop_bias) w.add_tensor_f32("medusa." + std::to_string(k) + ".bias", lio::DType::F32, {d}, bk);
  }
  w.write(path);
}

class MedusaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lio::testing::write_tiny_gguf(dir_ + "/m.gguf", spec_);
    model_ = std::make_unique<lio::LoadedModel>(lio::load_model(dir_ + "/m.gguf", lio::WeightMode::AsStored));
    write_heads(dir_ + "/heads.safetensors", spec_, 3, model_->config.vocab_size);
  }
  std::unique_ptr<lio::ModelRunner> runner(int64_t n_blocks = 512) const {
    return std::make_unique<lio::ModelRunner>(std::make_unique<lio::CpuBackend>(model_->config, model_->weights),
                                              lio::KvPoolConfig{4, n_blocks});
  }
  static std::vector<int32_t> prompt(int i) {
    return lio::testing::random_token_ids(static_cast<size_t>(5 + 3 * i), static_cast<uint32_t>(40 + i));
  }
  /// max_tokens new tokens, EOS ignored; greedy, or sampled at `temperature` (top-k 20, seeded).
  static lio::SamplingParams params(int64_t max_tokens, float temperature = 0.0f) {
    lio::SamplingParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.sampler.temperature = temperature;
    if (temperature > 0) {
      p.sampler.top_k = 20;
      p.sampler.seed = 99;
    }
    return p;
  }
  static std::map<int64_t, std::vector<int32_t>> run_all(lio::Engine& engine) {
    std::map<int64_t, std::vector<int32_t>> out;
    for (int guard = 0; engine.has_unfinished() && guard < 100000; ++guard)
      for (const lio::RequestOutput& o : engine.step())
        out[o.request_id].insert(out[o.request_id].end(), o.new_token_ids.begin(), o.new_token_ids.end());
    EXPECT_FALSE(engine.has_unfinished());
    return out;
  }
  lio::SpeculativeConfig medusa(int64_t nodes, int64_t top_k) const {
    lio::SpeculativeConfig c;
    c.method = lio::SpecMethod::Medusa;
    c.num_speculative_tokens = nodes;
    c.medusa_heads = dir_ + "/heads.safetensors";
    c.medusa_top_k = top_k;
    return c;
  }

  TinyModelSpec spec_ = spec();
  std::string dir_ = lio::testing::make_temp_dir("lio_test_medusa");
  std::unique_ptr<lio::LoadedModel> model_;
};

TEST_F(MedusaTest, HeadsFileIsCheckedAgainstTheModel) {
  const int64_t d = spec_.d_model, vocab = model_->config.vocab_size;
  const lio::MedusaHeads h = lio::MedusaHeads::load(dir_ + "/heads.safetensors", d, vocab);
  EXPECT_EQ(h.n_heads, 3);
  EXPECT_EQ(h.d_model, d);
  EXPECT_EQ(static_cast<int64_t>(h.vocab.size()), vocab);
  EXPECT_THROW(lio::MedusaHeads::load(dir_ + "/missing.safetensors", d, vocab), lio::InvalidArgument);
  EXPECT_THROW(lio::MedusaHeads::load(dir_ + "/heads.safetensors", d + 8, vocab), lio::InvalidArgument);
  EXPECT_THROW(lio::MedusaHeads::load(dir_ + "/heads.safetensors", d, 10), lio::FormatError);  // ids past 10
  write_heads(dir_ + "/nobias.safetensors", spec_, 2, 50, 0, /*drop_bias=*/true);
  EXPECT_THROW(lio::MedusaHeads::load(dir_ + "/nobias.safetensors", d, vocab), lio::FormatError);
  lio::EngineConfig cfg;
  cfg.speculative = medusa(4, 2);
  cfg.speculative.medusa_heads.clear();
  auto r = runner();
  EXPECT_THROW(lio::Engine(*r, *model_->tokenizer, cfg), lio::InvalidArgument);  // no heads file
}

TEST_F(MedusaTest, GreedyMedusaGivesPlainGreedyTokensAloneAndInABatch) {
  constexpr int kN = 6;
  constexpr int64_t kGen = 40;
  const lio::SamplingParams p = params(kGen);
  lio::EngineConfig plain_cfg;
  plain_cfg.scheduler.max_num_batched_tokens = 32;
  auto r0 = runner();
  lio::Engine plain(*r0, *model_->tokenizer, plain_cfg);
  for (int i = 0; i < kN; ++i) plain.add_request(prompt(i), p);
  const auto want = run_all(plain);

  int64_t accepted = 0, moves = 0;
  for (const int64_t max_seqs : {1, kN}) {
    for (const auto& [nodes, top_k] : {std::pair<int64_t, int64_t>{3, 1}, {12, 4}, {24, 8}}) {
      SCOPED_TRACE("max_num_seqs " + std::to_string(max_seqs) + ", " + std::to_string(nodes) + " nodes, top-k " +
                   std::to_string(top_k));
      lio::EngineConfig cfg = plain_cfg;
      cfg.scheduler.max_num_seqs = max_seqs;
      cfg.speculative = medusa(nodes, top_k);
      auto r = runner();
      lio::Engine e(*r, *model_->tokenizer, cfg);
      for (int i = 0; i < kN; ++i) e.add_request(prompt(i), p);
      EXPECT_EQ(run_all(e), want);
      EXPECT_EQ(e.n_free_blocks(), r->kv_pool().n_blocks());  // every tree's blocks back
      const lio::SpecDecodeStats& s = e.speculative_decoder()->stats();
      EXPECT_GT(s.num_drafts, 0);
      accepted += s.num_accepted_tokens;
      moves += s.num_kv_slot_moves;
    }
  }
  // The heads are random, but some drafts must be accepted, some of them off the tree's first
  // chain (their K/V moved), or the test proves nothing about the tree.
  EXPECT_GT(accepted, 0);
  EXPECT_GT(moves, 0);
}

TEST_F(MedusaTest, TreesSurvivePreemptionPrefixCachingAndTheHybridPool) {
  // A pool too small for the batch (preemption by recompute or by swap), the hash or radix prefix
  // cache over prompts sharing a prefix, and a gemma3 model whose windowed layers keep their own
  // KV cache group: greedy Medusa must give each configuration's plain tokens, and end with no
  // block held but by the prefix cache (and the hybrid pool's null block).
  TinyModelSpec gemma = spec_;
  gemma.architecture = "gemma3";
  gemma.n_layers = 6;  // five windowed layers, then a global one: a hybrid pool
  gemma.sliding_window = 8;
  lio::testing::write_tiny_gguf(dir_ + "/g.gguf", gemma);
  const lio::LoadedModel g = lio::load_model(dir_ + "/g.gguf", lio::WeightMode::AsStored);
  write_heads(dir_ + "/g_heads.safetensors", gemma, 3, g.config.vocab_size);
  struct Case {
    const char* name;
    const lio::LoadedModel* model;
    std::string heads;
    bool hybrid;
    int64_t n_blocks;  ///< tight: some sequence must be preempted
    lio::PreemptionMode preemption;
    lio::PrefixCacheMode cache;
  };
  const Case cases[] = {
      {"llama, recompute, hash cache", model_.get(), dir_ + "/heads.safetensors", false, 36,
       lio::PreemptionMode::Recompute, lio::PrefixCacheMode::Hash},
      {"llama, swap, radix cache", model_.get(), dir_ + "/heads.safetensors", false, 36, lio::PreemptionMode::Swap,
       lio::PrefixCacheMode::Radix},
      {"gemma3 hybrid pool, recompute, hash cache", &g, dir_ + "/g_heads.safetensors", true, 60,
       lio::PreemptionMode::Recompute, lio::PrefixCacheMode::Hash},
  };
  const std::vector<int32_t> shared = lio::testing::random_token_ids(13, 7);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto serve = [&](bool medusa, lio::EngineStats& stats, int64_t& held) {
      auto r = std::make_unique<lio::ModelRunner>(std::make_unique<lio::CpuBackend>(c.model->config, c.model->weights),
                                                  lio::KvPoolConfig{4, c.n_blocks, lio::KvCacheDType::F32, c.hybrid});
      lio::EngineConfig cfg;
      cfg.scheduler.max_num_batched_tokens = 32;
      cfg.scheduler.preemption = c.preemption;
      cfg.swap_space_mib = 4;
      cfg.prefix_cache = c.cache;
      if (medusa) {
        cfg.speculative = this->medusa(10, 3);
        cfg.speculative.medusa_heads = c.heads;
      }
      EXPECT_EQ(r->kv_pool().n_groups() > 1, c.hybrid);
      lio::Engine e(*r, *c.model->tokenizer, cfg);
      std::map<int64_t, std::vector<int32_t>> out;
      for (int wave = 0; wave < 3; ++wave) {
        for (int i = 0; i < 5; ++i) {
          std::vector<int32_t> p = shared;
          const std::vector<int32_t> own = prompt(i + wave);
          p.insert(p.end(), own.begin(), own.end());
          e.add_request(p, params(36));
        }
        auto o = run_all(e);
        out.insert(o.begin(), o.end());
      }
      stats = e.stats();
      const lio::EngineSnapshot snap = e.snapshot();
      held = snap.n_used_blocks - snap.n_evictable_blocks;  // blocks some sequence still holds
      return out;
    };
    lio::EngineStats plain_stats, medusa_stats;
    int64_t plain_held = -1, medusa_held = -1;
    const auto want = serve(false, plain_stats, plain_held);
    EXPECT_EQ(serve(true, medusa_stats, medusa_held), want);
    // Held at the end by no sequence: none, or the hybrid pool's null block.
    EXPECT_LE(plain_held, c.hybrid ? 1 : 0);
    EXPECT_EQ(medusa_held, plain_held) << "a tree's block leaked";
    EXPECT_GT(medusa_stats.n_preemptions, 0) << "the pool was meant to run out";
    EXPECT_GT(medusa_stats.spec_num_drafts, 50);
    EXPECT_GT(medusa_stats.spec_num_accepted_tokens, 0);
  }
}

TEST_F(MedusaTest, SeededSampledMedusaReplaysExactly) {
  const lio::SamplingParams p = params(30, 0.8f);
  auto run = [&] {
    lio::EngineConfig cfg;
    cfg.speculative = medusa(10, 4);
    auto r = runner();
    lio::Engine e(*r, *model_->tokenizer, cfg);
    for (int i = 0; i < 3; ++i) e.add_request(prompt(i), p);
    return run_all(e);
  };
  const auto a = run();
  EXPECT_EQ(a, run());
  for (const auto& [id, toks] : a) EXPECT_EQ(static_cast<int64_t>(toks.size()), 30);
}

}  // namespace
