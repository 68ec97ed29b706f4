// lio-server without HTTP: request parsing and validation (chapters/09_server/openai_protocol),
// response and chunk shapes (openai_response), the Prometheus text (metrics), and the engine
// support the server relies on (presence / frequency penalties and logprobs in the sampler,
// RequestOutput::logprobs). Tokenizer-dependent cases use a tiny random-weight model.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine_loop.h"
#include "lio/cpu_backend.h"
#include "lio/engine.h"
#include "lio/error.h"
#include "lio/model_loader.h"
#include "lio/sampler.h"
#include "metrics.h"
#include "openai_protocol.h"
#include "openai_response.h"
#include "tiny_model.h"

namespace {

using lio::server::ApiError;
using lio::server::Endpoint;
using lio::server::GenerationRequest;
using lio::server::parse_chat_request;
using lio::server::parse_completion_request;

/// The ApiError `f` throws (fails the test if it throws none).
template <class F>
ApiError error_of(F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no ApiError thrown";
  return ApiError(0, "none");
}

// ==== completions: accepted requests ==========================================================

TEST(ServerProtocol, CompletionDefaultsFollowOpenAI) {
  const GenerationRequest r = parse_completion_request(R"({"model": "m", "prompt": "Hello"})");
  EXPECT_EQ(r.endpoint, Endpoint::Completions);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_FALSE(r.prompts[0].is_tokens);
  EXPECT_EQ(r.prompts[0].text, "Hello");
  EXPECT_FLOAT_EQ(r.params.sampler.temperature, 1.0f);
  EXPECT_EQ(r.params.n, 1);
  EXPECT_FALSE(r.max_tokens_given);
  EXPECT_FALSE(r.seed_given);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.params.sampler.logprobs, -1);
}

TEST(ServerProtocol, CompletionFieldsMapToEngineParams) {
  const GenerationRequest r = parse_completion_request(
      R"({"prompt": "x", "max_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": -1, "min_p": 0.1,
          "presence_penalty": 1.5, "frequency_penalty": -0.5, "repetition_penalty": 1.2, "seed": 9,
          "stop": "\n", "n": 3, "logprobs": 2, "ignore_eos": true, "stream": true,
          "stream_options": {"include_usage": true}, "user": "u", "some_future_field": [1, 2]})");
  EXPECT_EQ(r.params.max_tokens, 7);
  EXPECT_TRUE(r.max_tokens_given);
  EXPECT_FLOAT_EQ(r.params.sampler.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.params.sampler.top_p, 0.5f);
  EXPECT_EQ(r.params.sampler.top_k, 0);  // -1 = off
  EXPECT_FLOAT_EQ(r.params.sampler.min_p, 0.1f);
  EXPECT_FLOAT_EQ(r.params.sampler.presence_penalty, 1.5f);
  EXPECT_FLOAT_EQ(r.params.sampler.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.params.sampler.repeat_penalty, 1.2f);
  EXPECT_EQ(r.params.sampler.seed, 9u);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.params.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(r.params.n, 3);
  EXPECT_EQ(r.params.sampler.logprobs, 2);
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(ServerProtocol, CompletionPromptForms) {
  const GenerationRequest ids = parse_completion_request(R"({"prompt": [5, 6, 7]})");
  ASSERT_EQ(ids.prompts.size(), 1u);
  EXPECT_TRUE(ids.prompts[0].is_tokens);
  EXPECT_EQ(ids.prompts[0].token_ids, (std::vector<int32_t>{5, 6, 7}));

  const GenerationRequest texts = parse_completion_request(R"({"prompt": ["a", "b"]})");
  ASSERT_EQ(texts.prompts.size(), 2u);
  EXPECT_EQ(texts.prompts[1].text, "b");

  const GenerationRequest lists = parse_completion_request(R"({"prompt": [[1], [2, 3], "c"]})");
  ASSERT_EQ(lists.prompts.size(), 3u);
  EXPECT_EQ(lists.prompts[1].token_ids, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(lists.prompts[2].text, "c");
}

TEST(ServerProtocol, NullMeansNotGiven) {
  const GenerationRequest r = parse_completion_request(
      R"({"prompt": "x", "max_tokens": null, "temperature": null, "stop": null, "logprobs": null, "n": null})");
  EXPECT_FALSE(r.max_tokens_given);
  EXPECT_FLOAT_EQ(r.params.sampler.temperature, 1.0f);
  EXPECT_TRUE(r.params.stop.empty());
  EXPECT_EQ(r.params.sampler.logprobs, -1);
}

// ==== chat: accepted requests =================================================================

TEST(ServerProtocol, ChatMessagesAndContentParts) {
  const GenerationRequest r = parse_chat_request(
      R"({"messages": [{"role": "developer", "content": "Be brief."},
                       {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]},
                       {"role": "assistant", "content": null},
                       {"role": "user", "content": "Again", "name": "bob"}],
          "max_completion_tokens": 5, "max_tokens": 9, "logprobs": true, "top_logprobs": 3})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");  // developer -> system
  EXPECT_EQ(r.messages[1].content, "Hi\nthere");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.params.max_tokens, 5);  // max_completion_tokens wins
  EXPECT_EQ(r.params.sampler.logprobs, 3);
}

