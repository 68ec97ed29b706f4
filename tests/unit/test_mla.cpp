// MLA in the engine (chapter 02): the GQA -> MLA conversion (common/tools/src/mla_conversion.cpp), the CPU
// backend's naive and absorbed paths, the KV pool's latent rows, and the kernels' RoPE.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cpu_ops.h"
#include "lio/engine.h"
#include "lio/error.h"
#include "lio/kv_pool.h"
#include "lio/mla_conversion.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "random_inputs.h"
#include "tiny_model.h"

namespace {

using lio::testing::TinyModelSpec;

class MlaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = lio::testing::make_temp_dir("lio_mla");
    TinyModelSpec spec;  // 4 query heads, 2 KV heads of 16: 8 rotary pairs per head
    spec.rope_theta = 1e12f;  // pair 7 turns by 1e12^(-14/16) rad per token: ~0 over 40 tokens
    spec.weight_dtype = lio::DType::Q8_0;
    lio::testing::write_tiny_gguf(dir_ + "/m.gguf", spec);
  }
  lio::LoadedModel load() const { return lio::load_model(dir_ + "/m.gguf", lio::WeightMode::AsStored); }
  lio::LoadedModel mla(int64_t rank, int64_t pairs, bool absorbed = true) const {
    lio::LoadedModel m = load();
    lio::convert_to_mla(m, {rank, pairs});
    m.config.mla_absorbed = absorbed;
    return m;
  }
  static std::vector<int32_t> prompt() {
    std::vector<int32_t> t;
    for (int i = 0; i < 40; ++i) t.push_back(3 + (i * 37) % 250);
    return t;
  }
  static std::vector<float> logits(const lio::LoadedModel& m) {
    auto runner = lio::make_runner(m, lio::Device::Cpu, lio::KvPoolOptions{16, 4});
    lio::SoloSequence seq(*runner, 64);
    const std::span<const float> out = seq.forward(prompt(), /*all_logits=*/true);
    return {out.begin(), out.end()};
  }
  static double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double d = 0.0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
    return d;
  }
  std::string dir_;
};

TEST_F(MlaTest, FullRankKeepingAllButTheSlowestPairIsTheSameModel) {
  // rank = all rows of [W_k,nope ; W_v]: the SVD is exact, and the one pair that lost its
  // rotation turns by ~1e-10 rad per token, so the logits match the GQA model's.
  const int64_t full = lio::mla_max_rank(load().config, 7);
  EXPECT_EQ(full, 2 * (2 * 16 - 14));
  const lio::LoadedModel m = mla(full, 7);
  EXPECT_EQ(m.config.qk_rope_head_dim, 2 * 14);
  EXPECT_EQ(m.config.qk_nope_head_dim, 2);
  EXPECT_LT(max_abs_diff(logits(m), logits(load())), 2e-3);
}

TEST_F(MlaTest, AbsorbedEqualsNaiveThroughTheEngine) {
  const std::vector<float> absorbed = logits(mla(12, 4, true));
  const std::vector<float> naive = logits(mla(12, 4, false));
  EXPECT_LT(max_abs_diff(absorbed, naive), 1e-3);
}

TEST_F(MlaTest, LowerRankMovesFurtherFromTheModel) {
  const std::vector<float> ref = logits(load());
  const double full = max_abs_diff(logits(mla(lio::mla_max_rank(load().config, 4), 4)), ref);
  const double low = max_abs_diff(logits(mla(4, 4)), ref);
  EXPECT_GT(low, full);
}

TEST_F(MlaTest, ThePoolHoldsOneLatentRowPerToken) {
  const lio::LoadedModel m = mla(20, 4);  // d_c 20 + d_R 2 KV heads x 2 x 4 = 36 floats
  EXPECT_EQ(m.config.kv_dim(), 18);       // half in the K array, half in V
  EXPECT_EQ(m.config.kv_bytes_per_token(4), 2 * 36 * 4);  // 2 layers
  EXPECT_EQ(lio::kv_block_bytes(m.config, 16), 2 * 16 * 36 * 4);
  EXPECT_LT(m.config.kv_bytes_per_token(4), load().config.kv_bytes_per_token(4));  // GQA: 2 x 2 x 32 x 4
}

