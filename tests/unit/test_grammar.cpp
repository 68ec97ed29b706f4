// Structured outputs (lio/grammar.h): compiling schemas and grammars against a tiny model's
// byte-level vocabulary, the matcher's masks, the sampler obeying a mask, and the engine's
// constrained sequences (batched, sampled, forked, speculating: drafts checked against the
// grammar, one mask per verified row) whose every output follows its grammar. Bad specs are InvalidArgument.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lio/cpu_backend.h"
#include "lio/engine.h"
#include "lio/error.h"
#include "lio/grammar.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "lio/sampler.h"
#include "tiny_model.h"

namespace {

using lio::GrammarSpec;
using Kind = lio::GrammarSpec::Kind;

class GrammarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lio::testing::TinyModelSpec spec;
    spec.context_length = 256;
    lio::testing::write_tiny_gguf(dir_ + "/m.gguf", spec);
    model_ = std::make_unique<lio::LoadedModel>(lio::load_model(dir_ + "/m.gguf", lio::WeightMode::AsStored));
    compiler_ = std::make_unique<lio::GrammarCompiler>(tok(), model_->config.vocab_size);
  }
  const lio::Tokenizer& tok() const { return *model_->tokenizer; }
  int64_t vocab() const { return model_->config.vocab_size; }
  std::shared_ptr<const lio::CompiledGrammar> compile(Kind kind, std::string source = "") const {
    return compiler_->compile(GrammarSpec{kind, std::move(source)});
  }
  /// The tokens a mask allows.
  static std::vector<int32_t> allowed(std::span<const uint32_t> mask, int64_t vocab) {
    std::vector<int32_t> out;
    for (int64_t t = 0; t < vocab; ++t)
      if ((mask[static_cast<size_t>(t / 32)] >> (t % 32)) & 1u) out.push_back(static_cast<int32_t>(t));
    return out;
  }
  std::unique_ptr<lio::ModelRunner> runner() const {
    return std::make_unique<lio::ModelRunner>(std::make_unique<lio::CpuBackend>(model_->config, model_->weights),
                                              lio::KvPoolConfig{16, 256, lio::KvCacheDType::F32});
  }
  /// Runs the engine until every request ends; the generated ids and finish reasons by
  /// (request id, sample index).
  static std::map<std::pair<int64_t, int64_t>, lio::RequestOutput> run_all(lio::Engine& e) {
    std::map<std::pair<int64_t, int64_t>, lio::RequestOutput> out;
    for (int guard = 0; e.has_unfinished() && guard < 2000; ++guard) {
      for (lio::RequestOutput& o : e.step()) {
        lio::RequestOutput& acc = out[{o.request_id, o.sample_index}];
        acc.new_token_ids.insert(acc.new_token_ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        acc.new_text += o.new_text;
        acc.finish_reason = o.finish_reason;
      }
    }
    EXPECT_FALSE(e.has_unfinished()) << "the engine did not finish";
    return out;
  }
  std::string dir_ = lio::testing::make_temp_dir("lio_test_grammar");
  std::unique_ptr<lio::LoadedModel> model_;
  std::unique_ptr<lio::GrammarCompiler> compiler_;
};

