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
#include "tree_drafter_cases.h"

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
  std::unique_ptr<lio::ModelRunner> runner() const { return lio::testing::tree_runner(*model_); }
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
  // The last tree under Medusa's typical acceptance (lossy only when sampling): a greedy row
  // accepts its argmax alone, so greedy output stays plain greedy's on that path too.
  lio::SpeculativeConfig typical = medusa(12, 4);
  typical.acceptance = lio::SpecAcceptance::Typical;
  const auto [accepted, moves] = lio::testing::expect_greedy_trees_equal_plain(
      *model_, {medusa(3, 1), medusa(12, 4), medusa(24, 8), typical});
  // The heads are random, but some drafts must be accepted, some of them off the tree's first
  // chain (their K/V moved), or the test proves nothing about the tree.
  EXPECT_GT(accepted, 0);
  EXPECT_GT(moves, 0);
}

TEST_F(MedusaTest, TreesSurvivePreemptionPrefixCachingAndTheHybridPool) {
  lio::testing::expect_trees_survive_preemption_caches_and_hybrid(
      spec_, *model_, dir_, [&](const TinyModelSpec& s, const lio::LoadedModel& m, const std::string& tag) {
        const std::string heads = dir_ + "/" + tag + "_heads.safetensors";
        write_heads(heads, s, 3, m.config.vocab_size);
        lio::SpeculativeConfig c = medusa(10, 3);
        c.medusa_heads = heads;
        return c;
      });
}

TEST_F(MedusaTest, SeededSampledMedusaReplaysExactly) {
  const lio::SamplingParams p = lio::testing::tree_params(30, 0.8f);
  auto run = [&] {
    lio::EngineConfig cfg;
    cfg.speculative = medusa(10, 4);
    auto r = runner();
    lio::Engine e(*r, *model_->tokenizer, cfg);
    for (int i = 0; i < 3; ++i) e.add_request(lio::testing::tree_prompt(i), p);
    return lio::testing::run_engine(e);
  };
  const auto a = run();
  EXPECT_EQ(a, run());
  for (const auto& [id, toks] : a) EXPECT_EQ(static_cast<int64_t>(toks.size()), 30);
}

}  // namespace
