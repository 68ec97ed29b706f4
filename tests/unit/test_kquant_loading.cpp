// Reading GGUF K-quants (Q4_K, Q6_K) and Q5_0 / Q5_1, the mix of llama.cpp's Q4_K_M files: a
// model whose matrices are such blocks loads (kept as stored, decoded inside the matmul kernels) and computes bit for bit what the same
// weights stored as f32 do: the kernels decode each block to exactly dequantize_row's values
// and then run the f32 path's arithmetic.
// The dequantization itself is checked against gguf-py by tests/conformance/check_kquants.py
// and by hand-worked blocks in test_dtype.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lio/dtype.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "tiny_model.h"

namespace {

using lio::DType;

TEST(KQuantLoading, AModelInQ4_KQ6_KQ5_0AndQ5_1RunsBitwiseAsItsF32Copy) {
  const std::string dir = lio::testing::make_temp_dir("lio_kquant_loading");
  lio::testing::TinyModelSpec spec;  // widths that are multiples of 256 (a super-block)
  spec.d_model = 256;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.head_dim = 64;
  spec.d_ff = 512;
  lio::testing::write_tiny_gguf(dir + "/m.gguf", spec);
  ASSERT_EQ(lio::testing::write_read_only_mix(dir + "/m.gguf", dir + "/k.gguf", dir + "/f.gguf"), 6 * spec.n_layers);

  const lio::LoadedModel mk = lio::load_model(dir + "/k.gguf", lio::WeightMode::AsStored);
  EXPECT_EQ(mk.weights.layers[0].matrix(lio::WeightKind::Up).dtype,
            DType::Q4_K);  // kept as stored: 4.5 bits/weight
  EXPECT_EQ(mk.weights.layers[1].matrix(lio::WeightKind::Down).dtype, DType::Q6_K);
  EXPECT_EQ(mk.weights.layers[0].matrix(lio::WeightKind::Wk).dtype, DType::Q5_0);
  EXPECT_EQ(mk.weights.layers[0].matrix(lio::WeightKind::Wv).dtype, DType::Q5_1);
  const lio::LoadedModel mf = lio::load_model(dir + "/f.gguf", lio::WeightMode::AsStored);
  const std::vector<int32_t> prompt = {1, 40, 41, 42, 100, 7, 260, 3};
  std::vector<std::vector<float>> logits;
  for (const lio::LoadedModel* m : {&mk, &mf}) {
    auto runner = lio::make_runner(*m, lio::Device::Cpu, lio::KvPoolOptions{16, 8});
    lio::SoloSequence seq(*runner, 32);
    const std::span<const float> l = seq.forward(prompt, /*all_logits=*/true);
    logits.emplace_back(l.begin(), l.end());
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  for (size_t i = 0; i < logits[0].size(); ++i) ASSERT_EQ(logits[0][i], logits[1][i]) << i;
  // The other weight modes read K-quants too.
  EXPECT_EQ(lio::load_model(dir + "/k.gguf", lio::WeightMode::BF16)
                .weights.layers[0]
                .matrix(lio::WeightKind::Wq)
                .dtype,
            DType::BF16);
}

}  // namespace