TEST(ServerProtocol, ChatLogprobsWithoutTopGivesZeroAlternatives) {
  const GenerationRequest r =
      parse_chat_request(R"({"messages": [{"role": "user", "content": "Hi"}], "logprobs": true})");
  EXPECT_EQ(r.params.sampler.logprobs, 0);
  const GenerationRequest off =
      parse_chat_request(R"({"messages": [{"role": "user", "content": "Hi"}], "logprobs": false})");
  EXPECT_EQ(off.params.sampler.logprobs, -1);
}

// ==== malformed requests ======================================================================

struct BadCase {
  Endpoint endpoint;
  std::string body;
  std::string param;  ///< the field the error must name ("" = none)
};

TEST(ServerProtocol, EveryMalformedRequestIs400NamingTheField) {
  const std::string msg = R"("messages": [{"role": "user", "content": "Hi"}])";
  const std::vector<BadCase> cases = {
      {Endpoint::Completions, R"({"prompt": "x")", ""},               // truncated JSON
      {Endpoint::Completions, "{\"prompt\": \"\xff\xfe\"}", ""},      // invalid UTF-8
      {Endpoint::Completions, "{\"prompt\": \"\xed\xa0\x80\"}", ""},  // a UTF-16 surrogate
      {Endpoint::Completions, "{\"prompt\": \"\xe2\x82\"}", ""},      // truncated character
      {Endpoint::Completions, R"([1, 2])", ""},                       // not an object
      {Endpoint::Completions, R"({})", "prompt"},
      {Endpoint::Completions, R"({"prompt": 5})", "prompt"},
      {Endpoint::Completions, R"({"prompt": []})", "prompt"},
      {Endpoint::Completions, R"({"prompt": [1, "a"]})", "prompt[1]"},
      {Endpoint::Completions, R"({"prompt": [-1]})", "prompt[0]"},
      {Endpoint::Completions, R"({"prompt": [[]]})", "prompt[0]"},
      {Endpoint::Completions, R"({"prompt": ["a", 3]})", "prompt[1]"},
      {Endpoint::Completions, R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {Endpoint::Completions, R"({"prompt": "x", "temperature": 2.5})", "temperature"},
      {Endpoint::Completions, R"({"prompt": "x", "temperature": -0.1})", "temperature"},
      {Endpoint::Completions, R"({"prompt": "x", "top_p": 0})", "top_p"},
      {Endpoint::Completions, R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {Endpoint::Completions, R"({"prompt": "x", "top_k": -2})", "top_k"},
      {Endpoint::Completions, R"({"prompt": "x", "min_p": 2})", "min_p"},
      {Endpoint::Completions, R"({"prompt": "x", "n": 0})", "n"},
      {Endpoint::Completions, R"({"prompt": "x", "n": 100000})", "n"},
      {Endpoint::Completions, R"({"prompt": "x", "n": 2.5})", "n"},
      {Endpoint::Completions, R"({"prompt": "x", "n": true})", "n"},
      {Endpoint::Completions, R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {Endpoint::Completions, R"({"prompt": "x", "max_tokens": -5})", "max_tokens"},
      {Endpoint::Completions, R"({"prompt": "x", "max_tokens": 18446744073709551615})",
       "max_tokens"},
      {Endpoint::Completions, R"({"prompt": "x", "max_tokens": "10"})", "max_tokens"},
      {Endpoint::Completions, R"({"prompt": "x", "presence_penalty": 2.5})", "presence_penalty"},
      {Endpoint::Completions, R"({"prompt": "x", "frequency_penalty": -3})", "frequency_penalty"},
      {Endpoint::Completions, R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
      {Endpoint::Completions, R"({"prompt": "x", "seed": "abc"})", "seed"},
      {Endpoint::Completions, R"({"prompt": "x", "stop": 3})", "stop"},
      {Endpoint::Completions, R"({"prompt": "x", "stop": ["a", 1]})", "stop[1]"},
      {Endpoint::Completions, R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", "stop"},
      {Endpoint::Completions, R"({"prompt": "x", "logprobs": 6})", "logprobs"},
      {Endpoint::Completions, R"({"prompt": "x", "logprobs": true})", "logprobs"},
      {Endpoint::Completions, R"({"prompt": "x", "echo": true, "logprobs": 1})", "echo"},
      {Endpoint::Completions, R"({"prompt": "x", "echo": "yes"})", "echo"},
      {Endpoint::Completions, R"({"prompt": "x", "stream": 1})", "stream"},
      {Endpoint::Completions, R"({"prompt": "x", "stream_options": {"include_usage": true}})",
       "stream_options"},
      {Endpoint::Completions, R"({"prompt": "x", "stream": true, "stream_options": 1})",
       "stream_options"},
      {Endpoint::Completions, R"({"prompt": "x", "best_of": 3})", "best_of"},
      {Endpoint::Completions, R"({"prompt": "x", "logit_bias": {"5": 10}})", "logit_bias"},
      {Endpoint::Completions, R"({"prompt": "x", "suffix": "end"})", "suffix"},
      {Endpoint::Completions, R"({"prompt": "x", "model": 7})", "model"},
      {Endpoint::ChatCompletions, R"({})", "messages"},
      {Endpoint::ChatCompletions, R"({"messages": []})", "messages"},
      {Endpoint::ChatCompletions, R"({"messages": "hi"})", "messages"},
      {Endpoint::ChatCompletions, R"({"messages": ["hi"]})", "messages[0]"},
      {Endpoint::ChatCompletions, R"({"messages": [{"content": "hi"}]})", "messages[0].role"},
      {Endpoint::ChatCompletions, R"({"messages": [{"role": "wizard", "content": "hi"}]})",
       "messages[0].role"},
      {Endpoint::ChatCompletions, R"({"messages": [{"role": "tool", "content": "hi"}]})",
       "messages[0].role"},
      {Endpoint::ChatCompletions, R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {Endpoint::ChatCompletions, R"({"messages": [{"role": "user", "content": 5}]})",
       "messages[0].content"},
      {Endpoint::ChatCompletions,
       R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].type"},
      {Endpoint::ChatCompletions,
       R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
       "messages[0].content[0].text"},
      {Endpoint::ChatCompletions, "{" + msg + R"(, "top_logprobs": 2})", "top_logprobs"},
      {Endpoint::ChatCompletions, "{" + msg + R"(, "logprobs": true, "top_logprobs": 21})",
       "top_logprobs"},
      {Endpoint::ChatCompletions, "{" + msg + R"(, "logprobs": 1})", "logprobs"},
      {Endpoint::ChatCompletions, "{" + msg + R"(, "max_completion_tokens": 0})",
       "max_completion_tokens"},
      {Endpoint::ChatCompletions, "{" + msg + R"(, "tools": [{"type": "function"}]})", "tools"},
      {Endpoint::ChatCompletions, "{" + msg + R"(, "response_format": "json"})", "response_format"},
      {Endpoint::ChatCompletions, "{" + msg + R"(, "response_format": {}})", "response_format.type"},
      {Endpoint::ChatCompletions, "{" + msg + R"(, "response_format": {"type": "xml"}})",
       "response_format.type"},
      {Endpoint::ChatCompletions, "{" + msg + R"(, "response_format": {"type": "json_schema"}})",
       "response_format.json_schema"},
      {Endpoint::ChatCompletions,
       "{" + msg + R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})",
       "response_format.json_schema.schema"},
      {Endpoint::ChatCompletions,
       "{" + msg + R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": 3}}})",
       "response_format.json_schema.schema"},
      {Endpoint::ChatCompletions,
       "{" + msg +
           R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": 1}}})",
       "response_format.json_schema.strict"},
      {Endpoint::ChatCompletions, "{" + msg + R"(, "grammar": ""})", "grammar"},
      {Endpoint::ChatCompletions, "{" + msg + R"(, "grammar": 5})", "grammar"},
      {Endpoint::Completions,
       R"({"prompt": "x", "response_format": {"type": "json_object"}, "grammar": "root ::= \"a\""})",
       "grammar"},
      {Endpoint::ChatCompletions, "{" + msg + R"(, "temperature": 1e400})",
       ""},  // overflows: a JSON error
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.body);
    const ApiError e = error_of([&] {
      if (c.endpoint == Endpoint::Completions) {
        parse_completion_request(c.body);
      } else {
        parse_chat_request(c.body);
      }
    });
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, c.param);
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_FALSE(std::string(e.what()).empty());
  }
}

