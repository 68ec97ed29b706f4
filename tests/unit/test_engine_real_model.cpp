// The batched engine on the real model (SmolLM2-135M-Instruct Q4_1, fetched by
// scripts/setup.sh; the test skips when the file is absent): eight chat prompts of different
// lengths generated greedily together — prompts chunked by a small token budget and mixed with
// decode rows — give exactly the tokens each gives alone.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "lio/engine.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "sanitizer.h"

namespace {

TEST(EngineRealModel, EightChatPromptsTogetherGiveTheTokensEachGivesAlone) {
  const std::string path = lio::default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found: " << path << " (run scripts/setup.sh)";
  const lio::LoadedModel m = lio::load_model(path, lio::WeightMode::AsStored);
  std::vector<std::string> questions = {
      "Hi!",
      "What is the capital of France?",
      "Name three primary colors.",
      "Write one sentence about the ocean and why it matters to the climate of the planet.",
      "How many legs does a spider have?",
      "Explain in a few words what a KV cache is used for in a transformer language model when "
      "it generates text one token at a time.",
      "2 + 2 = ?",
      "Give me a short list of fruits that are red, and tell me which one you like best and why."};
  if (lio::test::kAddressSanitizer) {
    // Under ASan (several times slower) four of them: the three long ones, which arrive in chunks,
    // and a short one. The default build runs all eight.
    questions = {questions[0], questions[3], questions[5], questions[7]};
  }
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& q : questions) {
    const std::vector<lio::ChatMessage> chat = {{"user", q}};
    prompts.push_back(
        m.tokenizer->encode(m.tokenizer->apply_chat_template(chat, true), true, m.tokenizer->add_bos_default()));
  }
  lio::SamplingParams params;
  params.max_tokens = 12;
  params.ignore_eos = true;
  auto run = [&](const std::vector<size_t>& which, int64_t budget) {
    lio::ModelRunner runner(lio::make_backend(m, lio::Device::Cpu), lio::KvPoolConfig{16, 128});
    lio::EngineConfig cfg;
    cfg.scheduler.max_num_batched_tokens = budget;
    lio::Engine engine(runner, *m.tokenizer, cfg);
    std::map<int64_t, size_t> index;
    for (size_t i : which) index[engine.add_request(prompts[i], params)] = i;
    std::map<size_t, std::vector<int32_t>> out;
    while (engine.has_unfinished())
      for (const lio::RequestOutput& o : engine.step()) {
        auto& ids = out[index.at(o.request_id)];
        ids.insert(ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      }
    EXPECT_EQ(engine.n_free_blocks(), 128);
    return out;
  };
  std::vector<size_t> all;
  for (size_t i = 0; i < prompts.size(); ++i) all.push_back(i);
  const auto together = run(all, /*budget=*/48);  // longer prompts arrive in chunks
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto alone = run({i}, /*budget=*/8192);
    ASSERT_EQ(alone.at(i).size(), 12u);
    EXPECT_EQ(together.at(i), alone.at(i)) << "prompt " << i << ": " << questions[i];
  }
}

}  // namespace