TEST_F(GrammarTest, MaskFollowsTheGrammarToItsStopToken) {
  lio::GrammarMatcher m(compile(Kind::Ebnf, R"(root ::= "yes" | "no")"));
  std::vector<uint32_t> mask(static_cast<size_t>(lio::bitmask_words(vocab())));
  const int32_t y = tok().token_id("y"), e = tok().token_id("e"), s = tok().token_id("s"), n = tok().token_id("n");
  ASSERT_GE(y, 0);
  ASSERT_GE(n, 0);
  // First: only tokens that start "yes" or "no" (single bytes here: no merge spells more).
  EXPECT_EQ(m.fill_next_token_mask(mask), 2);
  const std::vector<int32_t> first = allowed(mask, vocab());
  EXPECT_EQ(first, (std::vector<int32_t>{std::min(y, n), std::max(y, n)}));
  EXPECT_FALSE(m.accept_token(tok().token_id("x")));  // refused, and nothing moved
  ASSERT_TRUE(m.accept_token(y));
  ASSERT_TRUE(m.accept_token(e));
  EXPECT_FALSE(m.is_completed());
  ASSERT_TRUE(m.accept_token(s));
  EXPECT_TRUE(m.is_completed());
  // Complete: only the end-of-generation tokens may follow (the tiny vocabulary's EOS
  // <|im_end|> and <|endoftext|>).
  EXPECT_GE(m.fill_next_token_mask(mask), 1);
  for (const int32_t t : allowed(mask, vocab())) EXPECT_TRUE(tok().is_eog(t)) << t;
  EXPECT_TRUE((mask[static_cast<size_t>(tok().eos_id() / 32)] >> (tok().eos_id() % 32)) & 1u);
  m.rollback(3);  // back to the start: "no" is allowed again
  m.fill_next_token_mask(mask);
  EXPECT_EQ(allowed(mask, vocab()), first);
  EXPECT_THROW(m.rollback(1), lio::InvalidArgument);
  ASSERT_TRUE(m.accept_token(n));
  ASSERT_TRUE(m.accept_token(tok().token_id("o")));
  ASSERT_TRUE(m.accept_token(tok().eos_id()));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_EQ(m.fill_next_token_mask(mask), 0);
  EXPECT_FALSE(m.accept_token(n));
  std::vector<uint32_t> wrong(mask.size() + 1);
  EXPECT_THROW(m.fill_next_token_mask(wrong), lio::InvalidArgument);
}

TEST_F(GrammarTest, ControlTokensAndPaddedIdsAreNeverAllowed) {
  lio::GrammarCompiler padded(tok(), vocab() + 40);  // logits wider than the vocabulary
  lio::GrammarMatcher m(padded.compile({Kind::JsonObject, ""}));
  std::vector<uint32_t> mask(static_cast<size_t>(lio::bitmask_words(vocab() + 40)));
  EXPECT_GT(m.fill_next_token_mask(mask), 0);
  for (const int32_t t : allowed(mask, vocab() + 40)) {
    EXPECT_LT(t, vocab());
    EXPECT_FALSE(tok().is_control(t)) << t;
  }
  EXPECT_THROW(lio::GrammarCompiler(tok(), vocab() - 1), lio::InvalidArgument);
}

