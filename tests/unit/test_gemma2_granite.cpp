// The gemma2 and granite families (arch/gemma2.cpp, arch/granite.cpp): what their config readers
// take from a GGUF file and a Hugging Face directory of one tiny model (the same values, the same
// logits), Gemma 2's alternating window, every CPU attention backend giving the same soft-capped
// logits (flash; naive and paged, whose decode rows leave chapter 04's kernel for the naive one
// when scores are capped), a granite file without one of its scales refused, and gemma2 refused
// by the CUDA backend. The layers themselves are checked against llama.cpp in
// tests/conformance/check_families.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "lio/cpu_backend.h"
#include "lio/error.h"
#include "lio/gguf.h"
#include "lio/gguf_writer.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "tiny_model.h"

namespace {

using lio::testing::TinyModelSpec;

/// 30 tokens: past the 8-key window of gemma2's local layers.
std::vector<int32_t> tokens() {
  std::vector<int32_t> t;
  for (int i = 0; i < 30; ++i) t.push_back(static_cast<int32_t>((i * 37 + 5) % 250));
  return t;
}

TinyModelSpec spec_of(const std::string& arch) {
  TinyModelSpec s;
  s.architecture = arch;
  s.n_layers = arch == "gemma2" ? 4 : 2;  // gemma2: local, global, local, global
  s.sliding_window = 8;
  return s;
}

/// Every row's logits, the tokens fed `chunk` at a time (0: one prefill) to a CpuBackend running
/// `attention`'s kernels.
std::vector<float> logits(const lio::LoadedModel& m, const std::vector<int32_t>& t, size_t chunk = 0,
                          lio::AttentionBackend attention = lio::AttentionBackend::Flash) {
  lio::ModelRunner runner(std::make_unique<lio::CpuBackend>(m.config, m.weights, lio::cpu::MatmulActivations::F32,
                                                            attention),
                          lio::KvPoolConfig{4, 16});
  lio::SoloSequence seq(runner, static_cast<int64_t>(t.size()));
  std::vector<float> out;
  if (chunk == 0) chunk = t.size();
  for (size_t i = 0; i < t.size(); i += chunk) {
    const std::vector<int32_t> part(t.begin() + static_cast<std::ptrdiff_t>(i),
                                    t.begin() + static_cast<std::ptrdiff_t>(std::min(t.size(), i + chunk)));
    const std::span<const float> rows = seq.forward(part, true);
    out.insert(out.end(), rows.begin(), rows.end());
  }
  return out;
}

class Gemma2GraniteTest : public ::testing::Test {
 protected:
  std::string dir_ = lio::testing::make_temp_dir("lio_test_gemma2_granite");
};

// The GGUF keys (gemma2.attn_logit_softcapping, granite.residual_scale, ...) and the config.json
// keys (attn_logit_softcapping, residual_multiplier, ...) of one spec give one config and, with
// the HF form's unpermuted Q/K and Gemma's w-stored norms, the same logits.
TEST_F(Gemma2GraniteTest, GgufAndHfFormsGiveOneConfigAndTheSameLogits) {
  for (const std::string arch : {"gemma2", "granite"}) {
    const TinyModelSpec spec = spec_of(arch);
    lio::testing::write_tiny_gguf(dir_ + "/" + arch + ".gguf", spec);
    const lio::LoadedModel a = lio::load_model(dir_ + "/" + arch + ".gguf", lio::WeightMode::AsStored);
    lio::testing::write_tiny_hf_dir(dir_ + "/" + arch + "_hf", spec);
    const lio::LoadedModel b = lio::load_model(dir_ + "/" + arch + "_hf", lio::WeightMode::AsStored);
    for (const lio::ModelConfig* c : {&a.config, &b.config}) {
      EXPECT_EQ(c->architecture, arch);
      if (arch == "gemma2") {
        EXPECT_EQ(c->attn_softcap, spec.attn_softcap);
        EXPECT_EQ(c->final_softcap, spec.final_softcap);
        EXPECT_EQ(c->sliding_window, spec.sliding_window);
        EXPECT_EQ(c->sliding_window_pattern, 2);
        EXPECT_FLOAT_EQ(c->embedding_scale, std::sqrt(static_cast<float>(spec.d_model)));
        EXPECT_FLOAT_EQ(c->softmax_scale(), 1.0f / std::sqrt(static_cast<float>(spec.head_dim)));
      } else {
        EXPECT_EQ(c->embedding_scale, spec.embedding_scale);
        EXPECT_EQ(c->residual_scale, spec.residual_scale);
        EXPECT_EQ(c->softmax_scale(), spec.attention_scale);
        EXPECT_EQ(c->logit_scale, spec.logit_scale);
        EXPECT_EQ(c->sliding_window, 0);
      }
    }
    EXPECT_EQ(a.config.rope_style, arch == "granite" ? lio::RopeStyle::Normal : lio::RopeStyle::Neox);
    const std::vector<float> x = logits(a, tokens()), y = logits(b, tokens());
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-4) << arch << " at " << i;
    if (arch == "gemma2") {  // the final soft-cap bounds every logit
      for (const float z : x) ASSERT_LT(std::fabs(z), spec.final_softcap);
    }
  }
}