TEST(ServerProtocol, StructuredOutputFieldsBecomeAGrammarSpec) {
  const std::string msg = R"("messages": [{"role": "user", "content": "Hi"}])";
  const GenerationRequest none = parse_chat_request("{" + msg + R"(, "response_format": {"type": "text"}})");
  EXPECT_EQ(none.grammar.kind, lio::GrammarSpec::Kind::None);
  const GenerationRequest obj = parse_chat_request("{" + msg + R"(, "response_format": {"type": "json_object"}})");
  EXPECT_EQ(obj.grammar.kind, lio::GrammarSpec::Kind::JsonObject);
  EXPECT_EQ(obj.grammar_field, "response_format");
  const GenerationRequest schema = parse_chat_request(
      "{" + msg +
      R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "a", "strict": true,
          "schema": {"type": "object", "properties": {"x": {"type": "integer"}}}}}})");
  EXPECT_EQ(schema.grammar.kind, lio::GrammarSpec::Kind::JsonSchema);
  EXPECT_EQ(nlohmann::json::parse(schema.grammar.source),
            nlohmann::json::parse(R"({"type": "object", "properties": {"x": {"type": "integer"}}})"));
  // The properties keep their written order (the answer's field order), not a sorted one.
  const GenerationRequest ordered = parse_chat_request(
      "{" + msg +
      R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object",
          "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"}}}}}})");
  EXPECT_EQ(ordered.grammar.source,
            R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"city":{"type":"string"}}})");
  const GenerationRequest ebnf = parse_completion_request(R"({"prompt": "x", "grammar": "root ::= \"a\""})");
  EXPECT_EQ(ebnf.grammar.kind, lio::GrammarSpec::Kind::Ebnf);
  EXPECT_EQ(ebnf.grammar.source, "root ::= \"a\"");
  EXPECT_EQ(ebnf.grammar_field, "grammar");
}

