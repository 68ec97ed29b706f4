// The forward pass on tiny random-weight models written by our own writers:
// against a direct double-precision implementation of the Llama equations, KV cache vs
// recompute, chunked vs whole prefill, GGUF (normal RoPE, permuted Q/K) vs HF (neox RoPE),
// quantized vs F32 mode, and the errors of bad calls.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <tuple>
#include <algorithm>
#include <memory>
#include <vector>

#include "lio/cpu_backend.h"
#include "lio/model_runner.h"
#include "lio/error.h"
#include "lio/generate.h"
#include "lio/model.h"
#include "lio/model_runner.h"
#include "lio/model_loader.h"
#include "tiny_model.h"

namespace {
using lio::testing::TinyModelSpec;

/// Direct Llama forward in double precision over HF-layout tensors (rotate-half RoPE).
/// Returns logits (n, vocab). Written from the equations, with no code shared with lio.
std::vector<double> reference_logits(const TinyModelSpec& s, const std::vector<int32_t>& tokens) {
  const auto t = lio::testing::make_tiny_tensors(s);
  const int64_t n = static_cast<int64_t>(tokens.size()), d = s.d_model, hd = s.head_dim;
  const int64_t V = s.vocab_size();
  auto W = [&](const std::string& name) -> const std::vector<float>& { return t.get(name); };
  auto matvec = [](const std::vector<float>& w, const std::vector<double>& x, int64_t rows) {
    const int64_t cols = static_cast<int64_t>(x.size());
    std::vector<double> y(rows, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) y[r] += double(w[r * cols + c]) * x[c];
    return y;
  };
  auto rmsnorm = [&](const std::vector<double>& x, const std::vector<float>& g) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / double(x.size()) + s.rms_norm_eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * g[i];
    return y;
  };
  auto rope = [&](std::vector<double>& v, int64_t heads, int64_t pos) {
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < hd / 2; ++i) {
        const double ang = pos * std::pow(double(s.rope_theta), -2.0 * i / hd);
        double& a = v[h * hd + i];
        double& b = v[h * hd + i + hd / 2];
        const double a0 = a, b0 = b;
        a = a0 * std::cos(ang) - b0 * std::sin(ang);
        b = a0 * std::sin(ang) + b0 * std::cos(ang);
      }
  };
  std::vector<std::vector<double>> x(n, std::vector<double>(d));
  const auto& emb = W("model.embed_tokens.weight");
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c) x[i][c] = emb[tokens[i] * d + c];
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<std::vector<double>> q(n), k(n), v(n);
    for (int64_t i = 0; i < n; ++i) {
      auto xn = rmsnorm(x[i], W(p + "input_layernorm.weight"));
      q[i] = matvec(W(p + "self_attn.q_proj.weight"), xn, s.n_heads * hd);
      k[i] = matvec(W(p + "self_attn.k_proj.weight"), xn, s.n_kv_heads * hd);
      v[i] = matvec(W(p + "self_attn.v_proj.weight"), xn, s.n_kv_heads * hd);
      rope(q[i], s.n_heads, i);
      rope(k[i], s.n_kv_heads, i);
    }
    for (int64_t i = 0; i < n; ++i) {
      std::vector<double> att(s.n_heads * hd, 0.0);
      for (int64_t h = 0; h < s.n_heads; ++h) {
        const int64_t g = h / (s.n_heads / s.n_kv_heads);
        std::vector<double> sc(i + 1);
        double mx = -1e300, den = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < hd; ++e) dot += q[i][h * hd + e] * k[j][g * hd + e];
          sc[j] = dot / std::sqrt(double(hd));
          mx = std::max(mx, sc[j]);
        }
        for (auto& e : sc) den += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t e = 0; e < hd; ++e) att[h * hd + e] += sc[j] / den * v[j][g * hd + e];
      }
      auto o = matvec(W(p + "self_attn.o_proj.weight"), att, d);
      for (int64_t c = 0; c < d; ++c) x[i][c] += o[c];
      auto xn = rmsnorm(x[i], W(p + "post_attention_layernorm.weight"));
      auto gate = matvec(W(p + "mlp.gate_proj.weight"), xn, s.d_ff);
      auto up = matvec(W(p + "mlp.up_proj.weight"), xn, s.d_ff);
      for (int64_t f = 0; f < s.d_ff; ++f) gate[f] = gate[f] / (1.0 + std::exp(-gate[f])) * up[f];
      auto down = matvec(W(p + "mlp.down_proj.weight"), gate, d);
      for (int64_t c = 0; c < d; ++c) x[i][c] += down[c];
    }
  }
  const auto& head = s.tied_embeddings ? emb : W("lm_head.weight");
  std::vector<double> logits;
  for (int64_t i = 0; i < n; ++i) {
    auto xn = rmsnorm(x[i], W("model.norm.weight"));
    auto row = matvec(head, xn, V);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

/// A CPU runner over `m` with a pool of n_blocks blocks of block_size tokens.
std::unique_ptr<lio::ModelRunner> cpu_runner(const lio::LoadedModel& m, int64_t block_size = 16,
                                             int64_t n_blocks = 64) {
  return std::make_unique<lio::ModelRunner>(std::make_unique<lio::CpuBackend>(m.config, m.weights),
                                            lio::KvPoolConfig{block_size, n_blocks});
}

std::vector<float> run_all_logits(const lio::LoadedModel& m, const std::vector<int32_t>& tokens) {
  auto runner = cpu_runner(m);
  lio::SoloSequence seq(*runner, static_cast<int64_t>(tokens.size()));
  auto out = seq.forward(tokens, true);
  return {out.begin(), out.end()};
}

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

const std::vector<int32_t> kTokens = {5, 17, 200, 3, 99, 140, 7, 250, 33, 61, 12, 180};

class ModelTest : public ::testing::Test {
 protected:
  std::string dir_ = lio::testing::make_temp_dir("lio_test_model");
};

TEST_F(ModelTest, GgufLogitsMatchDirectReference) {
  TinyModelSpec spec;
  spec.tied_embeddings = false;
  lio::testing::write_tiny_gguf(dir_ + "/m.gguf", spec);
  lio::LoadedModel m = lio::load_model(dir_ + "/m.gguf", lio::WeightMode::AsStored);
  auto ours = run_all_logits(m, kTokens);
  auto ref = reference_logits(spec, kTokens);
  ASSERT_EQ(ours.size(), ref.size());
  // f32 through 2 layers of width 64: agreement to ~1e-4 absolute on logits of magnitude ~1-10.
  EXPECT_LT(max_abs_diff(ours, ref), 2e-3);
}

TEST_F(ModelTest, HfDirectoryGivesSameLogitsAsGguf) {
  // Same weights, two checkpoints: GGUF with permuted Q/K + normal RoPE, HF with neox RoPE.
  TinyModelSpec spec;
  lio::testing::write_tiny_gguf(dir_ + "/m.gguf", spec);
  lio::testing::write_tiny_hf_dir(dir_ + "/hf", spec, /*n_shards=*/2);
  auto a = run_all_logits(lio::load_model(dir_ + "/m.gguf", lio::WeightMode::AsStored), kTokens);
  lio::LoadedModel hf = lio::load_model(dir_ + "/hf", lio::WeightMode::AsStored);
  EXPECT_EQ(hf.config.rope_style, lio::RopeStyle::Neox);
  auto b = run_all_logits(hf, kTokens);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << "at " << i;
}

TEST_F(ModelTest, KvCacheAndRecomputeLogitsAgree) {
  TinyModelSpec spec;
  spec.weight_dtype = lio::DType::Q4_1;
  spec.embd_dtype = lio::DType::Q8_0;
  lio::testing::write_tiny_gguf(dir_ + "/m.gguf", spec);
  lio::LoadedModel m = lio::load_model(dir_ + "/m.gguf", lio::WeightMode::AsStored);
  // Cached: prefill 4 tokens, then one token per step. Recompute: whole prefix every step, on a
  // second runner. Blocks of 4 tokens, so rows read one block as well as cross blocks.
  auto runner = cpu_runner(m, 4, 8);
  auto scratch_runner = cpu_runner(m, 4, 8);
  lio::SoloSequence cache(*runner, static_cast<int64_t>(kTokens.size()));
  std::vector<int32_t> prefix(kTokens.begin(), kTokens.begin() + 4);
  cache.forward(prefix);
  for (size_t t = 4; t < kTokens.size(); ++t) {
    auto c = cache.forward(std::span(&kTokens[t], 1));
    std::vector<float> cached(c.begin(), c.end());
    lio::SoloSequence scratch(*scratch_runner, static_cast<int64_t>(t + 1));
    auto r = scratch.forward(std::span(kTokens.data(), t + 1));
    // The kernels are batch- and chunk-invariant: the same bits whichever way the row arrived.
    ASSERT_EQ(cached.size(), r.size());
    for (size_t i = 0; i < cached.size(); ++i) ASSERT_EQ(cached[i], r[i]) << "step " << t << " logit " << i;
  }
  EXPECT_EQ(cache.n_tokens(), static_cast<int64_t>(kTokens.size()));
}

TEST_F(ModelTest, F32ModeMatchesAsStoredQuantized) {
  TinyModelSpec spec;
  spec.weight_dtype = lio::DType::Q4_0;
  lio::testing::write_tiny_gguf(dir_ + "/m.gguf", spec);
  auto a = run_all_logits(lio::load_model(dir_ + "/m.gguf", lio::WeightMode::AsStored), kTokens);
  lio::LoadedModel f = lio::load_model(dir_ + "/m.gguf", lio::WeightMode::F32);
  EXPECT_EQ(f.weights.layers[0].wq.dtype, lio::DType::F32);
  auto b = run_all_logits(f, kTokens);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << "at " << i;
}

TEST_F(ModelTest, GreedyGenerationIdenticalWithAndWithoutCache) {
  TinyModelSpec spec;
  lio::testing::write_tiny_gguf(dir_ + "/m.gguf", spec);
  lio::LoadedModel m = lio::load_model(dir_ + "/m.gguf", lio::WeightMode::AsStored);
  auto runner_ptr = cpu_runner(m);
  lio::ModelRunner& runner = *runner_ptr;
  lio::GenerateOptions g;
  g.max_tokens = 24;
  g.ignore_eos = true;  // a run that stops at once would make the comparison empty
  g.use_kv_cache = true;
  auto a = lio::generate(runner, *m.tokenizer, kTokens, g);
  g.use_kv_cache = false;
  auto b = lio::generate(runner, *m.tokenizer, kTokens, g);
  ASSERT_EQ(a.token_ids.size(), 24u);
  EXPECT_EQ(a.token_ids, b.token_ids);
  EXPECT_EQ(a.n_prompt_tokens, static_cast<int64_t>(kTokens.size()));
  // The cache holds every position fed through the model: prompt + generated - 1.
  const int64_t fed = a.n_prompt_tokens + static_cast<int64_t>(a.token_ids.size()) -
                      (a.finish_reason == lio::FinishReason::Length ? 1 : 0);
  EXPECT_EQ(a.kv_tokens, fed);
  EXPECT_EQ(a.kv_bytes, m.config.kv_bytes_per_token(4) * a.kv_tokens);
}

TEST_F(ModelTest, RejectsBadCalls) {
  TinyModelSpec spec;
  lio::testing::write_tiny_gguf(dir_ + "/m.gguf", spec);
  lio::LoadedModel m = lio::load_model(dir_ + "/m.gguf", lio::WeightMode::AsStored);
  auto runner_ptr = cpu_runner(m);
  lio::ModelRunner& runner = *runner_ptr;
  lio::SoloSequence cache(runner, 4);
  std::vector<int32_t> too_many(5, 3), bad_id = {static_cast<int32_t>(spec.vocab_size())};
  EXPECT_THROW(cache.forward(too_many), lio::InvalidArgument);
  EXPECT_THROW(cache.forward(bad_id), lio::InvalidArgument);
  EXPECT_THROW(cache.forward({}), lio::InvalidArgument);
  EXPECT_EQ(cache.n_tokens(), 0);  // nothing ran
  EXPECT_THROW(lio::KvCache(m.config, m.config.context_length + 1), lio::InvalidArgument);
  EXPECT_THROW(lio::SoloSequence(runner, 0), lio::InvalidArgument);
  EXPECT_THROW(lio::SoloSequence(runner, 64 * 16 + 1), lio::InvalidArgument);  // more than the pool
  std::vector<int32_t> long_prompt(static_cast<size_t>(m.config.context_length), 7);
  lio::GenerateOptions g;
  EXPECT_THROW(lio::generate(runner, *m.tokenizer, long_prompt, g), lio::InvalidArgument);
  g.sampler.temperature = -1.0f;
  EXPECT_THROW(lio::generate(runner, *m.tokenizer, kTokens, g), lio::InvalidArgument);
  EXPECT_THROW(lio::parse_device("gpu"), lio::InvalidArgument);
}

TEST(StopStrings, FindsEarliestAndHoldsBackPrefixes) {
  std::vector<std::string> stops = {"</end>", "STOP"};
  size_t hold = 0;
  EXPECT_EQ(lio::find_stop("hello </end> more STOP", stops, &hold), 6u);
  EXPECT_EQ(lio::find_stop("hello </e", stops, &hold), std::string::npos);
  EXPECT_EQ(hold, 3u);
  EXPECT_EQ(lio::find_stop("hello ST", stops, &hold), std::string::npos);
  EXPECT_EQ(hold, 2u);
  EXPECT_EQ(lio::find_stop("plain", stops, &hold), std::string::npos);
  EXPECT_EQ(hold, 0u);
}

// `lio generate --warmup N`'s prompt: same length, the prompt's own tokens, first token differs
// (so no prefix cache could serve the timed prompt from the warm-up).
TEST(WarmupPrompt, SameLengthNoSharedPrefix) {
  const std::vector<int32_t> prompt = {1, 1, 7, 9, 1};
  const std::vector<int32_t> w = lio::warmup_prompt(prompt, 32);
  EXPECT_EQ(w, (std::vector<int32_t>{7, 9, 1, 1, 1}));  // rotated to the first token != prompt[0]
  std::vector<int32_t> sorted_w = w, sorted_p = prompt;
  std::sort(sorted_w.begin(), sorted_w.end());
  std::sort(sorted_p.begin(), sorted_p.end());
  EXPECT_EQ(sorted_w, sorted_p);
}

TEST(WarmupPrompt, RepeatedTokenMovesToTheNextId) {
  EXPECT_EQ(lio::warmup_prompt(std::vector<int32_t>{5, 5, 5}, 32), (std::vector<int32_t>{6, 6, 6}));
  EXPECT_EQ(lio::warmup_prompt(std::vector<int32_t>{31}, 32), (std::vector<int32_t>{0}));  // wraps in the vocab
}

TEST(WarmupPrompt, RejectsBadCalls) {
  EXPECT_THROW(lio::warmup_prompt(std::vector<int32_t>{}, 32), lio::InvalidArgument);
  EXPECT_THROW(lio::warmup_prompt(std::vector<int32_t>{0}, 1), lio::InvalidArgument);
  EXPECT_THROW(lio::warmup_prompt(std::vector<int32_t>{32}, 32), lio::InvalidArgument);
  EXPECT_THROW(lio::warmup_prompt(std::vector<int32_t>{-1}, 32), lio::InvalidArgument);
}

}  // namespace

