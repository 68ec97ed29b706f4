// The EAGLE drafter in the batched engine (chapter 06, section 7; issue 63) on tiny random-weight
// models: the drafter file's checks, the drafter's forward against the definition written out
// here in plain loops (the packed f32 path) and against the trainer's own outputs (the probe a
// trained file carries, when LIO_EAGLE_PROBE names one), and the engine's EAGLE trees verified in
// one pass: greedy EAGLE gives plain greedy's tokens alone and in a batch, with a chain and with
// trees, under preemption, prefix caching and the hybrid pool, with every KV block back in the
// pool; a seeded sampled run replays exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "lio/cpu_backend.h"
#include "lio/eagle.h"
#include "lio/engine.h"
#include "lio/error.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "lio/safetensors.h"
#include "random_inputs.h"
#include "tiny_model.h"
#include "tree_drafter_cases.h"

namespace {
using lio::testing::TinyModelSpec;

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

struct DrafterShape {
  int64_t n_heads = 4, n_kv_heads = 2, head_dim = 16, ffn = 64;
};

/// A drafter file for model `s`: the feature passes through the FC (W_fc = [0.1 noise | I]) and
/// the layer's matrices are small, so g ~ f and the drafter proposes what the target's LM head
/// read from the last feature, often right on these models; the LM head is the model's own
/// (pre-quantization) embedding over the whole vocabulary. `drop` names a tensor to leave out.
void write_drafter(const std::string& path, const TinyModelSpec& s, int64_t vocab, DrafterShape shape = {},
                   const std::string& drop = "", float std_dev = 0.05f) {
  const lio::testing::TinyModelTensors tensors = lio::testing::make_tiny_tensors(s);
  const std::vector<float>& embed = tensors.get("model.embed_tokens.weight");
  const int64_t d = s.d_model, qd = shape.n_heads * shape.head_dim, kvd = shape.n_kv_heads * shape.head_dim;
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, std_dev);
  auto random = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = g(rng);
    return v;
  };
  lio::SafetensorsWriter w;
  auto add = [&](const std::string& name, std::vector<int64_t> dims, const std::vector<float>& v) {
    if (name != drop) w.add_tensor_f32(name, lio::DType::F32, dims, v);
  };
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v) ids[static_cast<size_t>(v)] = static_cast<int32_t>(v);
  if (drop != "eagle.vocab") w.add_tensor_i32("eagle.vocab", {vocab}, ids);
  add("eagle.lm_head", {vocab, d}, std::vector<float>(embed.begin(), embed.begin() + vocab * d));
  std::vector<float> fc = random(d * 2 * d);
  for (int64_t r = 0; r < d; ++r) fc[static_cast<size_t>(r * 2 * d + d + r)] += 1.0f;  // f passes through
  add("eagle.fc.weight", {d, 2 * d}, fc);
  add("eagle.fc.bias", {d}, random(d));
  add("eagle.attn_q.weight", {qd, d}, random(qd * d));
  add("eagle.attn_k.weight", {kvd, d}, random(kvd * d));
  add("eagle.attn_v.weight", {kvd, d}, random(kvd * d));
  add("eagle.attn_output.weight", {d, qd}, random(d * qd));
  add("eagle.ffn_norm.weight", {d}, std::vector<float>(static_cast<size_t>(d), 1.0f));
  add("eagle.ffn_gate.weight", {shape.ffn, d}, random(shape.ffn * d));
  add("eagle.ffn_up.weight", {shape.ffn, d}, random(shape.ffn * d));
  add("eagle.ffn_down.weight", {d, shape.ffn}, random(d * shape.ffn));
  w.set_metadata("format", "lio-eagle-1");
  w.set_metadata("n_heads", std::to_string(shape.n_heads));
  w.set_metadata("n_kv_heads", std::to_string(shape.n_kv_heads));
  w.set_metadata("head_dim", std::to_string(shape.head_dim));
  w.set_metadata("ffn", std::to_string(shape.ffn));
  w.set_metadata("rope_theta", "10000");
  w.set_metadata("rms_eps", "1e-6");
  w.write(path);
}

