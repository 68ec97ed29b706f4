// The decoder families (lio/architecture.h): the registry, what each family's loader binds and
// refuses, and each family's GGUF and Hugging Face forms of one model giving the same logits
// (GGUF and HF name the biases and QK-norm weights differently). The layers themselves are
// checked against llama.cpp in tests/conformance/check_families.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "lio/architecture.h"
#include "lio/cpu_backend.h"
#include "lio/error.h"
#include "lio/gguf.h"
#include "lio/gguf_writer.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "tiny_model.h"

namespace {

using lio::testing::TinyModelSpec;

const std::vector<int32_t> kTokens = {5, 17, 200, 3, 99, 140, 7, 250, 33, 61, 12, 180};

std::vector<float> all_logits(const lio::LoadedModel& m, const std::vector<int32_t>& tokens) {
  lio::ModelRunner runner(std::make_unique<lio::CpuBackend>(m.config, m.weights), lio::KvPoolConfig{4, 16});
  lio::SoloSequence seq(runner, static_cast<int64_t>(tokens.size()));
  const std::span<const float> out = seq.forward(tokens, true);
  return {out.begin(), out.end()};
}

TinyModelSpec family(const std::string& arch) {
  TinyModelSpec s;
  s.architecture = arch;
  s.tied_embeddings = arch != "qwen2";
  return s;
}

class ArchitectureTest : public ::testing::Test {
 protected:
  std::string dir_ = lio::testing::make_temp_dir("lio_test_architecture");
};

TEST(Architectures, RegistryNamesEveryFamilyOnce) {
  EXPECT_EQ(lio::architecture_names(), "llama, qwen2, qwen3, gemma2, gemma3, granite");
  for (const lio::Architecture* a : lio::architectures()) {
    EXPECT_EQ(&lio::find_architecture(a->name, "x"), a);
    EXPECT_NE(a->layer, nullptr) << a->name;
    EXPECT_FALSE(a->summary.empty()) << a->name;
  }
  EXPECT_EQ(lio::find_architecture("llama", "x").rope_style, lio::RopeStyle::Normal);
  const auto has = [](std::string_view family, lio::WeightKind kind) {
    for (const lio::TensorSpec& t : lio::find_architecture(family, "x").tensors)
      if (t.kind == kind) return true;
    return false;
  };
  EXPECT_TRUE(has("qwen2", lio::WeightKind::BiasQ));
  EXPECT_FALSE(has("llama", lio::WeightKind::BiasQ));
  EXPECT_TRUE(has("qwen3", lio::WeightKind::QNorm));
  EXPECT_TRUE(has("gemma3", lio::WeightKind::PostFfnNorm));
}

// Every family's table names each kind once, a matrix with two dimensions and a vector with
// one, and a GGUF name; the llama rows every family shares are there.
TEST(Architectures, TablesAreWellFormed) {
  for (const lio::Architecture* a : lio::architectures()) {
    std::set<lio::WeightKind> seen;
    for (const lio::TensorSpec& t : a->tensors) {
      EXPECT_TRUE(seen.insert(t.kind).second)
          << a->name << ": " << lio::weight_kind_name(t.kind) << " twice";
      EXPECT_EQ(t.cols != lio::Dim::None, lio::is_matrix(t.kind)) << a->name << ": " << t.gguf;
      EXPECT_FALSE(t.gguf.empty()) << a->name;
      EXPECT_FALSE(t.hf.empty()) << a->name << ": " << t.gguf;
    }
    for (lio::WeightKind k : {lio::WeightKind::AttnNorm, lio::WeightKind::Wq, lio::WeightKind::Wo,
                              lio::WeightKind::FfnNorm, lio::WeightKind::Down})
      EXPECT_TRUE(seen.count(k)) << a->name << " lacks " << lio::weight_kind_name(k);
  }
}

TEST(Architectures, UnknownFamilyNamesTheOnesThatRun) {
  try {
    lio::find_architecture("mamba", "m.gguf");
    FAIL() << "mamba accepted";
  } catch (const lio::UnsupportedError& e) {
    EXPECT_EQ(std::string(e.what()),
              "m.gguf: architecture 'mamba' is not supported (supported: llama, qwen2, qwen3, gemma2, gemma3, granite)");
  }
}

// Each family's file loads with its extras bound, NEOX RoPE for the Qwens, and the same weights
// written as a Hugging Face directory (unpermuted, rotate-half RoPE, HF's tensor names for the
// biases and QK-norm; gemma3: model_type gemma3_text, its own norm names, norms stored as w for
// x_hat * (1 + w), the window and pattern from layer_types) give the same logits.
TEST_F(ArchitectureTest, GgufAndHfFormsOfEachFamilyAgree) {
  for (const std::string arch : {"llama", "qwen2", "qwen3", "gemma3"}) {
    const TinyModelSpec spec = family(arch);
    const std::string gguf = dir_ + "/" + arch + ".gguf", hf = dir_ + "/" + arch + "_hf";
    lio::testing::write_tiny_gguf(gguf, spec);
    lio::testing::write_tiny_hf_dir(hf, spec);
    const lio::LoadedModel a = lio::load_model(gguf, lio::WeightMode::AsStored);
    const lio::LoadedModel b = lio::load_model(hf, lio::WeightMode::AsStored);
    EXPECT_EQ(a.config.architecture, arch);
    EXPECT_EQ(b.config.architecture, arch);
    EXPECT_EQ(a.config.rope_style, arch == "llama" ? lio::RopeStyle::Normal : lio::RopeStyle::Neox) << arch;
    const lio::LayerWeights& L = a.weights.layers[1];
    EXPECT_EQ(L.vec(lio::WeightKind::BiasQ).size(),
              arch == "qwen2" ? size_t(spec.n_heads * spec.head_dim) : 0u)
        << arch;
    EXPECT_EQ(L.vec(lio::WeightKind::BiasV).size(),
              arch == "qwen2" ? size_t(spec.n_kv_heads * spec.head_dim) : 0u)
        << arch;
    EXPECT_EQ(L.vec(lio::WeightKind::KNorm).size(),
              arch == "qwen3" || arch == "gemma3" ? size_t(spec.head_dim) : 0u)
        << arch;
    for (size_t k = 0; k < lio::kWeightKindCount; ++k) {  // every vector the table bound, in both forms
      const std::vector<float>& va = L.vectors[k];
      const std::vector<float>& vb = b.weights.layers[1].vectors[k];
      const std::string_view kind = lio::weight_kind_name(static_cast<lio::WeightKind>(k));
      ASSERT_EQ(vb.size(), va.size()) << arch << " " << kind;
      for (size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(vb[i], va[i], 1e-6) << arch << " " << kind;
    }
    EXPECT_EQ(b.config.sliding_window, a.config.sliding_window) << arch;
    EXPECT_EQ(b.config.sliding_window_pattern, a.config.sliding_window_pattern) << arch;
    EXPECT_EQ(b.config.rope_theta_local, a.config.rope_theta_local) << arch;
    EXPECT_EQ(b.config.embedding_scale, a.config.embedding_scale) << arch;
    EXPECT_EQ(b.config.ffn_activation, a.config.ffn_activation) << arch;
    EXPECT_FLOAT_EQ(b.config.softmax_scale(), a.config.softmax_scale()) << arch;
    const std::vector<float> x = all_logits(a, kTokens), y = all_logits(b, kTokens);
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-4) << arch << " at " << i;
  }
}

// What the gemma3 HF reader refuses instead of running something else: the vision-language
// wrapper (model_type gemma3, text_config inside), global layers off the pattern, logit
// soft-capping, another activation. Each is an UnsupportedError naming the file.
TEST_F(ArchitectureTest, Gemma3HfConfigRefusesWhatItDoesNotRun) {
  const std::string hf = dir_ + "/gemma3_hf_bad";
  lio::testing::write_tiny_hf_dir(hf, family("gemma3"));
  const std::string path = hf + "/config.json";
  nlohmann::json good;
  std::ifstream(path) >> good;
  const auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& want) {
    nlohmann::json j = good;
    edit(j);
    std::ofstream(path) << j.dump();
    try {
      lio::load_model(hf, lio::WeightMode::AsStored);
      ADD_FAILURE() << "accepted: " << want;
    } catch (const lio::UnsupportedError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    }
  };
  refused([](nlohmann::json& j) { j["model_type"] = "gemma3"; }, "gemma3_text");
  refused([](nlohmann::json& j) { j["text_config"] = nlohmann::json::object(); }, "multimodal");
  refused([](nlohmann::json& j) { j["layer_types"][0] = "full_attention"; }, "layer_types[");
  refused([](nlohmann::json& j) { j["final_logit_softcapping"] = 30.0; }, "soft-capping");
  refused([](nlohmann::json& j) { j["hidden_activation"] = "silu"; }, "hidden_activation");
  std::ofstream(path) << good.dump();
  EXPECT_NO_THROW(lio::load_model(hf, lio::WeightMode::AsStored));
}

