// Reading GGUF K-quants (Q4_K, Q6_K): a model whose matrices are K-quant blocks loads (kept as
// f32: no K-quant kernels yet) and computes exactly what the same weights stored as f32 do.
// The dequantization itself is checked against gguf-py by tests/conformance/check_kquants.py
// and by hand-worked blocks in test_dtype.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "lio/dtype.h"
#include "lio/gguf.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "tiny_model.h"

namespace {

using lio::DType;

/// Random super-blocks of `t` for a (rows, cols) matrix with small f16 super-scales.
std::vector<std::byte> random_kquant(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> raw(static_cast<size_t>(rows * lio::dtype_row_bytes(t, cols)));
  for (std::byte& b : raw) b = static_cast<std::byte>(rng() & 255);
  const int64_t n_blocks = static_cast<int64_t>(raw.size()) / lio::dtype_info(t).block_bytes;
  for (int64_t i = 0; i < n_blocks; ++i) {
    std::byte* blk = raw.data() + i * lio::dtype_info(t).block_bytes;
    if (t == DType::Q4_K) {
      lio::BlockQ4_K b;
      std::memcpy(&b, blk, sizeof b);
      b.d = lio::f32_to_f16(2e-4f);
      b.dmin = lio::f32_to_f16(1e-4f);
      std::memcpy(blk, &b, sizeof b);
    } else {
      lio::BlockQ6_K b;
      std::memcpy(&b, blk, sizeof b);
      b.d = lio::f32_to_f16(2e-5f);
      std::memcpy(blk, &b, sizeof b);
    }
  }
  return raw;
}

TEST(KQuantLoading, AModelInQ4_KAndQ6_KRunsAsItsF32Copy) {
  const std::string dir = lio::testing::make_temp_dir("lio_kquant_loading");
  lio::testing::TinyModelSpec spec;  // widths that are multiples of 256 (a super-block)
  spec.d_model = 256;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.head_dim = 64;
  spec.d_ff = 512;
  lio::testing::write_tiny_gguf(dir + "/m.gguf", spec);
  const lio::GgufFile in = lio::GgufFile::open(dir + "/m.gguf");
  lio::GgufWriter kq, f32;
  for (const auto& [key, value] : in.metadata()) {
    kq.set(key, value);
    f32.set(key, value);
  }
  uint32_t seed = 1;
  int replaced = 0;
  for (const lio::GgufTensorInfo& t : in.tensors()) {
    const std::span<const std::byte> bytes(t.data, static_cast<size_t>(t.size_bytes));
    const bool q4k = t.name.ends_with("ffn_up.weight") || t.name.ends_with("attn_q.weight");
    const bool q6k = t.name.ends_with("ffn_down.weight") || t.name.ends_with("attn_output.weight");
    if (!q4k && !q6k) {
      kq.add_tensor(t.name, t.dtype, t.shape, bytes);
      f32.add_tensor(t.name, t.dtype, t.shape, bytes);
      continue;
    }
    const DType type = q4k ? DType::Q4_K : DType::Q6_K;
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const std::vector<std::byte> raw = random_kquant(type, rows, cols, seed++);
    kq.add_tensor(t.name, type, t.shape, raw);
    std::vector<float> dense(static_cast<size_t>(rows * cols));
    const int64_t row_bytes = lio::dtype_row_bytes(type, cols);
    for (int64_t r = 0; r < rows; ++r) lio::dequantize_row(type, raw.data() + r * row_bytes, dense.data() + r * cols, cols);
    f32.add_tensor(t.name, DType::F32, t.shape, std::as_bytes(std::span<const float>(dense)));
    ++replaced;
  }
  ASSERT_EQ(replaced, 4 * spec.n_layers);
  kq.write(dir + "/k.gguf");
  f32.write(dir + "/f.gguf");

  const lio::LoadedModel mk = lio::load_model(dir + "/k.gguf", lio::WeightMode::AsStored);
  EXPECT_EQ(mk.weights.layers[0].w_up.dtype, DType::F32);  // read only: kept as f32
  EXPECT_EQ(mk.weights.layers[1].w_down.dtype, DType::F32);
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
  EXPECT_EQ(lio::load_model(dir + "/k.gguf", lio::WeightMode::BF16).weights.layers[0].wq.dtype, DType::BF16);
}

}  // namespace