namespace {

// --dtype f16 / bf16: matrices are rounded once at load (2 bytes per weight) and run through the
// F16/BF16 kernels; logits stay within the rounding of the weights (f16: 2^-11 relative,
// bf16: 2^-8) of the f32 model's.
TEST_F(ModelTest, HalfPrecisionWeightModesStayCloseToF32) {
  TinyModelSpec spec;
  lio::testing::write_tiny_gguf(dir_ + "/m.gguf", spec);
  lio::LoadedModel f32 = lio::load_model(dir_ + "/m.gguf", lio::WeightMode::AsStored);
  const auto want_f32 = run_all_logits(f32, kTokens);
  const std::vector<double> want(want_f32.begin(), want_f32.end());
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(double(v)));
  for (auto [mode, tol, dtype] : {std::tuple{lio::WeightMode::F16, 5e-3, lio::DType::F16},
                                  std::tuple{lio::WeightMode::BF16, 4e-2, lio::DType::BF16}}) {
    lio::LoadedModel m = lio::load_model(dir_ + "/m.gguf", mode);
    EXPECT_EQ(m.weights.layers[0].wq.dtype, dtype);
    EXPECT_EQ(m.weights.size_bytes() < f32.weights.size_bytes(), true);
    const auto got = run_all_logits(m, kTokens);
    const double err = max_abs_diff(got, want);
    EXPECT_LT(err, tol * scale) << lio::dtype_info(dtype).name;
    EXPECT_GT(err, 0.0) << "conversion changed nothing: the mode was ignored";
  }
  EXPECT_EQ(lio::parse_weight_mode("bf16"), lio::WeightMode::BF16);
  EXPECT_THROW(lio::parse_weight_mode("q3"), lio::InvalidArgument);
}

}  // namespace