// The extras change the output: the same matrices without qwen2's biases or qwen3's QK-norm
// (the file relabelled llama and its extra tensors dropped) give other logits. Guards against a
// family whose extras are bound but never applied.
TEST_F(ArchitectureTest, FamilyExtrasChangeTheLogits) {
  for (const std::string arch : {"qwen2", "qwen3"}) {
    const std::string path = dir_ + "/" + arch + ".gguf", plain = dir_ + "/" + arch + "_as_llama.gguf";
    lio::testing::write_tiny_gguf(path, family(arch));
    const lio::GgufFile src = lio::GgufFile::open(path);
    lio::GgufWriter w;
    for (const auto& [k, v] : src.metadata()) {
      const std::string prefix = arch + ".";
      w.set(k.rfind(prefix, 0) == 0 ? "llama." + k.substr(prefix.size()) : k, v);
    }
    w.set("general.architecture", lio::GgufValue::str("llama"));
    for (const auto& t : src.tensors()) {
      const bool extra = t.name.find(".bias") != std::string::npos || t.name.find("attn_q_norm") != std::string::npos ||
                         t.name.find("attn_k_norm") != std::string::npos;
      if (extra) continue;
      w.add_tensor(t.name, t.dtype, t.shape, std::span<const std::byte>(t.data, static_cast<size_t>(t.size_bytes)));
    }
    w.write(plain);
    lio::LoadedModel with = lio::load_model(path, lio::WeightMode::AsStored);
    lio::LoadedModel without = lio::load_model(plain, lio::WeightMode::AsStored);
    without.config.rope_style = lio::RopeStyle::Neox;  // only the extras differ
    const std::vector<float> x = all_logits(with, kTokens), y = all_logits(without, kTokens);
    double max_diff = 0;
    for (size_t i = 0; i < x.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(x[i]) - y[i]));
    EXPECT_GT(max_diff, 1e-2) << arch << ": the family's extras made no difference";
  }
}

