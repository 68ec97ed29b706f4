// Chapter 07 on the real model (SmolLM2-135M-Instruct Q4_1, fetched by scripts/setup.sh; the test
// skips when the file is absent): a 2,048-token text (the course's own lessons) fed in chunks of
// 512, with the engine's default attention (cpu::flash_attention) and with the naive twin
// (--attention-backend naive: the score matrix materialized). The logits agree within 1e-4
// relative (to the row's largest |logit|) after every chunk, and 16 greedy tokens after the
// text are identical. (Each chunk spans many key tiles and reads every earlier chunk's; the
// kernel alone is checked at 8,192 tokens in test_kernels_flash_attention.cpp. 4,000 tokens
// here cost CI two minutes for no path these do not take.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "lio/sampler.h"

namespace {

constexpr int64_t kTextTokens = 2048, kChunk = 512, kGreedy = 16;

struct BackendRun {
  std::vector<std::vector<float>> chunk_logits;  // the last row after each chunk
  std::vector<int32_t> greedy;
};

BackendRun run_backend(const lio::LoadedModel& m, const std::vector<int32_t>& text, lio::AttentionBackend backend) {
  lio::ModelRunner runner(lio::make_backend(m, lio::Device::Cpu, lio::ActivationPrecision::F32, backend),
                          lio::KvPoolConfig{16, (kTextTokens + kGreedy) / 16 + 2});
  lio::SoloSequence seq(runner, kTextTokens + kGreedy);
  BackendRun r;
  std::span<const float> logits;
  for (int64_t at = 0; at < kTextTokens; at += kChunk) {
    logits = seq.forward(std::span<const int32_t>(text).subspan(static_cast<size_t>(at), kChunk));
    r.chunk_logits.emplace_back(logits.begin(), logits.end());
  }
  for (int64_t i = 0; i < kGreedy; ++i) {
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    r.greedy.push_back(next);
    logits = seq.forward(std::span<const int32_t>(&r.greedy.back(), 1));
  }
  return r;
}

TEST(FlashAttentionRealModel, TwoThousandTokensInChunksMatchTheNaiveTwin) {
  const std::string path = lio::default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found: " << path << " (run scripts/setup.sh)";
  const lio::LoadedModel m = lio::load_model(path, lio::WeightMode::AsStored);
  std::string text;
  for (const char* doc : {"docs/04_paged_attention.md", "docs/05_continuous_batching.md", "docs/06_speculative.md",
                          "docs/03_quantization.md"}) {
    std::ifstream in(std::string(LIO_SOURCE_DIR) + "/" + doc);
    ASSERT_TRUE(in) << doc;
    std::stringstream s;
    s << in.rdbuf();
    text += s.str();
  }
  std::vector<int32_t> ids = m.tokenizer->encode(text, false, false);
  ASSERT_GE(static_cast<int64_t>(ids.size()), kTextTokens);
  ids.resize(kTextTokens);
  const BackendRun flash = run_backend(m, ids, lio::AttentionBackend::Flash);
  const BackendRun naive = run_backend(m, ids, lio::AttentionBackend::Naive);
  for (size_t c = 0; c < flash.chunk_logits.size(); ++c) {
    const std::vector<float>& a = flash.chunk_logits[c];
    const std::vector<float>& b = naive.chunk_logits[c];
    float worst = 0.0f, scale = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) {
      worst = std::max(worst, std::fabs(a[i] - b[i]));
      scale = std::max(scale, std::fabs(b[i]));
    }
    EXPECT_LT(worst, 1e-4f * scale) << "after chunk " << c << " (" << (c + 1) * kChunk << " tokens)";
  }
  ASSERT_EQ(flash.greedy.size(), static_cast<size_t>(kGreedy));
  EXPECT_EQ(flash.greedy, naive.greedy);
}

}  // namespace