TEST(ServerProtocol, ErrorBodyHasOpenAIShape) {
  const auto body =
      lio::server::error_body(ApiError(404, "no such model", "model", "model_not_found"));
  EXPECT_EQ(body["error"]["message"], "no such model");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "model");
  EXPECT_EQ(body["error"]["code"], "model_not_found");
  const auto bare = lio::server::error_body(ApiError(400, "bad"));
  EXPECT_TRUE(bare["error"]["param"].is_null());
  EXPECT_TRUE(bare["error"]["code"].is_null());
}

TEST(ServerProtocol, ApiKeyMustMatchExactly) {
  using lio::server::api_key_matches;
  EXPECT_TRUE(api_key_matches("Bearer sk-123", "sk-123"));
  EXPECT_FALSE(api_key_matches("Bearer sk-124", "sk-123"));
  EXPECT_FALSE(api_key_matches("Bearer sk-12", "sk-123"));
  EXPECT_FALSE(api_key_matches("Bearer sk-1234", "sk-123"));
  EXPECT_FALSE(api_key_matches("sk-123", "sk-123"));
  EXPECT_FALSE(api_key_matches("", "sk-123"));
  EXPECT_FALSE(api_key_matches("Bearer ", ""));
}

// ==== context limits ==========================================================================

TEST(ServerProtocol, MaxTokensDefaultsAndContextLimit) {
  GenerationRequest completion = parse_completion_request(R"({"prompt": "x"})");
  EXPECT_EQ(lio::server::resolve_max_tokens(completion, 10, 100), 16);
  EXPECT_EQ(lio::server::resolve_max_tokens(completion, 95, 100), 5);  // clamped to the room left
  GenerationRequest chat =
      parse_chat_request(R"({"messages": [{"role": "user", "content": "Hi"}]})");
  EXPECT_EQ(lio::server::resolve_max_tokens(chat, 30, 100), 70);

  GenerationRequest asked = parse_completion_request(R"({"prompt": "x", "max_tokens": 60})");
  EXPECT_EQ(lio::server::resolve_max_tokens(asked, 40, 100), 60);
  const ApiError e = error_of([&] { lio::server::resolve_max_tokens(asked, 41, 100); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "max_tokens");
  const std::string m = e.what();
  EXPECT_NE(m.find("100"), std::string::npos) << m;
  EXPECT_NE(m.find("101"), std::string::npos) << m;  // requested in all
  EXPECT_NE(m.find("41"), std::string::npos) << m;

  const ApiError full = error_of([&] { lio::server::resolve_max_tokens(chat, 100, 100); });
  EXPECT_EQ(full.param, "messages");
}

// ==== tokenizer-dependent: prompts, logprobs rendering ========================================

class ServerWithTinyModel : public ::testing::Test {
 protected:
  void SetUp() override {
    lio::testing::TinyModelSpec spec;
    spec.context_length = context_length_;
    spec.chat_template = chat_template_;
    lio::testing::write_tiny_gguf(dir_ + "/m.gguf", spec);
    model_ = std::make_unique<lio::LoadedModel>(
        lio::load_model(dir_ + "/m.gguf", lio::WeightMode::AsStored));
  }
  const lio::Tokenizer& tok() const { return *model_->tokenizer; }
  int64_t context_length_ = 128;
  std::string chat_template_;  // empty: ChatML
  std::string dir_ = lio::testing::make_temp_dir("lio_test_server");
  std::unique_ptr<lio::LoadedModel> model_;
};

TEST_F(ServerWithTinyModel, PromptIdsOutsideTheVocabularyAre400) {
  const GenerationRequest ok = parse_completion_request(R"({"prompt": [3, 4]})");
  EXPECT_EQ(lio::server::prompt_token_ids(ok, tok()).front(), (std::vector<int32_t>{3, 4}));
  const GenerationRequest bad = parse_completion_request(R"({"prompt": [3, 100000]})");
  const ApiError e = error_of([&] { lio::server::prompt_token_ids(bad, tok()); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "prompt");
  const GenerationRequest bad2 = parse_completion_request(R"({"prompt": [[3], [100000]]})");
  EXPECT_EQ(error_of([&] { lio::server::prompt_token_ids(bad2, tok()); }).param, "prompt[1]");
}

TEST_F(ServerWithTinyModel, ChatPromptGoesThroughTheTemplate) {
  const GenerationRequest r =
      parse_chat_request(R"({"messages": [{"role": "user", "content": "the"}]})");
  const auto ids = lio::server::prompt_token_ids(r, tok());
  ASSERT_EQ(ids.size(), 1u);
  const std::string text = tok().decode(ids[0], /*render_special=*/true);
  EXPECT_NE(text.find("<|im_start|>user\nthe<|im_end|>"), std::string::npos) << text;
  EXPECT_EQ(text.substr(text.size() - std::string("<|im_start|>assistant\n").size()),
            "<|im_start|>assistant\n");
}

/// A model with a Gemma-style template (no system role; it raises on one, as Gemma's and
/// Mistral's templates do) and one whose template does not parse.
class ServerWithGemmaStyleTemplate : public ServerWithTinyModel {
 protected:
  ServerWithGemmaStyleTemplate() {
    chat_template_ =
        "{% for m in messages %}{% if m['role'] not in ['user', 'assistant'] %}"
        "{{ raise_exception('Conversation roles must be user or assistant') }}{% endif %}"
        "<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
        "{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}"
        "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";
  }
};

TEST_F(ServerWithGemmaStyleTemplate, ChatRendersTheModelsOwnTemplate) {
  const GenerationRequest r = parse_chat_request(
      R"({"messages": [{"role": "user", "content": " the "}, {"role": "assistant", "content": "a"},
                       {"role": "user", "content": "in"}]})");
  const auto ids = lio::server::prompt_token_ids(r, tok());
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(tok().decode(ids[0], /*render_special=*/true),
            "<start_of_turn>user\nthe<end_of_turn>\n<start_of_turn>model\na<end_of_turn>\n"
            "<start_of_turn>user\nin<end_of_turn>\n<start_of_turn>model\n");
}

