// lio::perplexity (chapter 03): llama-perplexity's procedure on our engine. Checked here
// against the definition computed independently from SoloSequence's all-position logits on a
// tiny random model: chunking, BOS substitution, second-half scoring, the count, the running
// values, and the errors. (Agreement with llama-perplexity itself on the real model is
// bench/03_quantization/check_perplexity.sh's job: the test suite does not depend on llama.cpp's
// tools.)
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "lio/error.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "lio/perplexity.h"
#include "tiny_model.h"

namespace {

class PerplexityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = lio::testing::make_temp_dir("lio_ppl");
    lio::testing::write_tiny_gguf(dir_ + "/m.gguf", lio::testing::TinyModelSpec{});
    model_ = lio::load_model(dir_ + "/m.gguf", lio::WeightMode::AsStored);
    runner_ = lio::make_runner(model_, lio::Device::Cpu, lio::KvPoolOptions{16, 4});
    for (int i = 0; i < 150; ++i) text_.push_back(3 + (i * 53 + i * i) % 250);
  }

  /// The definition, from all-position logits of each chunk run on its own.
  double reference_ppl(int64_t n_ctx, int32_t bos, int64_t n_chunks) {
    double nll = 0.0;
    int64_t count = 0;
    const int64_t vocab = model_.config.vocab_size;
    for (int64_t c = 0; c < n_chunks; ++c) {
      std::vector<int32_t> chunk(text_.begin() + c * n_ctx, text_.begin() + (c + 1) * n_ctx);
      if (bos >= 0) chunk[0] = bos;
      lio::SoloSequence seq(*runner_, n_ctx);
      const std::span<const float> logits = seq.forward(chunk, /*all_logits=*/true);
      for (int64_t j = n_ctx / 2; j + 1 < n_ctx; ++j) {
        const float* row = logits.data() + j * vocab;
        double mx = row[0], sum = 0.0;
        for (int64_t v = 0; v < vocab; ++v) mx = std::max(mx, static_cast<double>(row[v]));
        for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - mx);
        nll -= row[text_[static_cast<size_t>(c * n_ctx + j + 1)]] - mx - std::log(sum);
        ++count;
      }
    }
    return std::exp(nll / static_cast<double>(count));
  }

  std::string dir_;
  lio::LoadedModel model_;
  std::unique_ptr<lio::ModelRunner> runner_;
  std::vector<int32_t> text_;
};

TEST_F(PerplexityTest, MatchesTheDefinition) {
  const lio::PerplexityResult r = lio::perplexity(*runner_, text_, /*bos_id=*/1, 40);
  EXPECT_EQ(r.n_chunks, 3);  // 150 / 40: the last 30 tokens are dropped
  EXPECT_EQ(r.n_scored, 3 * (40 - 20 - 1));
  EXPECT_EQ(r.n_text_tokens, 150);
  ASSERT_EQ(r.running_ppl.size(), 3u);
  EXPECT_NEAR(r.ppl, reference_ppl(40, 1, 3), 1e-5 * r.ppl);
  EXPECT_NEAR(r.running_ppl[0], reference_ppl(40, 1, 1), 1e-5 * r.ppl);
  EXPECT_DOUBLE_EQ(r.running_ppl.back(), r.ppl);
  EXPECT_NEAR(std::log(r.ppl), r.mean_nll, 1e-12);
  EXPECT_GT(r.ppl_uncertainty, 0.0);
  EXPECT_LT(r.ppl_uncertainty, r.ppl);
}

TEST_F(PerplexityTest, BosReplacesEachChunksFirstTokenAndChunksCanBeLimited) {
  const lio::PerplexityResult with_bos = lio::perplexity(*runner_, text_, 1, 32, 2);
  const lio::PerplexityResult without = lio::perplexity(*runner_, text_, -1, 32, 2);
  EXPECT_EQ(with_bos.n_chunks, 2);
  EXPECT_NEAR(with_bos.ppl, reference_ppl(32, 1, 2), 1e-5 * with_bos.ppl);
  EXPECT_NEAR(without.ppl, reference_ppl(32, -1, 2), 1e-5 * without.ppl);
  EXPECT_NE(with_bos.ppl, without.ppl);
  int64_t calls = 0;
  lio::perplexity(*runner_, text_, -1, 32, 99, [&](int64_t i, double ppl) {
    EXPECT_EQ(i, calls++);
    EXPECT_GT(ppl, 0.0);
  });
  EXPECT_EQ(calls, 150 / 32);  // more chunks asked than the text has: all of them
}

TEST_F(PerplexityTest, RejectsBadSettings) {
  EXPECT_THROW(lio::perplexity(*runner_, text_, 1, 76), lio::InvalidArgument);  // text < 2 n_ctx
  EXPECT_THROW(lio::perplexity(*runner_, text_, 1, 3), lio::InvalidArgument);   // nothing to score
  EXPECT_THROW(lio::perplexity(*runner_, text_, 1, 40, 0), lio::InvalidArgument);
  EXPECT_THROW(lio::perplexity(*runner_, text_, 1, 257), lio::InvalidArgument);  // past the context
  lio::ModelRunner small(lio::make_backend(model_, lio::Device::Cpu), lio::KvPoolConfig{16, 2});
  EXPECT_THROW(lio::perplexity(small, text_, 1, 40), lio::InvalidArgument);  // 3 blocks needed, 2 held
  EXPECT_NO_THROW(lio::perplexity(small, text_, 1, 32, 1));                   // 2 blocks: fits
}

}  // namespace
