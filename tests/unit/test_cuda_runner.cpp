// test_cuda_runner.cpp — the whole forward pass on the GPU (cuda::CudaRunner) against the CPU
// path (CpuRunner): tiny random models in every weight dtype, then the real SmolLM2 model.
// Without a usable GPU the parity tests skip, and the one test that needs no GPU checks that
// asking for CUDA fails with a clear error instead.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <span>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "cuda_ops.h"
#include "lio/cuda_runner.h"
#include "lio/error.h"
#include "lio/generate.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "tiny_model.h"

namespace {

using lio::DType;
using lio::testing::TinyModelSpec;

const std::vector<int32_t> kPrompt = {5, 17, 200, 3, 99, 140, 7, 250, 33};

/// max |a - b| / max |b|: the error relative to the logits' scale.
double max_rel_error(std::span<const float> a, std::span<const float> b) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(double(a[i]) - b[i]));
    max_ref = std::max(max_ref, std::fabs(double(b[i])));
  }
  return max_diff / std::max(max_ref, 1e-30);
}

int64_t argmax_row(std::span<const float> logits, int64_t row, int64_t vocab) {
  auto begin = logits.begin() + row * vocab;
  return std::max_element(begin, begin + vocab) - begin;
}

class CudaRunnerTest : public ::testing::Test {
 protected:
  /// Writes a tiny random model with `spec` and loads it as stored.
  lio::LoadedModel load_tiny(const TinyModelSpec& spec = {}) {
    lio::testing::write_tiny_gguf(dir_ + "/m.gguf", spec);
    return lio::load_model(dir_ + "/m.gguf", lio::WeightMode::AsStored);
  }

  std::string dir_ = lio::testing::make_temp_dir("lio_test_cuda_runner");
};

// Runs on every machine. With no usable GPU, --device cuda must be a clear UnsupportedError
// (the CLI prints it and exits 1), never a crash or a silent CPU fallback.
TEST_F(CudaRunnerTest, NoGpuMeansClearUnsupportedError) {
  if (lio::cuda::cuda_available()) GTEST_SKIP() << "a GPU is present; nothing to refuse";
  lio::LoadedModel m = load_tiny();
  try {
    auto runner = lio::make_runner(m, lio::Device::Cuda);
    FAIL() << "make_runner(cuda) succeeded without a GPU";
  } catch (const lio::UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos) << e.what();
  }
}

/// Copies a runner's logits (the span dies at the next forward).
std::vector<float> run(lio::ModelRunner& r, const std::vector<int32_t>& tokens, bool all_logits) {
  std::span<const float> out = r.forward(tokens, all_logits);
  return {out.begin(), out.end()};
}

// Prefill (cuBLAS path, 9 tokens, all logits) then 4 decode steps (gemv path), per dtype:
// both devices compute in f32 in different orders, so logits agree to 1e-4 of their scale.
TEST_F(CudaRunnerTest, TinyModelLogitsMatchCpuEveryDtype) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1}) {
    const std::string name(lio::dtype_info(t).name);
    TinyModelSpec spec;
    spec.weight_dtype = t;
    spec.embd_dtype = t;
    spec.tied_embeddings = t != DType::Q4_0;  // one untied head among the cases
    const std::string path = dir_ + "/m_" + name + ".gguf";
    lio::testing::write_tiny_gguf(path, spec);
    lio::LoadedModel m = lio::load_model(path, lio::WeightMode::AsStored);
    lio::CpuRunner cpu(m.config, m.weights);
    lio::cuda::CudaRunner gpu(m.config, m.weights);
    cpu.reset(32);
    gpu.reset(32);
    const auto want = run(cpu, kPrompt, true);
    const auto got = run(gpu, kPrompt, true);
    ASSERT_EQ(got.size(), kPrompt.size() * size_t(m.config.vocab_size)) << name;
    EXPECT_LT(max_rel_error(got, want), 1e-4) << name << " prefill";
    for (int32_t token : {11, 250, 0, 42}) {
      const auto w = run(cpu, {token}, false);
      const auto g = run(gpu, {token}, false);
      EXPECT_LT(max_rel_error(g, w), 1e-4) << name << " decode token " << token;
    }
    EXPECT_EQ(gpu.kv_usage().n_tokens, cpu.kv_usage().n_tokens);
    EXPECT_EQ(gpu.kv_usage().used_bytes, cpu.kv_usage().used_bytes);
    EXPECT_EQ(gpu.kv_usage().allocated_bytes, cpu.kv_usage().allocated_bytes);
  }
}