TEST_F(ServerWithGemmaStyleTemplate, TheTemplatesOwnErrorIs400) {
  const GenerationRequest r = parse_chat_request(
      R"({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]})");
  const ApiError e = error_of([&] { lio::server::prompt_token_ids(r, tok()); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "messages");
  EXPECT_NE(std::string(e.what()).find("Conversation roles must be user or assistant"), std::string::npos)
      << e.what();
}

class ServerWithBrokenTemplate : public ServerWithTinyModel {
 protected:
  ServerWithBrokenTemplate() { chat_template_ = "{% for m in messages %}{{ m['content'] }}"; }
};

TEST_F(ServerWithBrokenTemplate, ATemplateThatDoesNotParseIs400) {
  const GenerationRequest r =
      parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}]})");
  const ApiError e = error_of([&] { lio::server::prompt_token_ids(r, tok()); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "messages");
  EXPECT_NE(std::string(e.what()).find("chat template"), std::string::npos) << e.what();
  // The completions endpoint does not use the template: the model still serves raw prompts.
  const GenerationRequest plain = parse_completion_request(R"({"prompt": "the"})");
  EXPECT_FALSE(lio::server::prompt_token_ids(plain, tok()).front().empty());
}

TEST_F(ServerWithTinyModel, EmptyTextPromptIs400) {
  const GenerationRequest r = parse_completion_request(R"({"prompt": ""})");
  if (tok().add_bos_default()) GTEST_SKIP() << "BOS makes an empty text a valid prompt";
  EXPECT_EQ(error_of([&] { lio::server::prompt_token_ids(r, tok()); }).param, "prompt");
}

TEST_F(ServerWithTinyModel, TokenDisplayEscapesPartialCharacters) {
  // Byte tokens come after the 3 control tokens in bytes_to_unicode order; find 0xE2's token.
  int32_t partial = -1;
  for (int32_t id = 3; id < 3 + 256; ++id) {
    if (tok().token_bytes(id) == "\xe2") partial = id;
  }
  ASSERT_GE(partial, 0);
  EXPECT_EQ(lio::server::token_display(tok(), partial), "bytes:\\xe2");
  EXPECT_EQ(lio::server::token_display(tok(), 2), "<|im_end|>");
}