// gemma3's windowed layers (window 8, texts of 30 tokens) give the same logits however the
// tokens arrive: one prefill, chunks of 7, or one token at a time (each row's window is cut from
// its own position, whatever else is in the pass).
TEST_F(ArchitectureTest, Gemma3WindowedLogitsDoNotDependOnChunking) {
  TinyModelSpec spec = family("gemma3");
  spec.n_layers = 6;
  spec.sliding_window = 8;
  const std::string path = dir_ + "/gemma3.gguf";
  lio::testing::write_tiny_gguf(path, spec);
  const lio::LoadedModel m = lio::load_model(path, lio::WeightMode::AsStored);
  EXPECT_EQ(m.config.layer_window(0), 8);
  EXPECT_EQ(m.config.layer_window(5), 0);  // every sixth layer is global
  EXPECT_EQ(m.config.layer_rope_theta(0), 10000.0f);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 30; ++i) tokens.push_back(static_cast<int32_t>((i * 37 + 5) % 250));
  const std::vector<float> whole = all_logits(m, tokens);
  const int64_t vocab = m.config.vocab_size;
  for (const int64_t chunk : {7, 1}) {
    lio::ModelRunner runner(std::make_unique<lio::CpuBackend>(m.config, m.weights), lio::KvPoolConfig{4, 16});
    lio::SoloSequence seq(runner, static_cast<int64_t>(tokens.size()));
    std::vector<float> got;
    for (size_t i = 0; i < tokens.size(); i += static_cast<size_t>(chunk)) {
      const std::vector<int32_t> part(tokens.begin() + i, tokens.begin() + std::min(tokens.size(), i + chunk));
      const std::span<const float> out = seq.forward(part, true);
      got.insert(got.end(), out.begin(), out.end());
    }
    ASSERT_EQ(got.size(), whole.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], whole[i], 1e-4) << "chunk " << chunk << " row " << i / vocab;
  }
}

// A qwen2 file without one of its biases, or a qwen3 file without a QK-norm weight, is a
// FormatError naming the tensor, not a silent llama forward.
TEST_F(ArchitectureTest, MissingFamilyTensorIsNamed) {
  for (const auto& [arch, dropped] : std::vector<std::pair<std::string, std::string>>{
           {"qwen2", "blk.1.attn_v.bias"}, {"qwen3", "blk.0.attn_k_norm.weight"}}) {
    const std::string path = dir_ + "/" + arch + ".gguf", broken = dir_ + "/" + arch + "_broken.gguf";
    lio::testing::write_tiny_gguf(path, family(arch));
    const lio::GgufFile src = lio::GgufFile::open(path);
    lio::GgufWriter w;
    for (const auto& [k, v] : src.metadata()) w.set(k, v);
    for (const auto& t : src.tensors())
      if (t.name != dropped)
        w.add_tensor(t.name, t.dtype, t.shape, std::span<const std::byte>(t.data, static_cast<size_t>(t.size_bytes)));
    w.write(broken);
    try {
      lio::load_model(broken, lio::WeightMode::AsStored);
      FAIL() << arch << " loaded without " << dropped;
    } catch (const lio::FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + dropped + "' is missing"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