// A prompt fed in chunks (prefill at start > 0, then a 1-token step, then another chunk):
// cuBLAS prefill at start > 0, and attention over the K/V earlier chunks left in the cache.
TEST_F(CudaRunnerTest, ChunkedPrefillMatchesCpu) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  TinyModelSpec spec;
  spec.weight_dtype = DType::Q8_0;
  lio::LoadedModel m = load_tiny(spec);
  lio::CpuRunner cpu(m.config, m.weights);
  lio::cuda::CudaRunner gpu(m.config, m.weights);
  cpu.reset(32);
  gpu.reset(32);
  for (const std::vector<int32_t>& chunk :
       {std::vector<int32_t>{5, 17, 200, 3}, std::vector<int32_t>{99}, std::vector<int32_t>{140, 7, 250, 33, 61}}) {
    EXPECT_LT(max_rel_error(run(gpu, chunk, true), run(cpu, chunk, true)), 1e-4)
        << "chunk of " << chunk.size() << " at position " << gpu.kv_usage().n_tokens;
  }
  EXPECT_EQ(gpu.kv_usage().n_tokens, 10);
}

// Profiling times every op; it changes no result.
TEST_F(CudaRunnerTest, ProfilingCountsEveryOpAndChangesNothing) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  TinyModelSpec spec;  // 2 layers
  lio::LoadedModel m = load_tiny(spec);
  lio::cuda::CudaRunner gpu(m.config, m.weights);
  gpu.reset(16);
  const auto plain = run(gpu, kPrompt, false);
  gpu.set_profiling(true);
  gpu.reset(16);
  const auto profiled = run(gpu, kPrompt, false);
  EXPECT_EQ(profiled, plain);
  int64_t gemm_calls = 0, attention_calls = 0;
  double total_ms = 0;
  for (const auto& t : gpu.op_times()) {
    if (t.op.rfind("gemm", 0) == 0) gemm_calls += t.calls;
    if (t.op.rfind("attention", 0) == 0) attention_calls += t.calls;
    total_ms += t.total_ms;
  }
  EXPECT_EQ(gemm_calls, 7 * spec.n_layers);  // q, k, v, o, gate, up, down per layer
  EXPECT_EQ(attention_calls, spec.n_layers);
  EXPECT_GT(total_ms, 0.0);
  gpu.clear_op_times();
  EXPECT_TRUE(gpu.op_times().empty());
}

// --dtype f16 / bf16 convert at load; the GPU runs the converted matrices like stored ones.
TEST_F(CudaRunnerTest, ConvertedWeightsMatchCpu) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  TinyModelSpec spec;
  spec.weight_dtype = DType::Q8_0;
  lio::testing::write_tiny_gguf(dir_ + "/m.gguf", spec);
  for (auto mode : {lio::WeightMode::F32, lio::WeightMode::F16, lio::WeightMode::BF16}) {
    lio::LoadedModel m = lio::load_model(dir_ + "/m.gguf", mode);
    lio::CpuRunner cpu(m.config, m.weights);
    lio::cuda::CudaRunner gpu(m.config, m.weights);
    cpu.reset(16);
    gpu.reset(16);
    EXPECT_LT(max_rel_error(run(gpu, kPrompt, true), run(cpu, kPrompt, true)), 1e-4);
  }
}