TEST_F(ServerWithTinyModel, LogprobsShapesPerEndpoint) {
  lio::SampleLogprobs lp;
  lp.sampled = {100, -0.5f};  // any two distinct tokens
  lp.top = {{100, -0.5f}, {101, -1.5f}};
  const std::vector<lio::SampleLogprobs> v = {lp, lp};
  const std::vector<int64_t> offsets = {0, 1};

  const auto comp = lio::server::logprobs_json(Endpoint::Completions, tok(), v, offsets, 10);
  ASSERT_EQ(comp["tokens"].size(), 2u);
  EXPECT_FLOAT_EQ(comp["token_logprobs"][0].get<float>(), -0.5f);
  EXPECT_EQ(comp["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(comp["text_offset"][1], 11);

  const auto chat = lio::server::logprobs_json(Endpoint::ChatCompletions, tok(), v, offsets);
  ASSERT_EQ(chat["content"].size(), 2u);
  EXPECT_FLOAT_EQ(chat["content"][0]["logprob"].get<float>(), -0.5f);
  EXPECT_TRUE(chat["content"][0]["bytes"].is_array());
  EXPECT_EQ(chat["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_FLOAT_EQ(chat["content"][0]["top_logprobs"][1]["logprob"].get<float>(), -1.5f);
}

// ==== response and chunk shapes ===============================================================

TEST_F(ServerWithTinyModel, ResponseShapes) {
  const lio::server::ResponseMeta chat_meta{Endpoint::ChatCompletions, "chatcmpl-1", 123, "m"};
  std::vector<lio::server::Choice> choices(2);
  choices[0].text = "Hi";
  choices[0].n_tokens = 2;
  choices[0].finish_reason = lio::FinishReason::Stop;
  choices[1].text = "Yo";
  choices[1].n_tokens = 3;
  choices[1].finish_reason = lio::FinishReason::Length;
  const auto chat = lio::server::response_json(chat_meta, choices, {}, false, tok(), 7);
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][1]["index"], 1);
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "Hi");
  EXPECT_EQ(chat["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(chat["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(chat["usage"]["completion_tokens"], 5);
  EXPECT_EQ(chat["usage"]["total_tokens"], 12);

  const lio::server::ResponseMeta comp_meta{Endpoint::Completions, "cmpl-1", 123, "m"};
  const std::vector<std::string> echo = {"Q: ", "Q: "};
  const auto comp = lio::server::response_json(comp_meta, choices, echo, false, tok(), 7);
  EXPECT_EQ(comp["object"], "text_completion");
  EXPECT_EQ(comp["choices"][0]["text"], "Q: Hi");
  EXPECT_TRUE(comp["choices"][0]["logprobs"].is_null());

  const auto chunk =
      lio::server::chunk_json(chat_meta, 1, "", {{"content", "x"}}, nullptr, nullptr, true);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["delta"]["content"], "x");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(chunk.contains("usage") && chunk["usage"].is_null());
  const auto usage = lio::server::usage_chunk_json(chat_meta, 7, 5);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 12);
  const std::string event = lio::server::sse_event(usage);
  EXPECT_EQ(event.rfind("data: {", 0), 0u);
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n");
}

TEST(ServerProtocol, DumpNeverThrowsOnInvalidUtf8) {
  nlohmann::ordered_json j = {{"text", std::string("a\xff")}};
  EXPECT_NO_THROW(lio::server::dump_json(j));
  EXPECT_NE(lio::server::dump_json(j).find("a\xef\xbf\xbd"), std::string::npos);  // U+FFFD
}

// ==== metrics =================================================================================

TEST(ServerMetrics, HistogramIsCumulativeWithInclusiveBounds) {
  lio::server::Histogram h({0.1, 1.0});
  h.observe(0.1);  // le=0.1 (inclusive)
  h.observe(0.5);  // le=1
  h.observe(5.0);  // +Inf only
  std::string out;
  h.render(out, "x_seconds", "help");
  EXPECT_NE(out.find("# TYPE x_seconds histogram"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_bucket{le=\"1\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_sum 5.6\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_count 3\n"), std::string::npos) << out;
}

TEST(ServerMetrics, BucketsAreVllms) {
  EXPECT_EQ(lio::server::ttft_buckets_s().size(), 22u);
  EXPECT_DOUBLE_EQ(lio::server::ttft_buckets_s().back(), 2560.0);
  EXPECT_EQ(lio::server::itl_buckets_s().size(), 19u);
  EXPECT_EQ(lio::server::request_latency_buckets_s().size(), 21u);
  EXPECT_DOUBLE_EQ(lio::server::request_latency_buckets_s().front(), 0.3);
}

/// The line `name value` of a Prometheus text (value as text), or "" when missing.
std::string metric_value(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return "";
  const size_t from = at + name.size() + 2;
  return text.substr(from, text.find('\n', from) - from);
}

TEST(ServerMetrics, OutputsFeedCountersAndGoodput) {
  lio::server::ServerMetrics m({/*ttft_ms=*/100, /*tpot_ms=*/50});
  lio::RequestOutput first;  // first token of sample 0
  first.request_id = 1;
  first.new_token_ids = {5};
  first.n_generated_tokens = 1;
  first.n_prompt_tokens = 12;
  first.ttft_ms = 80;
  first.queue_ms = 10;
  m.on_output(first);
  lio::RequestOutput last = first;  // second token, finished within the SLOs
  last.n_generated_tokens = 2;
  last.finished = true;
  last.finish_reason = lio::FinishReason::Stop;
  last.tpot_ms = 40;
  last.e2e_ms = 120;
  last.itl_ms = {40};
  last.token_times_ms = {80, 120};  // what TTFT, TPOT and ITL are computed from
  m.on_output(last);
  lio::RequestOutput slow = last;  // another sequence: one token, too late
  slow.request_id = 2;
  slow.new_token_ids = {6};
  slow.n_generated_tokens = 1;
  slow.ttft_ms = 500;
  slow.token_times_ms = {500, 540};  // two timestamps: one inter-token gap
  slow.finish_reason = lio::FinishReason::Length;
  m.on_output(slow);
  lio::RequestOutput aborted;  // aborted before its first token
  aborted.request_id = 3;
  aborted.finished = true;
  aborted.finish_reason = lio::FinishReason::Abort;
  m.on_output(aborted);
  lio::server::EngineGauges g;
  g.n_running = 3;
  g.kv_cache_usage = 0.25;
  m.set_engine_gauges(g);

  const std::string text = m.render();
  EXPECT_EQ(metric_value(text, "lio:prompt_tokens_total"), "24");  // two first tokens of sample 0
  EXPECT_EQ(metric_value(text, "lio:generation_tokens_total"), "3");
  EXPECT_EQ(metric_value(text, "lio:request_goodput_total"), "1");
  EXPECT_EQ(metric_value(text, "lio:request_success_total{finished_reason=\"stop\"}"), "1");
  EXPECT_EQ(metric_value(text, "lio:request_success_total{finished_reason=\"length\"}"), "1");
  EXPECT_EQ(metric_value(text, "lio:request_success_total{finished_reason=\"abort\"}"), "1");
  EXPECT_EQ(metric_value(text, "lio:num_requests_running"), "3");
  EXPECT_EQ(metric_value(text, "lio:kv_cache_usage_perc"), "0.25");
  EXPECT_EQ(metric_value(text, "lio:time_to_first_token_seconds_count"), "2");
  EXPECT_EQ(metric_value(text, "lio:inter_token_latency_seconds_count"), "2");
  EXPECT_EQ(metric_value(text, "lio:e2e_request_latency_seconds_count"), "3");
  for (const char* name :
       {"lio:num_requests_waiting", "lio:prefix_cache_queries_total", "lio:prefix_cache_hits_total",
        "lio:num_preemptions_total", "lio:request_queue_time_seconds_count"}) {
    EXPECT_NE(metric_value(text, name), "") << name;
  }
}

// ==== engine support: penalties and logprobs ==================================================

TEST(ServerSampler, PresenceAndFrequencyPenaltiesFollowOpenAI) {
  lio::SamplerConfig c;
  c.presence_penalty = 0.5f;
  c.frequency_penalty = 0.25f;
  lio::Sampler s(c);
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 4.0f};
  const std::vector<int32_t> history = {0, 1, 1, 2, 2, 2};
  const std::vector<int32_t> output = {1, 1, 2};  // token 0 only in the prompt
  s.sample(logits, history, output);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);  // not generated: untouched
  EXPECT_FLOAT_EQ(logits[1], 2.0f - 2 * 0.25f - 0.5f);
  EXPECT_FLOAT_EQ(logits[2], 3.0f - 1 * 0.25f - 0.5f);
  EXPECT_FLOAT_EQ(logits[3], 4.0f);
}