TEST_F(MlaTest, BatchedEngineMatchesOneSequenceAtATime) {
  // Two prompts sharing nothing, run together through the Engine (paged, batched) and alone:
  // the same greedy tokens, for both compute paths.
  for (bool absorbed : {true, false}) {
    const lio::LoadedModel m = mla(16, 3, absorbed);
    auto runner = lio::make_runner(m, lio::Device::Cpu, lio::KvPoolOptions{16, 4});
    std::vector<std::vector<int32_t>> alone;
    const std::vector<std::vector<int32_t>> prompts = {prompt(), {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21}};
    for (const auto& p : prompts) {
      lio::SoloSequence seq(*runner, 64);
      std::vector<int32_t> ctx = p, out;
      lio::SamplerConfig greedy_config;
      greedy_config.temperature = 0.0f;
      lio::Sampler greedy(greedy_config);
      int32_t t = seq.forward_sample(ctx, greedy, ctx);
      for (int i = 0; i < 6; ++i) {
        out.push_back(t);
        ctx.push_back(t);
        t = seq.forward_sample(std::span<const int32_t>(&out.back(), 1), greedy, ctx);
      }
      alone.push_back(out);
    }
    lio::Engine engine(*runner, *m.tokenizer);
    std::vector<int64_t> ids;
    for (const auto& p : prompts) {
      lio::SamplingParams rp;
      rp.max_tokens = 6;
      rp.ignore_eos = true;
      rp.sampler.temperature = 0.0f;
      ids.push_back(engine.add_request(p, rp));
    }
    std::vector<std::vector<int32_t>> together(2);
    while (engine.has_unfinished())
      for (const lio::RequestOutput& o : engine.step()) {
        for (size_t k = 0; k < ids.size(); ++k)
          if (o.request_id == ids[k]) together[k].insert(together[k].end(), o.new_token_ids.begin(), o.new_token_ids.end());
      }
    EXPECT_EQ(together[0], alone[0]) << (absorbed ? "absorbed" : "naive");
    EXPECT_EQ(together[1], alone[1]) << (absorbed ? "absorbed" : "naive");
  }
}

TEST_F(MlaTest, ConversionRejectsBadSettings) {
  lio::LoadedModel m = load();
  EXPECT_THROW(lio::convert_to_mla(m, {7, 4}), lio::InvalidArgument);    // odd rank
  EXPECT_THROW(lio::convert_to_mla(m, {0, 4}), lio::InvalidArgument);
  EXPECT_THROW(lio::convert_to_mla(m, {1000, 4}), lio::InvalidArgument);  // past the full rank
  EXPECT_THROW(lio::convert_to_mla(m, {8, 0}), lio::InvalidArgument);
  EXPECT_THROW(lio::convert_to_mla(m, {8, 8}), lio::InvalidArgument);     // every pair kept: no latent key
  lio::convert_to_mla(m, {8, 4});
  EXPECT_THROW(lio::convert_to_mla(m, {8, 4}), lio::UnsupportedError);    // already MLA
}

TEST(MlaKernels, RopeFreqsWithTheStandardFrequenciesIsRope) {
  const int64_t dim = 16;
  std::vector<float> a = lio::testing::random_floats(3 * dim, -1, 1, 3), b = a;
  std::vector<float> inv(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) inv[static_cast<size_t>(i)] = std::pow(10000.0f, -2.0f * i / dim);
  const int32_t pos = 37;
  lio::cpu::rope_freqs(a.data(), pos, 3, dim, dim, inv.data());
  lio::cpu::rope(b.data(), &pos, 1, 3, dim, 10000.0f, lio::RopeStyle::Normal);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5f) << i;
}

}  // namespace