TEST_F(CudaRunnerTest, GreedyGenerationMatchesCpuWithAndWithoutCache) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  TinyModelSpec spec;
  spec.weight_dtype = DType::Q4_1;
  lio::LoadedModel m = load_tiny(spec);
  lio::CpuRunner cpu(m.config, m.weights);
  auto gpu = lio::make_runner(m, lio::Device::Cuda);
  for (const float penalty : {1.0f, 1.3f}) {  // generate() samples greedily on the device
    lio::GenerateOptions g;
    g.max_tokens = 20;
    g.ignore_eos = true;
    g.sampler.repeat_penalty = penalty;
    const auto want = lio::generate(cpu, *m.tokenizer, kPrompt, g);
    const auto cached = lio::generate(*gpu, *m.tokenizer, kPrompt, g);
    g.use_kv_cache = false;
    const auto recomputed = lio::generate(*gpu, *m.tokenizer, kPrompt, g);
    EXPECT_EQ(cached.token_ids, want.token_ids) << "penalty " << penalty;
    EXPECT_EQ(recomputed.token_ids, want.token_ids) << "penalty " << penalty;
    EXPECT_EQ(cached.kv_bytes, want.kv_bytes);
  }
}

// forward_sample with a greedy sampler runs the penalty and argmax on the device; it must pick
// the CPU sampler's tokens, penalty on and off, and leave the same sequence behind.
TEST_F(CudaRunnerTest, GreedyForwardSampleMatchesCpuSampler) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  TinyModelSpec spec;
  spec.weight_dtype = DType::Q8_0;
  lio::LoadedModel m = load_tiny(spec);
  lio::CpuRunner cpu(m.config, m.weights);
  lio::cuda::CudaRunner gpu(m.config, m.weights);
  for (const float penalty : {1.0f, 1.5f, 0.8f}) {
    lio::SamplerConfig sc;
    sc.repeat_penalty = penalty;
    sc.repeat_last_n = 6;
    lio::Sampler cpu_sampler(sc), gpu_sampler(sc);
    std::vector<int32_t> cpu_seq = kPrompt, gpu_seq = kPrompt;
    cpu.reset(40);
    gpu.reset(40);
    for (int step = 0; step < 24; ++step) {
      const auto feed = [&](const std::vector<int32_t>& seq) {
        return step == 0 ? std::span<const int32_t>(seq) : std::span<const int32_t>(&seq.back(), 1);
      };
      const int32_t want = cpu.forward_sample(feed(cpu_seq), cpu_sampler, cpu_seq);
      const int32_t got = gpu.forward_sample(feed(gpu_seq), gpu_sampler, gpu_seq);
      ASSERT_EQ(got, want) << "penalty " << penalty << " step " << step;
      cpu_seq.push_back(want);
      gpu_seq.push_back(got);
    }
    EXPECT_EQ(gpu.kv_usage().n_tokens, cpu.kv_usage().n_tokens);
  }
}

// A NaN in the weights makes every logit NaN: the GPU's greedy path must reject the row with
// the CPU sampler's own message (it copies the row back for it), not return a token.
TEST_F(CudaRunnerTest, GreedyForwardSampleRejectsNaNLogitsLikeCpu) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  lio::LoadedModel m = load_tiny();
  m.weights.output_norm[0] = std::nanf("");
  lio::CpuRunner cpu(m.config, m.weights);
  lio::cuda::CudaRunner gpu(m.config, m.weights);
  lio::Sampler sampler{lio::SamplerConfig{}};
  cpu.reset(16);
  gpu.reset(16);
  std::string cpu_error, gpu_error;
  try {
    cpu.forward_sample(kPrompt, sampler, kPrompt);
  } catch (const lio::InvalidArgument& e) {
    cpu_error = e.what();
  }
  try {
    gpu.forward_sample(kPrompt, sampler, kPrompt);
  } catch (const lio::InvalidArgument& e) {
    gpu_error = e.what();
  }
  EXPECT_NE(cpu_error.find("NaN"), std::string::npos) << cpu_error;
  EXPECT_EQ(gpu_error, cpu_error);
}

// A history token outside the vocabulary is refused before anything runs on the device.
TEST_F(CudaRunnerTest, GreedyForwardSampleChecksHistoryFirst) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  TinyModelSpec spec;
  lio::LoadedModel m = load_tiny(spec);
  lio::cuda::CudaRunner gpu(m.config, m.weights);
  lio::SamplerConfig sc;
  sc.repeat_penalty = 1.2f;
  lio::Sampler sampler(sc);
  gpu.reset(16);
  const std::vector<int32_t> history = {1, static_cast<int32_t>(spec.vocab_size())};
  EXPECT_THROW(gpu.forward_sample(kPrompt, sampler, history), lio::InvalidArgument);
  EXPECT_EQ(gpu.kv_usage().n_tokens, 0);
}

