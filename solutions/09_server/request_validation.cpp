// Chapter 09, Task 3 — reference: a request body's shared fields and chat messages validated
// into engine parameters, and a refusal into OpenAI's error body. Declarations and contracts:
// chapters/09_server/openai_protocol.h and api_error.h. Lesson: docs/09_server.md, "Task 3".
#include <limits>
#include <string>
#include <vector>

#include "api_error.h"
#include "json_fields.h"
#include "openai_protocol.h"

namespace lio::server {

using json = nlohmann::json;

nlohmann::ordered_json error_body(const ApiError& e) {
  using ojson = nlohmann::ordered_json;
  return ojson{{"error",
                {{"message", e.what()},
                 {"type", e.type},
                 {"param", e.param.empty() ? ojson(nullptr) : ojson(e.param)},
                 {"code", e.code.empty() ? ojson(nullptr) : ojson(e.code)}}}};
}

void parse_common_fields(const json& j, GenerationRequest& r, const RequestLimits& limits) {
  if (const json* v = optional_field(j, "model")) r.model = string_field(*v, "model");
  SamplerConfig& s = r.params.sampler;
  s.temperature = 1.0f;  // OpenAI's default (the engine's own default is greedy)
  if (const json* v = optional_field(j, "temperature"))
    s.temperature = static_cast<float>(number_in(*v, "temperature", 0, 2));
  if (const json* v = optional_field(j, "top_p"))
    s.top_p = static_cast<float>(number_in(*v, "top_p", 0, 1, true));
  if (const json* v = optional_field(j, "top_k")) {
    const int64_t k = integer_in(*v, "top_k", -1, std::numeric_limits<int32_t>::max());
    s.top_k = k < 0 ? 0 : static_cast<int32_t>(k);  // vLLM: -1 (or 0) = off
  }
  if (const json* v = optional_field(j, "min_p"))
    s.min_p = static_cast<float>(number_in(*v, "min_p", 0, 1));
  if (const json* v = optional_field(j, "presence_penalty"))
    s.presence_penalty = static_cast<float>(number_in(*v, "presence_penalty", -2, 2));
  if (const json* v = optional_field(j, "frequency_penalty"))
    s.frequency_penalty = static_cast<float>(number_in(*v, "frequency_penalty", -2, 2));
  if (const json* v = optional_field(j, "repetition_penalty"))
    s.repeat_penalty = static_cast<float>(number_in(*v, "repetition_penalty", 0, 1e6, true));
  if (const json* v = optional_field(j, "seed")) {
    s.seed = static_cast<uint64_t>(integer_in(*v, "seed", std::numeric_limits<int64_t>::min(),
                                              std::numeric_limits<int64_t>::max()));
    r.seed_given = true;
  }
  if (const json* v = optional_field(j, "n")) r.params.n = integer_in(*v, "n", 1, limits.max_n);
  if (const json* v = optional_field(j, "best_of")) {
    const int64_t best_of = integer_in(*v, "best_of", 1, limits.max_n);
    if (best_of != 1 && best_of != r.params.n)
      bad_field("best_of", "'best_of' other than n is not supported");
  }
  if (const json* v = optional_field(j, "stop")) {
    if (v->is_string()) {
      r.params.stop = {v->get<std::string>()};
    } else if (v->is_array()) {
      if (v->size() > 4)
        bad_field("stop", "'stop' holds at most 4 sequences, got " + std::to_string(v->size()));
      for (size_t i = 0; i < v->size(); ++i)
        r.params.stop.push_back(string_field((*v)[i], "stop[" + std::to_string(i) + "]"));
    } else {
      bad_field("stop", std::string("'stop' must be a string or a list of strings, got ") +
                            json_type_name(*v));
    }
  }
  if (const json* v = optional_field(j, "ignore_eos"))
    r.params.ignore_eos = boolean_field(*v, "ignore_eos");
  if (const json* v = optional_field(j, "stream")) r.stream = boolean_field(*v, "stream");
  if (const json* v = optional_field(j, "stream_options")) {
    if (!v->is_object())
      bad_field("stream_options",
                std::string("'stream_options' must be an object, got ") + json_type_name(*v));
    if (!r.stream)
      bad_field("stream_options", "'stream_options' is only allowed when 'stream' is true");
    if (const json* u = optional_field(*v, "include_usage"))
      r.include_usage = boolean_field(*u, "stream_options.include_usage");
  }
  if (const json* v = optional_field(j, "logit_bias")) {
    if (!v->is_object())
      bad_field("logit_bias",
                std::string("'logit_bias' must be an object, got ") + json_type_name(*v));
    if (!v->empty()) bad_field("logit_bias", "'logit_bias' is not supported");
  }
  if (const json* v = optional_field(j, "user")) string_field(*v, "user");  // accepted, unused
}

namespace {

/// A message's content: a string, or a list of {"type": "text", "text": ...} parts (joined by
/// newlines, as vLLM does); null only for an assistant turn.
std::string message_content(const json& m, const std::string& param, const std::string& role) {
  const json* c = optional_field(m, "content");
  if (!c) {
    if (role == "assistant") return {};
    bad_field(param + ".content", "'" + param + ".content' is required");
  }
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array())
    bad_field(param + ".content",
              "'" + param + ".content' must be a string or a list of content parts, got " +
                  json_type_name(*c));
  std::string text;
  for (size_t i = 0; i < c->size(); ++i) {
    const json& part = (*c)[i];
    const std::string pp = param + ".content[" + std::to_string(i) + "]";
    if (!part.is_object())
      bad_field(pp, "'" + pp + "' must be an object, got " + json_type_name(part));
    const json* type = optional_field(part, "type");
    if (!type) bad_field(pp + ".type", "'" + pp + ".type' is required");
    if (string_field(*type, pp + ".type") != "text") {
      bad_field(pp + ".type", "content part type '" + type->get<std::string>() +
                                  "' is not supported (only 'text')");
    }
    const json* t = optional_field(part, "text");
    if (!t) bad_field(pp + ".text", "'" + pp + ".text' is required");
    if (i > 0) text += "\n";
    text += string_field(*t, pp + ".text");
  }
  return text;
}

}  // namespace

std::vector<ChatMessage> parse_messages(const json& j) {
  const json* v = optional_field(j, "messages");
  if (!v) bad_field("messages", "'messages' is required");
  if (!v->is_array())
    bad_field("messages", std::string("'messages' must be a list, got ") + json_type_name(*v));
  if (v->empty()) bad_field("messages", "'messages' must hold at least one message");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object())
      bad_field(param, "'" + param + "' must be an object, got " + json_type_name(m));
    const json* role_v = optional_field(m, "role");
    if (!role_v) bad_field(param + ".role", "'" + param + ".role' is required");
    std::string role = string_field(*role_v, param + ".role");
    if (role == "developer") role = "system";  // OpenAI's newer name for the system turn
    if (role != "system" && role != "user" && role != "assistant") {
      bad_field(param + ".role",
                "'" + param +
                    ".role' must be one of 'system', 'developer', 'user', 'assistant', got '" +
                    role + "'");
    }
    out.push_back({role, message_content(m, param, role)});
  }
  return out;
}

}  // namespace lio::server
