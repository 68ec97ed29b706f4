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

#include "lio/cli_parse.h"
#include "lio/cpu_backend.h"
#include "lio/model_runner.h"
#include "lio/error.h"
#include "lio/generate.h"
#include "lio/model.h"
#include "lio/model_runner.h"
#include "lio/model_loader.h"
#include "reference_forward.h"
#include "tiny_model.h"

namespace {
using lio::testing::TinyModelSpec;
using lio::testing::reference_logits;

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
  EXPECT_EQ(f.weights.layers[0].matrix(lio::WeightKind::Wq).dtype, lio::DType::F32);
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

TEST_F(ModelTest, HiddenStatesTimesTheOutputMatrixAreTheLogits) {
  // return_hidden keeps each logits row after the output norm, before the LM head: for a tied
  // F32 model, hidden . embed^T must give the logits (issue 63: what Medusa heads read).
  TinyModelSpec spec;
  lio::testing::write_tiny_gguf(dir_ + "/m.gguf", spec);
  lio::LoadedModel m = lio::load_model(dir_ + "/m.gguf", lio::WeightMode::AsStored);
  const lio::testing::TinyModelTensors tensors = lio::testing::make_tiny_tensors(spec);
  const std::vector<float>& embed = tensors.get("model.embed_tokens.weight");
  auto runner = cpu_runner(m);
  lio::SoloSequence seq(*runner, static_cast<int64_t>(kTokens.size()));
  const std::vector<int32_t> head(kTokens.begin(), kTokens.begin() + 5);
  seq.forward(head, /*all_logits=*/false);
  EXPECT_TRUE(runner->hidden_states().empty());  // not asked for
  const std::vector<int32_t> rest(kTokens.begin() + 5, kTokens.end());
  const std::vector<float> logits = [&] {
    auto l = seq.forward(rest, /*all_logits=*/true, /*return_hidden=*/true);
    return std::vector<float>(l.begin(), l.end());
  }();
  const int64_t n = static_cast<int64_t>(rest.size()), d = spec.d_model, vocab = spec.vocab_size();
  std::span<const float> hidden = runner->hidden_states();
  ASSERT_EQ(static_cast<int64_t>(hidden.size()), n * d);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t v = 0; v < vocab; ++v) {
      double dot = 0;
      for (int64_t j = 0; j < d; ++j) dot += double(hidden[i * d + j]) * embed[v * d + j];
      worst = std::max(worst, std::abs(dot - logits[i * vocab + v]));
    }
  }
  EXPECT_LT(worst, 1e-4);  // the same f32 products, summed in another order
  // forward_sample keeps them as well (the greedy path of a drafter's target step).
  lio::Sampler sampler(lio::SamplerConfig{});
  const std::vector<int32_t> one = {kTokens[0]};
  lio::ForwardBatch b(16);
  std::vector<int32_t> table(1, 63);  // a block the sequence above does not use
  b.add_sequence(one, 0, table, 1);
  b.return_hidden = true;
  const lio::SampleRow row{&sampler, one};
  runner->forward_sample(b, std::span<const lio::SampleRow>(&row, 1));
  EXPECT_EQ(static_cast<int64_t>(runner->hidden_states().size()), d);
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
    EXPECT_EQ(m.weights.layers[0].matrix(lio::WeightKind::Wq).dtype, dtype);
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