/// The drafter's definition (lio/eagle.h; EAGLE sec. 4.1) in plain loops, one causal window.
std::vector<float> reference_window(const lio::EagleDrafter& w, const std::vector<float>& emb,
                                    const std::vector<float>& feats, int64_t start) {
  const int64_t d = w.d_model, hd = w.head_dim, nh = w.n_heads, nkv = w.n_kv_heads, f = w.ffn;
  const int64_t n = static_cast<int64_t>(feats.size()) / d, qd = nh * hd, kvd = nkv * hd;
  auto matvec = [](const std::vector<float>& m, const float* x, int64_t rows, int64_t cols, float* y) {
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(m[static_cast<size_t>(r * cols + c)]) * x[c];
      y[r] = static_cast<float>(s);
    }
  };
  std::vector<float> u(n * d), q(n * qd), k(n * kvd), v(n * kvd), out(n * d);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> a(emb.begin() + i * d, emb.begin() + (i + 1) * d);
    a.insert(a.end(), feats.begin() + i * d, feats.begin() + (i + 1) * d);
    matvec(w.fc_weight, a.data(), d, 2 * d, &u[i * d]);
    for (int64_t c = 0; c < d; ++c) u[i * d + c] += w.fc_bias[c];
    matvec(w.wq, &u[i * d], qd, d, &q[i * qd]);
    matvec(w.wk, &u[i * d], kvd, d, &k[i * kvd]);
    matvec(w.wv, &u[i * d], kvd, d, &v[i * kvd]);
    auto rope = [&](float* x, int64_t heads) {
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t j = 0; j < hd / 2; ++j) {
          const double ang = static_cast<double>(start + i) * std::pow(10000.0, -2.0 * j / hd);
          const double x0 = x[h * hd + j], x1 = x[h * hd + j + hd / 2];
          x[h * hd + j] = static_cast<float>(x0 * std::cos(ang) - x1 * std::sin(ang));
          x[h * hd + j + hd / 2] = static_cast<float>(x0 * std::sin(ang) + x1 * std::cos(ang));
        }
    };
    rope(&q[i * qd], nh);
    rope(&k[i * kvd], nkv);
  }
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> att(qd), hvec(d), xn(d), gate(f), up(f), down(d);
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t kh = h / (nh / nkv);
      std::vector<double> p(i + 1);
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double s = 0;
        for (int64_t c = 0; c < hd; ++c) s += static_cast<double>(q[i * qd + h * hd + c]) * k[j * kvd + kh * hd + c];
        p[j] = s / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, p[j]);
      }
      for (double& x : p) sum += (x = std::exp(x - mx));
      for (int64_t c = 0; c < hd; ++c) {
        double o = 0;
        for (int64_t j = 0; j <= i; ++j) o += p[j] / sum * v[j * kvd + kh * hd + c];
        att[h * hd + c] = static_cast<float>(o);
      }
    }
    matvec(w.wo, att.data(), d, qd, hvec.data());
    double ss = 0;
    for (int64_t c = 0; c < d; ++c) ss += static_cast<double>(hvec[c] += u[i * d + c]) * hvec[c];
    for (int64_t c = 0; c < d; ++c) xn[c] = static_cast<float>(hvec[c] / std::sqrt(ss / d + w.rms_eps) * w.ffn_norm[c]);
    matvec(w.w_gate, xn.data(), f, d, gate.data());
    matvec(w.w_up, xn.data(), f, d, up.data());
    for (int64_t c = 0; c < f; ++c) gate[c] = static_cast<float>(gate[c] / (1.0 + std::exp(-gate[c])) * up[c]);
    matvec(w.w_down, gate.data(), d, f, down.data());
    for (int64_t c = 0; c < d; ++c) out[i * d + c] = hvec[c] + down[c];
  }
  return out;
}

class EagleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lio::testing::write_tiny_gguf(dir_ + "/m.gguf", spec_);
    model_ = std::make_unique<lio::LoadedModel>(lio::load_model(dir_ + "/m.gguf", lio::WeightMode::AsStored));
    write_drafter(dir_ + "/eagle.safetensors", spec_, model_->config.vocab_size);
  }
  std::unique_ptr<lio::ModelRunner> runner() const { return lio::testing::tree_runner(*model_); }
  lio::SpeculativeConfig eagle(int64_t nodes, int64_t top_k, int64_t depth = 5) const {
    lio::SpeculativeConfig c;
    c.method = lio::SpecMethod::Eagle;
    c.num_speculative_tokens = nodes;
    c.eagle_drafter = dir_ + "/eagle.safetensors";
    c.eagle_top_k = top_k;
    c.eagle_depth = depth;
    return c;
  }

  TinyModelSpec spec_ = spec();
  std::string dir_ = lio::testing::make_temp_dir("lio_test_eagle");
  std::unique_ptr<lio::LoadedModel> model_;
};

TEST_F(EagleTest, DrafterFileIsCheckedAgainstTheModel) {
  const int64_t d = spec_.d_model, vocab = model_->config.vocab_size;
  const lio::EagleDrafter w = lio::EagleDrafter::load(dir_ + "/eagle.safetensors", d, vocab);
  EXPECT_EQ(w.n_heads, 4);
  EXPECT_EQ(w.n_kv_heads, 2);
  EXPECT_EQ(w.ffn, 64);
  EXPECT_EQ(static_cast<int64_t>(w.vocab.size()), vocab);
  EXPECT_EQ(w.probe_start, -1);  // no probe in this file
  EXPECT_THROW(lio::EagleDrafter::load(dir_ + "/missing.safetensors", d, vocab), lio::InvalidArgument);
  EXPECT_THROW(lio::EagleDrafter::load(dir_ + "/eagle.safetensors", d + 8, vocab), lio::InvalidArgument);
  EXPECT_THROW(lio::EagleDrafter::load(dir_ + "/eagle.safetensors", d, 10), lio::FormatError);  // ids past 10
  for (const std::string drop : {"eagle.fc.bias", "eagle.attn_k.weight", "eagle.ffn_down.weight", "eagle.vocab"}) {
    SCOPED_TRACE(drop);
    write_drafter(dir_ + "/bad.safetensors", spec_, 50, {}, drop);
    try {
      lio::EagleDrafter::load(dir_ + "/bad.safetensors", d, vocab);
      ADD_FAILURE() << "a drafter without " << drop << " was accepted";
    } catch (const lio::FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(drop), std::string::npos) << e.what();
    }
  }
  write_drafter(dir_ + "/gqa.safetensors", spec_, 50, {3, 2, 16, 64});  // 3 heads over 2 KV heads
  EXPECT_THROW(lio::EagleDrafter::load(dir_ + "/gqa.safetensors", d, vocab), lio::FormatError);
  lio::EngineConfig cfg;
  cfg.speculative = eagle(4, 2);
  cfg.speculative.eagle_drafter.clear();
  auto r = runner();
  EXPECT_THROW(lio::Engine(*r, *model_->tokenizer, cfg), lio::InvalidArgument);  // no drafter file
  cfg.speculative = eagle(4, 0);
  EXPECT_THROW(lio::Engine(*r, *model_->tokenizer, cfg), lio::InvalidArgument);  // top-k 0
}