TEST(ServerSampler, PresencePenaltyChangesGreedyChoice) {
  lio::SamplerConfig c;
  c.presence_penalty = 2.0f;
  lio::Sampler s(c);
  std::vector<float> logits = {1.0f, 2.0f};
  const std::vector<int32_t> output = {1};
  EXPECT_EQ(s.sample(logits, output, output), 0);
}

TEST(ServerSampler, PenaltyRangesAndLogprobsAreValidated) {
  for (const float bad : {-2.5f, 2.5f, std::numeric_limits<float>::quiet_NaN()}) {
    lio::SamplerConfig c;
    c.presence_penalty = bad;
    EXPECT_THROW(c.validate(), lio::InvalidArgument);
    lio::SamplerConfig f;
    f.frequency_penalty = bad;
    EXPECT_THROW(f.validate(), lio::InvalidArgument);
  }
  lio::SamplerConfig lp;
  lp.logprobs = 21;
  EXPECT_THROW(lp.validate(), lio::InvalidArgument);
  lp.logprobs = -2;
  EXPECT_THROW(lp.validate(), lio::InvalidArgument);
}

TEST(ServerSampler, OutputTokenOutsideVocabThrows) {
  lio::SamplerConfig c;
  c.frequency_penalty = 1.0f;
  lio::Sampler s(c);
  std::vector<float> logits = {1.0f, 2.0f};
  const std::vector<int32_t> output = {7};
  EXPECT_THROW(s.sample(logits, {}, output), lio::InvalidArgument);
}

TEST(ServerSampler, LogprobsAreRawLogSoftmaxWithTopK) {
  lio::SamplerConfig c;
  c.logprobs = 2;
  c.repeat_penalty = 2.0f;  // changes the choice, not the reported distribution
  lio::Sampler s(c);
  std::vector<float> logits = {0.5f, 3.0f, 1.0f, 2.9f};
  const std::vector<float> raw = logits;
  const std::vector<int32_t> history = {1};
  const int32_t t = s.sample(logits, history);
  EXPECT_EQ(t, 3);  // 3.0 / 2 = 1.5 < 2.9
  double z = 0;
  for (const float l : raw) z += std::exp(static_cast<double>(l));
  const lio::SampleLogprobs& lp = s.last_logprobs();
  EXPECT_EQ(lp.sampled.token, 3);
  EXPECT_NEAR(lp.sampled.logprob, 2.9 - std::log(z), 1e-5);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].token, 1);
  EXPECT_EQ(lp.top[1].token, 3);
  EXPECT_NEAR(lp.top[0].logprob, 3.0 - std::log(z), 1e-5);
}

TEST_F(ServerWithTinyModel, EngineReportsOneLogprobPerToken) {
  lio::ModelRunner runner(std::make_unique<lio::CpuBackend>(model_->config, model_->weights),
                          lio::KvPoolConfig{16, 32});
  lio::Engine engine(runner, tok());
  lio::SamplingParams p;
  p.max_tokens = 6;
  p.ignore_eos = true;
  p.sampler.logprobs = 3;
  p.sampler.presence_penalty = 0.5f;
  const int64_t id = engine.add_request({3, 4, 5, 6}, p);
  int64_t n_tokens = 0, n_logprobs = 0;
  while (engine.has_unfinished()) {
    for (const lio::RequestOutput& o : engine.step()) {
      ASSERT_EQ(o.request_id, id);
      ASSERT_EQ(o.logprobs.size(), o.new_token_ids.size());
      for (size_t i = 0; i < o.logprobs.size(); ++i) {
        EXPECT_EQ(o.logprobs[i].sampled.token, o.new_token_ids[i]);
        EXPECT_EQ(o.logprobs[i].top.size(), 3u);
        EXPECT_LE(o.logprobs[i].sampled.logprob, 0.0f);
      }
      n_tokens += static_cast<int64_t>(o.new_token_ids.size());
      n_logprobs += static_cast<int64_t>(o.logprobs.size());
    }
  }
  EXPECT_EQ(n_tokens, 6);
  EXPECT_EQ(n_logprobs, 6);
}