TEST_F(CudaRunnerTest, RejectsBadCalls) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  TinyModelSpec spec;
  lio::LoadedModel m = load_tiny(spec);
  lio::cuda::CudaRunner gpu(m.config, m.weights);
  EXPECT_THROW(gpu.forward(kPrompt), lio::InvalidArgument);  // no reset() yet
  EXPECT_THROW(gpu.reset(0), lio::InvalidArgument);
  EXPECT_THROW(gpu.reset(m.config.context_length + 1), lio::InvalidArgument);
  gpu.reset(4);
  EXPECT_THROW(gpu.forward(kPrompt), lio::InvalidArgument);  // 9 tokens, room for 4
  const std::vector<int32_t> bad_id = {static_cast<int32_t>(spec.vocab_size())};
  EXPECT_THROW(gpu.forward(bad_id), lio::InvalidArgument);
  EXPECT_THROW(gpu.forward(std::vector<int32_t>{}), lio::InvalidArgument);
  // Nothing was consumed by the failed calls: the sequence still starts at position 0.
  EXPECT_EQ(gpu.kv_usage().n_tokens, 0);
  EXPECT_NO_THROW(gpu.forward(std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_THROW(gpu.forward(std::vector<int32_t>{5}), lio::InvalidArgument);  // cache full
}

// The real model (skips when scripts/setup.sh has not fetched it). Teacher-forced logits over
// a 100-token text: top-1 agreement >= 99% of positions and max error <= 1e-3 of the logit
// scale (both paths dequantize the same Q4_1 blocks and accumulate in f32); then 32 greedy
// tokens, which must be the CPU's exactly.
TEST_F(CudaRunnerTest, RealModelMatchesCpu) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const std::string path = lio::default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not fetched: " << path;
  lio::LoadedModel m = lio::load_model(path, lio::WeightMode::AsStored);
  const std::vector<int32_t> ids = m.tokenizer->encode(
      "The KV cache stores the keys and values of every earlier token, so a decode step only "
      "computes the newest token's projections. On a GPU, the weights stay in device memory and "
      "each step streams them once through the matrix-vector kernels; the prompt, processed in "
      "one batch, becomes a matrix multiplication that cuBLAS runs at full speed. Paris is the "
      "capital of France, and the Seine flows through it.",
      false, true);
  ASSERT_GE(ids.size(), 80u);
  lio::CpuRunner cpu(m.config, m.weights);
  lio::cuda::CudaRunner gpu(m.config, m.weights);
  cpu.reset(int64_t(ids.size()));
  gpu.reset(int64_t(ids.size()));
  const auto want = run(cpu, ids, true);
  const auto got = run(gpu, ids, true);
  const int64_t vocab = m.config.vocab_size;
  int64_t agree = 0;
  for (int64_t i = 0; i < int64_t(ids.size()); ++i)
    agree += argmax_row(got, i, vocab) == argmax_row(want, i, vocab);
  const double top1 = double(agree) / double(ids.size());
  const double rel = max_rel_error(got, want);
  std::printf("real model: %zu positions, top-1 agreement %.4f, max rel error %.3g\n", ids.size(),
              top1, rel);
  EXPECT_GE(top1, 0.99);
  EXPECT_LE(rel, 1e-3);

  lio::GenerateOptions g;
  g.max_tokens = 32;
  g.sampler.temperature = 0.0f;
  const std::vector<int32_t> prompt = m.tokenizer->encode("The capital of France is", false, true);
  const auto a = lio::generate(cpu, *m.tokenizer, prompt, g);
  const auto b = lio::generate(gpu, *m.tokenizer, prompt, g);
  std::printf("cpu:  %s\ncuda: %s\n", a.text.c_str(), b.text.c_str());
  EXPECT_EQ(b.token_ids, a.token_ids);
  EXPECT_EQ(b.text, a.text);
}

}  // namespace