TEST_F(GrammarTest, BadSpecsAreInvalidArgumentNamingTheProblem) {
  const auto message = [&](Kind kind, const std::string& source) {
    try {
      compile(kind, source);
    } catch (const lio::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("(compiled)");
  };
  EXPECT_NE(message(Kind::None, "").find("nothing to compile"), std::string::npos);
  EXPECT_NE(message(Kind::JsonSchema, "{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(message(Kind::JsonSchema, "[1, 2]").find("JSON object"), std::string::npos);
  std::string deep = R"({"type": "string"})";
  for (int i = 0; i < lio::kMaxSchemaDepth; ++i) deep = R"({"type": "array", "items": )" + deep + "}";
  EXPECT_NE(message(Kind::JsonSchema, deep).find("levels deep"), std::string::npos);
  // The most a 64 KiB source can nest: refused by the depth bound, not by a stack overflow.
  const size_t half = lio::kMaxGrammarSourceBytes / 2;
  EXPECT_NE(message(Kind::JsonSchema, std::string(half, '[') + std::string(half, ']')).find("JSON object"),
            std::string::npos);
  EXPECT_NE(message(Kind::JsonSchema, "{\"a\": " + std::string(half - 8, '[') + std::string(half - 8, ']') + "}")
                .find("levels deep"),
            std::string::npos);
  EXPECT_NE(message(Kind::JsonSchema, std::string(lio::kMaxGrammarSourceBytes + 1, ' ')).find("bytes"),
            std::string::npos);
  EXPECT_NE(message(Kind::JsonSchema, R"({"type": "no-such-type"})").find("json_schema"), std::string::npos);
  EXPECT_NE(message(Kind::Ebnf, "root ::= (").find("grammar"), std::string::npos);
  EXPECT_NE(message(Kind::Ebnf, "start ::= \"a\"").find("grammar"), std::string::npos);  // no root rule
  EXPECT_NE(message(Kind::Regex, "(unclosed").find("regex"), std::string::npos);
  const std::string deep_ebnf = "root ::= " + std::string(100, '(') + "\"a\"" + std::string(100, ')');
  EXPECT_NE(message(Kind::Ebnf, deep_ebnf).find("nest"), std::string::npos);
  EXPECT_NE(message(Kind::Regex, std::string(100, '(') + "a" + std::string(100, ')')).find("nest"), std::string::npos);
  // Brackets inside quotes and classes do not count.
  EXPECT_EQ(message(Kind::Ebnf, "root ::= \"" + std::string(100, '(') + "\""), "(compiled)");
  EXPECT_EQ(message(Kind::JsonObject, ""), "(compiled)");
  EXPECT_EQ(message(Kind::Regex, "[0-9]{3}"), "(compiled)");
}

TEST_F(GrammarTest, SamplerObeysTheMaskAndKeepsRawLogprobs) {
  lio::SamplerConfig cfg;
  cfg.logprobs = 0;
  lio::Sampler sampler(cfg);
  std::vector<float> logits(static_cast<size_t>(vocab()), 0.0f);
  logits[5] = 10.0f;  // the argmax, which the mask forbids
  logits[7] = 1.0f;
  std::span<uint32_t> mask = sampler.token_mask(vocab());
  EXPECT_TRUE(sampler.has_token_mask());
  mask[0] |= (1u << 7) | (1u << 9);
  std::vector<float> row = logits;
  EXPECT_EQ(sampler.sample(row, {}), 7);
  // The logprob reported is the model's, over the unmasked row (vLLM's default).
  EXPECT_LT(sampler.last_logprobs().sampled.logprob, -5.0f);
  sampler.clear_token_mask();
  row = logits;
  EXPECT_EQ(sampler.sample(row, {}), 5);
  sampler.token_mask(vocab() + 32);  // a mask for another vocabulary size
  row = logits;
  EXPECT_THROW(sampler.sample(row, {}), lio::InvalidArgument);
}

TEST_F(GrammarTest, EngineOutputsFollowTheirSchemaBatchedSampledAndForked) {
  // Each output of a constrained request is a complete match ending at the stop token, beside
  // an unconstrained request in the same batch; greedy, sampled and n = 3 forked samples.
  const std::string schema =
      R"({"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 22, 333]}},
          "required": ["ok", "n"], "additionalProperties": false})";
  const auto grammar = compile(Kind::JsonSchema, schema);
  for (const bool spec : {false, true}) {
    auto r = runner();
    lio::EngineConfig cfg;
    if (spec) cfg.speculative.method = lio::SpecMethod::Ngram;
    lio::Engine e(*r, tok(), cfg);
    lio::SamplingParams greedy;
    greedy.max_tokens = 60;
    greedy.grammar = grammar;
    lio::SamplingParams sampled = greedy;
    sampled.sampler.temperature = 1.0f;
    sampled.sampler.seed = 7;
    sampled.n = 3;
    lio::SamplingParams free;
    free.max_tokens = 20;
    free.ignore_eos = true;
    const int64_t a = e.add_request({3, 4, 5, 6}, greedy);
    const int64_t b = e.add_request({7, 8, 9}, sampled);
    const int64_t c = e.add_request({10, 11}, free);
    const auto out = run_all(e);
    int checked = 0;
    for (const auto& [key, o] : out) {
      if (key.first == c) {
        EXPECT_EQ(o.new_token_ids.size(), 20u);
        continue;
      }
      ASSERT_TRUE(key.first == a || key.first == b);
      EXPECT_EQ(o.finish_reason, lio::FinishReason::Stop) << o.new_text;
      const nlohmann::json j = nlohmann::json::parse(o.new_text, nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << "spec " << spec << ": " << o.new_text;
      EXPECT_TRUE(j.at("ok").is_boolean()) << o.new_text;
      const int n = j.at("n").get<int>();
      EXPECT_TRUE(n == 1 || n == 22 || n == 333) << o.new_text;
      EXPECT_EQ(j.size(), 2u) << o.new_text;
      ++checked;
    }
    EXPECT_EQ(checked, 4);  // a, and b's three samples
    EXPECT_GT(e.stats().n_grammar_masks, 0);
  }
}