// ==== the engine loop: queues between HTTP threads and the engine ==============================

class EngineLoopTest : public ServerWithTinyModel {
 protected:
  void SetUp() override {
    context_length_ = 2048;  // room for a request long enough to abort mid-way
    ServerWithTinyModel::SetUp();
    runner_ = std::make_unique<lio::ModelRunner>(
        std::make_unique<lio::CpuBackend>(model_->config, model_->weights),
        lio::KvPoolConfig{16, 320});
    engine_ = std::make_unique<lio::Engine>(*runner_, tok());
  }
  static lio::SamplingParams fixed_length(int64_t max_tokens, int64_t n = 1) {
    lio::SamplingParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.n = n;
    return p;
  }
  /// Takes from `job` until it is over. A bound on the wait, not a latency check: it ends as soon
  /// as the job does, and only a hang reaches it (kMaxWaitPolls x 10 ms, generous for a sanitized
  /// build on a busy machine).
  static std::vector<lio::RequestOutput> drain(lio::server::Job& job) {
    std::vector<lio::RequestOutput> out;
    std::string error;
    for (int i = 0; i < kMaxWaitPolls && !job.take(out, error, std::chrono::milliseconds(10)); ++i) {
    }
    EXPECT_EQ(error, "");
    return out;
  }
  static constexpr int kMaxWaitPolls = 12000;  // 10 ms each: 120 s, a hang guard
  std::unique_ptr<lio::ModelRunner> runner_;
  std::unique_ptr<lio::Engine> engine_;
  lio::server::ServerMetrics metrics_;
};

TEST_F(EngineLoopTest, EveryChoiceOfEveryPromptGetsItsTokens) {
  lio::server::EngineLoop loop(*engine_, metrics_, 8);
  loop.start();
  const std::vector<std::vector<int32_t>> prompts = {{3, 4, 5}, {6, 7, 8, 9}};
  const auto job = loop.submit(prompts, fixed_length(5, 2), "prompt");
  std::vector<int64_t> tokens(4, 0);
  int64_t n_finished = 0;
  for (const lio::RequestOutput& o : drain(*job)) {
    const size_t i = job->choice_index(o, 2);
    ASSERT_LT(i, tokens.size());
    tokens[i] += static_cast<int64_t>(o.new_token_ids.size());
    n_finished += o.finished;
  }
  EXPECT_EQ(tokens, (std::vector<int64_t>{5, 5, 5, 5}));
  EXPECT_EQ(n_finished, 4);
}

TEST_F(EngineLoopTest, FullQueueIs503) {
  lio::server::EngineLoop loop(*engine_, metrics_, 2);  // not started: nothing gets scheduled
  loop.submit({{3, 4}}, fixed_length(2), "prompt");
  const ApiError e = error_of([&] { loop.submit({{3, 4}, {5, 6}}, fixed_length(2), "prompt"); });
  EXPECT_EQ(e.status, 503);
  loop.submit({{5, 6}}, fixed_length(2), "prompt");  // exactly full is fine
  EXPECT_EQ(error_of([&] { loop.submit({{7}}, fixed_length(2), "prompt"); }).status, 503);
}

TEST_F(EngineLoopTest, EngineRefusalIs400NamingTheField) {
  lio::server::EngineLoop loop(*engine_, metrics_, 8);
  const std::vector<int32_t> too_long(3000, 3);  // the context holds 2048
  const ApiError e = error_of([&] { loop.submit({too_long}, fixed_length(2), "messages"); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "messages");
  const ApiError n = error_of([&] { loop.submit({too_long}, fixed_length(2, 3), "messages"); });
  EXPECT_EQ(n.param, "n");
}

TEST_F(EngineLoopTest, AbortEndsTheRequestAndFreesItsBlocks) {
  lio::server::EngineLoop loop(*engine_, metrics_, 8);
  loop.start();
  const auto job = loop.submit({{3, 4, 5}}, fixed_length(2000, 2), "prompt");
  std::vector<lio::RequestOutput> got;
  std::string error;
  for (int i = 0; i < kMaxWaitPolls && got.empty(); ++i)
    job->take(got, error, std::chrono::milliseconds(10));
  ASSERT_FALSE(got.empty()) << "no output before the abort";
  loop.abort(*job);
  const std::vector<lio::RequestOutput> rest = drain(*job);
  int64_t n_aborted = 0, n_tokens = 0;
  for (const auto& o : got) n_tokens += static_cast<int64_t>(o.new_token_ids.size());
  for (const auto& o : rest) {
    n_aborted += o.finished && o.finish_reason == lio::FinishReason::Abort;
    n_tokens += static_cast<int64_t>(o.new_token_ids.size());
  }
  EXPECT_EQ(n_aborted, 2);
  EXPECT_LT(n_tokens, 4000);
  double usage = 1;
  for (int i = 0; i < kMaxWaitPolls && usage > 0; ++i) {  // the engine thread frees them at its next step
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    usage = metrics_.engine_gauges().kv_cache_usage;
  }
  EXPECT_EQ(usage, 0.0);
  EXPECT_EQ(engine_->n_free_blocks(), engine_->block_manager().n_blocks());
}

}  // namespace
