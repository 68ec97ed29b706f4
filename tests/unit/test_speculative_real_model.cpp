// Speculative decoding on the real model (SmolLM2-135M-Instruct Q4_1, fetched by
// scripts/setup.sh; the test skips when the file is absent): greedy speculation with each of
// the three drafters gives exactly plain greedy's tokens, for a request alone and for sixteen
// requests in one engine (prompts chunked by a small token budget, mixed with decode and
// verification rows). The draft model is the F32 copy setup.sh makes (skipped if absent): the
// same network in another format, so most drafts are accepted and some are not.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lio/engine.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "lio/speculative.h"

namespace {

TEST(SpeculativeRealModel, GreedySpeculationGivesPlainTokensAloneAndInABatchOfSixteen) {
  const std::string path = lio::default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found: " << path << " (run scripts/setup.sh)";
  const lio::LoadedModel m = lio::load_model(path, lio::WeightMode::AsStored);
  std::string f32 = path;
  f32.replace(f32.rfind(".Q4_1.gguf"), 10, ".F32.gguf");
  const bool have_f32 = std::filesystem::exists(f32);
  std::unique_ptr<lio::LoadedModel> draft_model;
  if (have_f32) draft_model = std::make_unique<lio::LoadedModel>(lio::load_model(f32, lio::WeightMode::AsStored));

  const std::vector<std::string> questions = {
      "Repeat exactly: the quick brown fox jumps over the lazy dog, the quick brown fox jumps over the lazy dog.",
      "What is the capital of France?",
      "Name three primary colors.",
      "Write one sentence about the ocean.",
      "Rewrite with 'dog' instead of 'cat': The cat sat on the mat. The cat slept. The cat ate.",
      "Explain in a few words what a KV cache is.",
      "2 + 2 = ?",
      "List the days of the week.",
  };
  std::vector<std::vector<int32_t>> prompts;
  for (int rep = 0; rep < 2; ++rep) {
    for (const std::string& q : questions) {
      const std::vector<lio::ChatMessage> chat = {{"user", rep == 0 ? q : q + " Answer briefly."}};
      prompts.push_back(
          m.tokenizer->encode(m.tokenizer->apply_chat_template(chat, true), true, m.tokenizer->add_bos_default()));
    }
  }
  lio::SamplingParams params;
  params.max_tokens = 16;
  params.ignore_eos = true;
  auto run = [&](const std::vector<size_t>& which, const lio::SpeculativeConfig& spec, lio::EngineStats* stats) {
    lio::ModelRunner runner(lio::make_backend(m, lio::Device::Cpu), lio::KvPoolConfig{16, 256});
    std::unique_ptr<lio::ModelRunner> draft;
    if (spec.method == lio::SpecMethod::Draft)
      draft = std::make_unique<lio::ModelRunner>(lio::make_backend(*draft_model, lio::Device::Cpu), lio::KvPoolConfig{16, 256});
    lio::EngineConfig cfg;
    cfg.scheduler.max_num_batched_tokens = 64;
    cfg.speculative = spec;
    lio::Engine engine(runner, *m.tokenizer, cfg, draft.get());
    std::map<int64_t, size_t> index;
    for (size_t i : which) index[engine.add_request(prompts[i], params)] = i;
    std::map<size_t, std::vector<int32_t>> out;
    while (engine.has_unfinished())
      for (const lio::RequestOutput& o : engine.step()) {
        auto& ids = out[index.at(o.request_id)];
        ids.insert(ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      }
    EXPECT_EQ(engine.n_free_blocks(), 256);
    if (stats) *stats = engine.stats();
    return out;
  };
  std::vector<size_t> all;
  for (size_t i = 0; i < prompts.size(); ++i) all.push_back(i);
  const auto plain = run(all, {}, nullptr);

  std::vector<lio::SpeculativeConfig> specs = {{lio::SpecMethod::Ngram, 4, 0, 1, 4},
                                               {lio::SpecMethod::EarlyExit, 3, 20, 1, 4}};
  if (have_f32) specs.push_back({lio::SpecMethod::Draft, 4, 0, 1, 4});
  for (const lio::SpeculativeConfig& spec : specs) {
    SCOPED_TRACE(lio::spec_method_name(spec.method));
    lio::EngineStats st;
    const auto together = run(all, spec, &st);
    EXPECT_GT(st.spec_num_accepted_tokens, 0) << "nothing accepted: the test would not exercise acceptance";
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_EQ(together.at(i).size(), 16u);
      EXPECT_EQ(together.at(i), plain.at(i)) << "prompt " << i << " in the batch of 16";
    }
    for (size_t i : {size_t{0}, size_t{4}}) {  // the repetitive ones, alone
      const auto alone = run({i}, spec, nullptr);
      EXPECT_EQ(alone.at(i), plain.at(i)) << "prompt " << i << " alone";
    }
  }
  if (!have_f32) GTEST_SKIP() << "F32 copy not found: " << f32 << " (the draft-model case did not run)";
}

}  // namespace
