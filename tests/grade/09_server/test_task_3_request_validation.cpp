// Chapter 09, Task 3: validating a request into engine parameters or an OpenAI error body
// (exercises/09_server/request_validation.cpp: error_body, parse_common_fields,
// parse_messages), through the parsers lio-server runs (openai_protocol.cpp).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "api_error.h"
#include "openai_protocol.h"

namespace {
using namespace lio::server;

/// The ApiError `parse` (parse_completion_request or parse_chat_request) refuses `body` with;
/// fails the test when it is accepted.
template <typename Parse>
ApiError refusal(Parse parse, const std::string& body) {
  try {
    parse(body, RequestLimits{});
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "accepted");
}

ApiError completion_error(const std::string& body) {
  return refusal(parse_completion_request, body);
}
ApiError chat_error(const std::string& body) { return refusal(parse_chat_request, body); }

TEST(Ch09Task3, ErrorBodyHasOpenAiShape) {
  EXPECT_EQ(
      error_body(ApiError(400, "'n' must be in [1, 128], got 0", "n")).dump(),
      R"({"error":{"message":"'n' must be in [1, 128], got 0","type":"invalid_request_error","param":"n","code":null}})");
  EXPECT_EQ(
      error_body(ApiError(404, "no such model", "model", "model_not_found")).dump(),
      R"({"error":{"message":"no such model","type":"invalid_request_error","param":"model","code":"model_not_found"}})");
  EXPECT_EQ(error_body(ApiError(500, "boom", "", "", "server_error")).dump(),
            R"({"error":{"message":"boom","type":"server_error","param":null,"code":null}})");
}

TEST(Ch09Task3, SharedFieldsReachTheEngine) {
  const GenerationRequest r = parse_completion_request(
      R"({"prompt": "hi", "model": "m", "temperature": 0.5, "top_p": 0.9, "top_k": 40,
          "min_p": 0.05, "presence_penalty": -1.5, "frequency_penalty": 2, "repetition_penalty": 1.1,
          "seed": -7, "n": 3, "best_of": 3, "stop": ["\n", "END"], "ignore_eos": true,
          "stream": true, "stream_options": {"include_usage": true}, "user": "u", "logit_bias": {}})");
  EXPECT_EQ(r.model, "m");
  EXPECT_FLOAT_EQ(r.params.sampler.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.params.sampler.top_p, 0.9f);
  EXPECT_EQ(r.params.sampler.top_k, 40);
  EXPECT_FLOAT_EQ(r.params.sampler.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r.params.sampler.presence_penalty, -1.5f);
  EXPECT_FLOAT_EQ(r.params.sampler.frequency_penalty, 2.0f);
  EXPECT_FLOAT_EQ(r.params.sampler.repeat_penalty, 1.1f);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.params.sampler.seed, static_cast<uint64_t>(int64_t{-7}));
  EXPECT_EQ(r.params.n, 3);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(Ch09Task3, AbsentAndNullFieldsKeepOpenAiDefaults) {
  const GenerationRequest r = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "hi"}], "temperature": null, "top_k": -1,
          "stop": "x", "stream": false, "n": null})");
  EXPECT_FLOAT_EQ(r.params.sampler.temperature, 1.0f) << "OpenAI's default, not greedy";
  EXPECT_EQ(r.params.sampler.top_k, 0) << "vLLM: -1 = off";
  EXPECT_EQ(r.params.n, 1);
  EXPECT_EQ(r.params.stop, std::vector<std::string>{"x"});
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.seed_given);
}

TEST(Ch09Task3, BadSharedFieldsNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("temperature": 2.5)", "temperature"},
      {R"("temperature": "hot")", "temperature"},
      {R"("top_p": 0)", "top_p"},
      {R"("top_p": 1.01)", "top_p"},
      {R"("top_k": -2)", "top_k"},
      {R"("min_p": 1.5)", "min_p"},
      {R"("presence_penalty": 2.1)", "presence_penalty"},
      {R"("frequency_penalty": -3)", "frequency_penalty"},
      {R"("repetition_penalty": 0)", "repetition_penalty"},
      {R"("seed": 1.5)", "seed"},
      {R"("n": 0)", "n"},
      {R"("n": 129)", "n"},
      {R"("n": 1, "best_of": 2)", "best_of"},
      {R"("stop": ["a", "b", "c", "d", "e"])", "stop"},
      {R"("stop": ["a", 7])", "stop[1]"},
      {R"("stop": 3)", "stop"},
      {R"("ignore_eos": 1)", "ignore_eos"},
      {R"("stream": "yes")", "stream"},
      {R"("stream_options": {"include_usage": true})", "stream_options"},
      {R"("stream": true, "stream_options": [])", "stream_options"},
      {R"("stream": true, "stream_options": {"include_usage": 1})", "stream_options.include_usage"},
      {R"("logit_bias": {"50256": -100})", "logit_bias"},
      {R"("model": 5)", "model"},
      {R"("user": 5)", "user"},
  };
  for (const auto& [field, param] : cases) {
    const std::string body = R"({"prompt": "hi", )" + field + "}";
    const ApiError e = completion_error(body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body;
    EXPECT_EQ(e.type, "invalid_request_error") << body;
    EXPECT_NE(std::string(e.what()).find(param.substr(0, param.find('.'))), std::string::npos)
        << "the message names the field: " << e.what();
  }
  EXPECT_STREQ(completion_error(R"({"prompt": "hi", "temperature": 2.5})").what(),
               "'temperature' must be in [0, 2], got 2.5");
}

TEST(Ch09Task3, MessagesBecomeRolesAndTexts) {
  const GenerationRequest r = parse_chat_request(R"({"messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
      {"role": "assistant", "content": null},
      {"role": "user", "content": "three"}]})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "one\ntwo");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.messages[3].content, "three");
}

TEST(Ch09Task3, BadMessagesNameTheDeepestField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({})", "messages"},
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": ["hi"]})", "messages[0]"},
      {R"({"messages": [{"content": "hi"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}]})",
       "messages[1].role"},
      {R"({"messages": [{"role": 3, "content": "a"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}]}]})",
       "messages[0].content[1].type"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
       "messages[0].content[0].text"},
      {R"({"messages": [{"role": "user", "content": ["a"]}]})", "messages[0].content[0]"},
  };
  for (const auto& [body, param] : cases) {
    const ApiError e = chat_error(body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body;
  }
}

TEST(Ch09Task3, RefusalBecomesTheErrorBodyLioServerSends) {
  const ApiError e = chat_error(R"({"messages": [{"role": "robot", "content": "hi"}], "n": 2})");
  const nlohmann::ordered_json body = error_body(e);
  EXPECT_EQ(body.at("error").at("param"), "messages[0].role");
  EXPECT_EQ(body.at("error").at("type"), "invalid_request_error");
  EXPECT_TRUE(body.at("error").at("code").is_null());
  EXPECT_EQ(
      body.at("error").at("message"),
      "'messages[0].role' must be one of 'system', 'developer', 'user', 'assistant', got 'robot'");
}

}  // namespace