// llama.cpp's set_swa_pattern(2): layer l is windowed unless l % 2 == 1; one RoPE base.
TEST_F(Gemma2GraniteTest, Gemma2WindowsEveryOtherLayerStartingWithTheFirst) {
  const std::string path = dir_ + "/gemma2.gguf";
  lio::testing::write_tiny_gguf(path, spec_of("gemma2"));
  const lio::LoadedModel m = lio::load_model(path, lio::WeightMode::AsStored);
  for (int64_t l = 0; l < 4; ++l) {
    EXPECT_EQ(m.config.layer_window(l), l % 2 == 0 ? 8 : 0) << "layer " << l;
    EXPECT_EQ(m.config.layer_rope_theta(l), m.config.rope_theta) << "layer " << l;
  }
}

// Soft-capped scores in every CPU attention backend: flash, naive and paged give the logits of
// one flash prefill whether the tokens come at once, in chunks of 7 or one at a time (decode
// rows: the path chapter 04's kernel takes without a cap).
TEST_F(Gemma2GraniteTest, EveryCpuAttentionBackendGivesTheSameSoftCappedLogits) {
  const std::string path = dir_ + "/gemma2.gguf";
  lio::testing::write_tiny_gguf(path, spec_of("gemma2"));
  const lio::LoadedModel m = lio::load_model(path, lio::WeightMode::AsStored);
  const std::vector<float> want = logits(m, tokens());
  for (const lio::AttentionBackend backend :
       {lio::AttentionBackend::Flash, lio::AttentionBackend::Naive, lio::AttentionBackend::Paged}) {
    for (const size_t chunk : {size_t{0}, size_t{7}, size_t{1}}) {
      const std::vector<float> got = logits(m, tokens(), chunk, backend);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-4) << lio::attention_backend_name(backend) << " chunk " << chunk << " at " << i;
    }
  }
}

// The CUDA attention kernels do not cap their scores: a gemma2 model on --device cuda is refused
// when the backend is made (before any GPU work, so also on a machine without one), never run
// with uncapped attention. (A build without CUDA refuses every model, naming that instead.)
TEST_F(Gemma2GraniteTest, CudaRefusesAttentionSoftCapping) {
  const std::string path = dir_ + "/gemma2.gguf";
  lio::testing::write_tiny_gguf(path, spec_of("gemma2"));
  const lio::LoadedModel m = lio::load_model(path, lio::WeightMode::AsStored);
  try {
    lio::make_backend(m, lio::Device::Cuda);
    FAIL() << "a CUDA backend ran gemma2's soft-capped attention";
  } catch (const lio::UnsupportedError& e) {
    const std::string what = e.what();
    if (what.find("no CUDA support") == std::string::npos) {
      EXPECT_NE(what.find("soft-capping"), std::string::npos) << what;
    }
  }
}

// Each of granite's four scales is required (as llama.cpp reads them): a file without
// granite.residual_scale is a FormatError naming the key, not a llama forward.
TEST_F(Gemma2GraniteTest, GraniteWithoutAScaleIsRefused) {
  const std::string path = dir_ + "/granite.gguf", broken = dir_ + "/granite_no_residual.gguf";
  lio::testing::write_tiny_gguf(path, spec_of("granite"));
  const lio::GgufFile src = lio::GgufFile::open(path);
  lio::GgufWriter w;
  for (const auto& [k, v] : src.metadata())
    if (k != "granite.residual_scale") w.set(k, v);
  for (const auto& t : src.tensors())
    w.add_tensor(t.name, t.dtype, t.shape, std::span<const std::byte>(t.data, static_cast<size_t>(t.size_bytes)));
  w.write(broken);
  try {
    lio::load_model(broken, lio::WeightMode::AsStored);
    FAIL() << "loaded a granite file without granite.residual_scale";
  } catch (const lio::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("granite.residual_scale"), std::string::npos) << e.what();
  }
}

}  // namespace