TEST_F(GrammarTest, SpeculationChecksDraftsAgainstTheGrammar) {
  // A repetitive schema (eight equal array items) gives prompt lookup drafts to verify, some
  // of which the grammar refuses (a ninth item where it wants "]"); early exit drafts from the
  // model itself, sampled drafts with their probabilities. Greedy output equals the greedy
  // output without speculation token for token, every output follows its schema, drafts were
  // verified, and each verified row had its own mask.
  const std::string schema =
      R"({"type": "array", "items": {"enum": ["ab", "cd"]}, "minItems": 8, "maxItems": 8})";
  const auto grammar = compile(Kind::JsonSchema, schema);
  const std::vector<int32_t> prompt{3, 4, 5, 6, 3, 4, 5, 6};
  lio::SamplingParams greedy;
  greedy.max_tokens = 80;
  greedy.grammar = grammar;
  lio::SamplingParams sampled = greedy;
  sampled.sampler.temperature = 0.8f;
  sampled.sampler.seed = 11;
  std::vector<int32_t> plain;
  {
    auto r = runner();
    lio::Engine e(*r, tok());
    const int64_t id = e.add_request(prompt, greedy);
    plain = run_all(e).at({id, 0}).new_token_ids;
  }
  ASSERT_FALSE(plain.empty());
  for (const lio::SpecMethod method : {lio::SpecMethod::Ngram, lio::SpecMethod::EarlyExit}) {
    auto r = runner();
    lio::EngineConfig cfg;
    cfg.speculative.method = method;
    cfg.speculative.num_speculative_tokens = 4;
    if (method == lio::SpecMethod::EarlyExit) cfg.speculative.draft_layers = 1;
    lio::Engine e(*r, tok(), cfg);
    const int64_t g = e.add_request(prompt, greedy);
    const int64_t s = e.add_request(prompt, sampled);
    const auto out = run_all(e);
    const std::string name = method == lio::SpecMethod::Ngram ? "ngram" : "early exit";
    EXPECT_EQ(out.at({g, 0}).new_token_ids, plain) << name << ": " << out.at({g, 0}).new_text;
    int64_t n_out = 0;
    for (const int64_t id : {g, s}) {
      const lio::RequestOutput& o = out.at({id, 0});
      EXPECT_EQ(o.finish_reason, lio::FinishReason::Stop) << name << ": " << o.new_text;
      const nlohmann::json j = nlohmann::json::parse(o.new_text, nullptr, false);
      ASSERT_TRUE(j.is_array()) << name << ": " << o.new_text;
      EXPECT_EQ(j.size(), 8u) << name << ": " << o.new_text;
      for (const nlohmann::json& item : j) EXPECT_TRUE(item == "ab" || item == "cd") << o.new_text;
      n_out += static_cast<int64_t>(o.new_token_ids.size());
    }
    EXPECT_GT(e.stats().spec_num_draft_tokens, 0) << name;
    EXPECT_GT(e.stats().spec_num_accepted_tokens, 0) << name;
    // One mask per sampling round of a sequence plus one per draft it verified; a round gives
    // its 1 + accepted tokens, less at the end (per sequence the stop token is not output, and
    // a stop accepted as a draft drops the token after it).
    const int64_t rounds = e.stats().n_grammar_masks - e.stats().spec_num_draft_tokens;
    EXPECT_GE(rounds, n_out - e.stats().spec_num_accepted_tokens) << name;
    EXPECT_LE(rounds, n_out + 4 - e.stats().spec_num_accepted_tokens) << name;
  }
}

TEST_F(GrammarTest, GrammarWithIgnoreEosIsRefused) {
  auto r = runner();
  lio::Engine e(*r, tok());
  lio::SamplingParams p;
  p.grammar = compile(Kind::JsonObject);
  p.ignore_eos = true;
  EXPECT_THROW(e.add_request({3, 4}, p), lio::InvalidArgument);
  EXPECT_FALSE(e.has_unfinished());
}

}  // namespace