TEST_F(EagleTest, ForwardMatchesTheDefinition) {
  // The packed f32 path against the definition in plain loops; the Q8_0 path close to it.
  const int64_t d = spec_.d_model, vocab = model_->config.vocab_size;
  lio::EagleDrafter w = lio::EagleDrafter::load(dir_ + "/eagle.safetensors", d, vocab);
  auto r = runner();
  auto embed = [&](std::span<const int32_t> ids, float* out) { r->embed_rows(ids, out); };
  constexpr int64_t kN = 9, kStart = 7;
  const std::vector<int32_t> next = lio::testing::random_token_ids(kN, 3);
  std::vector<float> feats(kN * d), emb(kN * d);
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (float& x : feats) x = g(rng);
  r->embed_rows(next, emb.data());
  const std::vector<float> want = reference_window(w, emb, feats, kStart);
  lio::EagleProposer f32(w, embed, 2, 3, /*f32_weights=*/true), q8(w, embed, 2, 3);
  const std::vector<float> got = f32.forward_window(feats, next, kStart), got_q8 = q8.forward_window(feats, next, kStart);
  double worst = 0, worst_q8 = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(got[i] - want[i])));
    worst_q8 = std::max(worst_q8, static_cast<double>(std::abs(got_q8[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::abs(want[i])));
  }
  EXPECT_LT(worst, 1e-4 * scale);
  EXPECT_LT(worst_q8, 0.03 * scale);  // int8 weights and activations
  EXPECT_THROW(f32.forward_window(std::vector<float>(d), next, 0), lio::InvalidArgument);
  // The embedding rows the drafter reads are the model's, unscaled.
  std::vector<float> row(d);
  EXPECT_THROW(r->embed_rows(std::vector<int32_t>{static_cast<int32_t>(vocab)}, row.data()), lio::InvalidArgument);
}

TEST(EagleProbe, TrainedFileMatchesTheTrainersOutputs) {
  // LIO_EAGLE_PROBE=drafter file, LIO_EAGLE_MODEL=its model (tests/cli/eagle_train_tiny.sh sets
  // them after training): the C++ forward against the outputs scripts/train_eagle.py computed
  // in JAX for a held-out window.
  const char* file = std::getenv("LIO_EAGLE_PROBE");
  const char* model_path = std::getenv("LIO_EAGLE_MODEL");
  if (file == nullptr || model_path == nullptr) GTEST_SKIP() << "LIO_EAGLE_PROBE / LIO_EAGLE_MODEL not set";
  const lio::LoadedModel m = lio::load_model(model_path, lio::WeightMode::AsStored);
  const lio::EagleDrafter w = lio::EagleDrafter::load(file, m.config.d_model, m.config.vocab_size);
  ASSERT_GE(w.probe_start, 0) << "the file has no probe";
  lio::ModelRunner r(std::make_unique<lio::CpuBackend>(m.config, m.weights), lio::KvPoolConfig{4, 16});
  lio::EagleProposer p(w, [&](std::span<const int32_t> ids, float* out) { r.embed_rows(ids, out); }, 1, 1, true);
  const auto n = static_cast<int64_t>(w.probe_features.size()) / w.d_model;
  const std::vector<float> got =
      p.forward_window(w.probe_features, std::span<const int32_t>(w.probe_tokens).first(static_cast<size_t>(n)), w.probe_start);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(got[i] - w.probe_out[i])));
    scale = std::max(scale, static_cast<double>(std::abs(w.probe_out[i])));
  }
  EXPECT_LT(worst, 1e-3 * std::max(scale, 1.0)) << "worst |C++ - JAX| " << worst << " of max |g| " << scale;
}

TEST_F(EagleTest, GreedyEagleGivesPlainGreedyTokensAloneAndInABatch) {
  const auto [accepted, moves] =
      lio::testing::expect_greedy_trees_equal_plain(*model_, {eagle(4, 1), eagle(10, 3), eagle(24, 6)});
  EXPECT_GT(accepted, 0);
  EXPECT_GT(moves, 0);  // some accepted drafts off the tree's first chain
}

TEST_F(EagleTest, TreesSurvivePreemptionPrefixCachingAndTheHybridPool) {
  lio::testing::expect_trees_survive_preemption_caches_and_hybrid(
      spec_, *model_, dir_, [&](const TinyModelSpec& s, const lio::LoadedModel& m, const std::string& tag) {
        const std::string file = dir_ + "/" + tag + "_eagle.safetensors";
        write_drafter(file, s, m.config.vocab_size);
        lio::SpeculativeConfig c = eagle(8, 3, 4);
        c.eagle_drafter = file;
        return c;
      });
}

TEST_F(EagleTest, SeededSampledEagleReplaysExactly) {
  const lio::SamplingParams p = lio::testing::tree_params(30, 0.8f);
  auto run = [&] {
    lio::EngineConfig cfg;
    cfg.speculative = eagle(10, 4);
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
