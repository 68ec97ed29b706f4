// KV-head variants of a loaded model (chapter 02, common/tools/src/kv_head_variants.cpp): --attention parsing,
// MHA by repeating heads (same function, bit for bit), MQA/GQA by mean-pooling.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "lio/error.h"
#include "lio/kv_head_variants.h"
#include "lio/kv_pool.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "tiny_model.h"

namespace {

using lio::testing::TinyModelSpec;

class GqaVariantTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = lio::testing::make_temp_dir("lio_gqa");
    TinyModelSpec spec;  // 4 query heads, 2 KV heads of 16
    spec.weight_dtype = lio::DType::Q4_1;
    lio::testing::write_tiny_gguf(dir_ + "/m.gguf", spec);
  }
  lio::LoadedModel load() const { return lio::load_model(dir_ + "/m.gguf", lio::WeightMode::AsStored); }

  // Logits of every position of a 40-token prompt (3 blocks of 16: the paged path too).
  static std::vector<float> logits(const lio::LoadedModel& m) {
    auto runner = lio::make_runner(m, lio::Device::Cpu, lio::KvPoolOptions{16, 4});
    lio::SoloSequence seq(*runner, 64);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 40; ++i) tokens.push_back(3 + (i * 37) % 250);
    const std::span<const float> out = seq.forward(tokens, /*all_logits=*/true);
    return {out.begin(), out.end()};
  }
  std::string dir_;
};

TEST_F(GqaVariantTest, ParsesTheVariantNames) {
  const lio::ModelConfig c = load().config;
  EXPECT_EQ(lio::parse_attention_variant("gqa", c), 2);
  EXPECT_EQ(lio::parse_attention_variant("mha", c), 4);
  EXPECT_EQ(lio::parse_attention_variant("mqa", c), 1);
  EXPECT_EQ(lio::parse_attention_variant("gqa:4", c), 4);
  EXPECT_EQ(lio::parse_attention_variant("gqa:1", c), 1);
  for (const char* bad : {"gqa:3", "gqa:0", "gqa:8", "gqa:", "gqa:2x", "gqa:-2", "MHA", "mla", ""}) {
    EXPECT_THROW(lio::parse_attention_variant(bad, c), lio::InvalidArgument) << bad;
  }
}

TEST_F(GqaVariantTest, MhaRepeatsHeadsAndComputesTheSameLogitsBitForBit) {
  const lio::LoadedModel gqa = load();
  lio::LoadedModel mha = load();
  lio::apply_kv_head_variant(mha, 4);
  ASSERT_EQ(mha.config.n_kv_heads, 4);
  EXPECT_EQ(mha.weights.layers[0].matrix(lio::WeightKind::Wk).rows, 4 * 16);
  EXPECT_EQ(mha.weights.layers[0].matrix(lio::WeightKind::Wk).dtype,
            lio::DType::Q4_1);  // copied blocks, not re-quantized
  EXPECT_EQ(lio::kv_block_bytes(mha.config, 16), 2 * lio::kv_block_bytes(gqa.config, 16));
  EXPECT_EQ(logits(mha), logits(gqa));
}

TEST_F(GqaVariantTest, MqaMeanPoolsIntoOneF32Head) {
  const lio::LoadedModel gqa = load();
  lio::LoadedModel mqa = load();
  lio::apply_kv_head_variant(mqa, 1);
  ASSERT_EQ(mqa.config.n_kv_heads, 1);
  const lio::WeightMatrix& wk = mqa.weights.layers[1].matrix(lio::WeightKind::Wk);
  ASSERT_EQ(wk.dtype, lio::DType::F32);
  ASSERT_EQ(wk.rows, 16);
  // Row 3 of the pooled K is the mean of row 3 of stored heads 0 and 1.
  const lio::WeightMatrix& src = gqa.weights.layers[1].matrix(lio::WeightKind::Wk);
  std::vector<float> h0(64), h1(64);
  lio::dequantize_row(src.dtype, src.row(3), h0.data(), 64);
  lio::dequantize_row(src.dtype, src.row(16 + 3), h1.data(), 64);
  const auto* pooled = reinterpret_cast<const float*>(wk.row(3));
  for (int c = 0; c < 64; ++c) EXPECT_FLOAT_EQ(pooled[c], (h0[c] + h1[c]) / 2) << c;
  const std::vector<float> a = logits(mqa), b = logits(gqa);
  ASSERT_EQ(a.size(), b.size());
  for (float x : a) ASSERT_TRUE(std::isfinite(x));
  EXPECT_NE(a, b);  // the function changes: the GQA paper uptrains after pooling, we do not
}

TEST_F(GqaVariantTest, RepeatingAPooledHeadKeepsTheMqaFunction) {
  // MQA, then back to 4 heads (each a copy of the pooled head): the same function again.
  lio::LoadedModel mqa = load();
  lio::apply_kv_head_variant(mqa, 1);
  lio::LoadedModel wide = load();
  lio::apply_kv_head_variant(wide, 1);
  lio::apply_kv_head_variant(wide, 4);
  EXPECT_EQ(logits(wide), logits(mqa));
}

TEST_F(GqaVariantTest, TheStoredCountIsANoOp) {
  lio::LoadedModel m = load();
  const std::byte* before = m.weights.layers[0].matrix(lio::WeightKind::Wk).data;
  lio::apply_kv_head_variant(m, 2);
  EXPECT_EQ(m.weights.layers[0].matrix(lio::WeightKind::Wk).data, before);
  EXPECT_THROW(lio::make_kv_head_variant(m.config, m.weights, 3), lio::InvalidArgument);
}

}  // namespace
