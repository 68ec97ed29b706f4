// lio quantize (chapter 03, RTN into llama.cpp's block types): options, mixed precision, the
// written file's contents on a tiny model, and on the real model the claim that the F32
// copy (itself dequantized from the shipped Q4_1 file) re-quantized to Q4_1 gives the shipped
// tensors back bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "lio/dtype.h"
#include "lio/error.h"
#include "lio/gguf.h"
#include "lio/model_loader.h"
#include "lio/quantize.h"
#include "tiny_model.h"

namespace {

using lio::DType;

TEST(Quantize, TargetAndOptions) {
  lio::QuantizeOptions o;
  o.bits = 8;
  EXPECT_EQ(lio::quantize_target(o), DType::Q8_0);
  o.bits = 4;
  EXPECT_EQ(lio::quantize_target(o), DType::Q4_0);
  o.asymmetric = true;
  EXPECT_EQ(lio::quantize_target(o), DType::Q4_1);
  o.bits = 3;  // LIO's packed 3-bit blocks, or llama.cpp's Q4 blocks on request
  EXPECT_EQ(lio::quantize_target(o), DType::Q3_1);
  o.llama_blocks = true;
  EXPECT_EQ(lio::quantize_target(o), DType::Q4_1);
  o.llama_blocks = false;
  o.bits = 2;
  EXPECT_THROW(lio::quantize_target(o), lio::UnsupportedError);
  o.bits = 8;
  EXPECT_THROW(lio::quantize_target(o), lio::UnsupportedError);  // Q8_0 is symmetric
  o = {};
  o.group_size = 128;
  EXPECT_EQ(lio::quantize_target(o), DType::Q4_0);  // the scale repeated in each 32-block
  o.group_size = 48;
  EXPECT_THROW(lio::quantize_target(o), lio::UnsupportedError);
  o = {};
  o.method = "gptq";
  EXPECT_THROW(lio::quantize_target(o), lio::InvalidArgument);  // no --calib
  o.calib_path = "/some/text";
  EXPECT_EQ(lio::quantize_target(o), DType::Q4_0);
  o.damp = 1.5;
  EXPECT_THROW(lio::quantize_target(o), lio::InvalidArgument);
  o = {};
  o.method = "awq";
  o.calib_path = "/some/text";
  o.awq_grid = 0;
  EXPECT_THROW(lio::quantize_target(o), lio::InvalidArgument);
  o.method = "hqq";
  EXPECT_THROW(lio::quantize_target(o), lio::InvalidArgument);
  o = {};
  o.method = "smoothquant";
  o.bits = 8;
  o.group_size = lio::kPerChannel;
  EXPECT_THROW(lio::quantize_target(o), lio::InvalidArgument);  // no --calib
  o.calib_path = "/some/text";
  EXPECT_EQ(lio::quantize_target(o), DType::Q8_0);
  o.smooth_alpha = 1.2;
  EXPECT_THROW(lio::quantize_target(o), lio::InvalidArgument);
}

TEST(Quantize, ParseKeep) {
  const auto k = lio::parse_keep("f32:token_embd,output.;q8_0:blk.0.");
  ASSERT_EQ(k.size(), 3u);
  EXPECT_EQ(k[0], std::make_pair(DType::F32, std::string("token_embd")));
  EXPECT_EQ(k[1], std::make_pair(DType::F32, std::string("output.")));
  EXPECT_EQ(k[2], std::make_pair(DType::Q8_0, std::string("blk.0.")));
  EXPECT_TRUE(lio::parse_keep("").empty());
  EXPECT_THROW(lio::parse_keep("token_embd"), lio::InvalidArgument);
  EXPECT_THROW(lio::parse_keep("q4_k:token_embd"), lio::InvalidArgument);
  EXPECT_THROW(lio::parse_keep("f32:"), lio::InvalidArgument);
}

TEST(Quantize, TinyModelMatricesAreRequantizedAndTheRestCopied) {
  const std::string dir = lio::testing::make_temp_dir("lio_quantize");
  lio::testing::TinyModelSpec spec;  // f32 weights
  lio::testing::write_tiny_gguf(dir + "/m.gguf", spec);
  lio::QuantizeOptions o;
  o.bits = 4;
  o.asymmetric = true;
  o.keep = lio::parse_keep("f16:token_embd");
  int64_t last_done = 0, calls = 0;
  const lio::QuantizeReport r = lio::quantize_gguf(dir + "/m.gguf", dir + "/q.gguf", o, [&](int64_t done, int64_t total) {
    EXPECT_EQ(total, spec.n_layers);
    EXPECT_GE(done, last_done);
    last_done = done;
    ++calls;
  });
  EXPECT_EQ(last_done, spec.n_layers);
  EXPECT_GE(calls, spec.n_layers);
  const lio::GgufFile in = lio::GgufFile::open(dir + "/m.gguf");
  const lio::GgufFile out = lio::GgufFile::open(dir + "/q.gguf");
  EXPECT_EQ(out.get_uint("general.file_type"), 3u);  // LLAMA_FTYPE_MOSTLY_Q4_1
  ASSERT_EQ(out.tensors().size(), in.tensors().size());
  EXPECT_EQ(r.n_tensors, static_cast<int64_t>(in.tensors().size()));
  int64_t n_q41 = 0;
  for (const lio::GgufTensorInfo& t : in.tensors()) {
    const lio::GgufTensorInfo* q = out.find_tensor(t.name);
    ASSERT_NE(q, nullptr) << t.name;
    EXPECT_EQ(q->shape, t.shape) << t.name;
    if (t.shape.size() == 1) {  // norms: copied
      EXPECT_EQ(q->dtype, DType::F32) << t.name;
      EXPECT_EQ(std::memcmp(q->data, t.data, static_cast<size_t>(t.size_bytes)), 0) << t.name;
      continue;
    }
    const DType want = t.name.rfind("token_embd", 0) == 0 ? DType::F16 : DType::Q4_1;
    EXPECT_EQ(q->dtype, want) << t.name;
    n_q41 += want == DType::Q4_1;
    // Each row equals quantize_row of the f32 row.
    const int64_t cols = t.shape.back();
    std::vector<std::byte> expect(static_cast<size_t>(lio::dtype_row_bytes(want, cols)));
    for (int64_t i = 0; i < t.shape[0]; ++i) {
      lio::quantize_row(want, reinterpret_cast<const float*>(t.data) + i * cols, expect.data(), cols);
      ASSERT_EQ(std::memcmp(q->data + i * static_cast<int64_t>(expect.size()), expect.data(), expect.size()), 0)
          << t.name << " row " << i;
    }
  }
  EXPECT_EQ(r.n_quantized, n_q41);
  // The engine loads the result and it is a different model from the input (4 bits lose).
  const lio::LoadedModel m = lio::load_model(dir + "/q.gguf", lio::WeightMode::AsStored);
  EXPECT_EQ(m.config.n_layers, spec.n_layers);
  EXPECT_THROW(lio::quantize_gguf(dir + "/m.gguf", dir + "/m.gguf", o), lio::InvalidArgument);
  EXPECT_THROW(lio::quantize_gguf(dir + "/nope.gguf", dir + "/x.gguf", o), lio::Error);
}

TEST(Quantize, RealF32CopyRequantizedToQ4_1IsTheShippedFile) {
  const std::string root = LIO_SOURCE_DIR;
  const std::string f32 = root + "/models/SmolLM2-135M-Instruct.F32.gguf";
  const std::string shipped = root + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(f32) || !std::filesystem::exists(shipped)) GTEST_SKIP() << "models not fetched";
  const std::string out = lio::testing::make_temp_dir("lio_quantize_real") + "/q41.gguf";
  lio::QuantizeOptions o;
  o.bits = 4;
  o.asymmetric = true;
  o.keep = lio::parse_keep("q8_0:token_embd");  // llama.cpp keeps the tied embedding at Q8_0
  lio::quantize_gguf(f32, out, o);
  const lio::GgufFile a = lio::GgufFile::open(out);
  const lio::GgufFile b = lio::GgufFile::open(shipped);
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const lio::GgufTensorInfo& t : b.tensors()) {
    const lio::GgufTensorInfo* q = a.find_tensor(t.name);
    ASSERT_NE(q, nullptr) << t.name;
    EXPECT_EQ(q->dtype, t.dtype) << t.name;
    ASSERT_EQ(q->size_bytes, t.size_bytes) << t.name;
    EXPECT_EQ(std::memcmp(q->data, t.data, static_cast<size_t>(t.size_bytes)), 0) << t.name << " differs";
  }
  std::filesystem::remove(out);
}

}  // namespace
