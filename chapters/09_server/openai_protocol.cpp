// openai_protocol.cpp — field-by-field validation of OpenAI request bodies (see the header).
// The fields both endpoints share and the chat messages are chapter 09's Task 3
// (solutions/09_server/request_validation.cpp); the prompts, max_tokens and each endpoint's own
// fields are read here.
#include "openai_protocol.h"

#include <algorithm>
#include <limits>

#include "json_fields.h"
#include "lio/error.h"

namespace lio::server {

using json = nlohmann::json;

namespace {

/// Whether `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF).
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated sequence
    for (size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    static constexpr uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

/// max_tokens (completions) or max_completion_tokens / max_tokens (chat).
void parse_max_tokens(const json& j, GenerationRequest& r, const char* name) {
  if (const json* v = optional_field(j, name)) {
    r.params.max_tokens = integer_in(*v, name, 1, std::numeric_limits<int64_t>::max());
    r.max_tokens_given = true;
    r.max_tokens_field = name;
  }
}

// ==== prompts and messages ====================================================================

std::vector<int32_t> token_list(const json& v, const std::string& param) {
  if (v.empty()) bad_field(param, "'" + param + "' must not be an empty list of tokens");
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    ids.push_back(static_cast<int32_t>(integer_in(v[i], param + "[" + std::to_string(i) + "]", 0,
                                                  std::numeric_limits<int32_t>::max())));
  }
  return ids;
}

std::vector<PromptInput> parse_prompts(const json& j, const RequestLimits& limits) {
  const json* v = optional_field(j, "prompt");
  if (!v) bad_field("prompt", "'prompt' is required");
  const auto text = [](std::string s) { return PromptInput{false, std::move(s), {}}; };
  if (v->is_string()) return {text(v->get<std::string>())};
  if (!v->is_array())
    bad_field(
        "prompt",
        std::string("'prompt' must be a string, a list of token ids, or a list of either, got ") +
            json_type_name(*v));
  if (v->empty()) bad_field("prompt", "'prompt' must not be an empty list");
  if ((*v)[0].is_number()) return {PromptInput{true, {}, token_list(*v, "prompt")}};
  if (static_cast<int64_t>(v->size()) > limits.max_prompts) {
    bad_field("prompt", "'prompt' holds at most " + std::to_string(limits.max_prompts) +
                            " prompts, got " + std::to_string(v->size()));
  }
  std::vector<PromptInput> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& p = (*v)[i];
    const std::string param = "prompt[" + std::to_string(i) + "]";
    if (p.is_string()) {
      out.push_back(text(p.get<std::string>()));
    } else if (p.is_array()) {
      out.push_back(PromptInput{true, {}, token_list(p, param)});
    } else {
      bad_field(param, "'" + param + "' must be a string or a list of token ids, got " +
                           json_type_name(p));
    }
  }
  return out;
}

}  // namespace

// ==== entry points ============================================================================

json parse_json_body(std::string_view body) {
  if (!valid_utf8(body)) bad_field("", "the request body is not valid UTF-8");
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Parse again for the reason (byte position and what was expected).
    try {
      j = json::parse(body);
    } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
      bad_field("", std::string("the request body is not valid JSON: ") + e.what());
    }
    bad_field("", "the request body is not valid JSON");
  }
  if (!j.is_object())
    bad_field("", std::string("the request body must be a JSON object, got ") + json_type_name(j));
  return j;
}

GenerationRequest parse_completion_request(std::string_view body, const RequestLimits& limits) {
  const json j = parse_json_body(body);
  GenerationRequest r;
  r.endpoint = Endpoint::Completions;
  r.prompts = parse_prompts(j, limits);
  parse_common_fields(j, r, limits);
  parse_max_tokens(j, r, "max_tokens");
  if (const json* v = optional_field(j, "logprobs"))
    r.params.sampler.logprobs = static_cast<int32_t>(integer_in(*v, "logprobs", 0, 5));
  if (const json* v = optional_field(j, "echo")) r.echo = boolean_field(*v, "echo");
  if (r.echo && r.params.sampler.logprobs >= 0) {
    bad_field(
        "echo",
        "'echo' together with 'logprobs' is not supported (the prompt's log-probabilities are not "
        "computed)");
  }
  if (const json* v = optional_field(j, "suffix")) {
    if (!string_field(*v, "suffix").empty()) bad_field("suffix", "'suffix' is not supported");
  }
  parse_structured_output(j, body, r);
  return r;
}

GenerationRequest parse_chat_request(std::string_view body, const RequestLimits& limits) {
  const json j = parse_json_body(body);
  GenerationRequest r;
  r.endpoint = Endpoint::ChatCompletions;
  r.messages = parse_messages(j);
  parse_common_fields(j, r, limits);
  parse_max_tokens(j, r, "max_tokens");
  parse_max_tokens(j, r, "max_completion_tokens");  // the newer name wins
  bool logprobs = false;
  if (const json* v = optional_field(j, "logprobs")) logprobs = boolean_field(*v, "logprobs");
  if (const json* v = optional_field(j, "top_logprobs")) {
    const int64_t k = integer_in(*v, "top_logprobs", 0, 20);
    if (!logprobs) bad_field("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    r.params.sampler.logprobs = static_cast<int32_t>(k);
  } else if (logprobs) {
    r.params.sampler.logprobs = 0;
  }
  for (const char* name : {"tools", "functions"}) {
    if (const json* v = optional_field(j, name)) {
      if (!v->is_array())
        bad_field(name, std::string("'") + name + "' must be a list, got " + json_type_name(*v));
      if (!v->empty())
        bad_field(name, std::string("'") + name + "' (tool calling) is not supported");
    }
  }
  parse_structured_output(j, body, r);
  return r;
}

void parse_structured_output(const json& j, std::string_view body, GenerationRequest& r) {
  if (const json* v = optional_field(j, "response_format")) {
    if (!v->is_object())
      bad_field("response_format",
                std::string("'response_format' must be an object, got ") + json_type_name(*v));
    const json* type = optional_field(*v, "type");
    if (!type) bad_field("response_format.type", "'response_format' needs a 'type'");
    const std::string t = string_field(*type, "response_format.type");
    if (t == "json_object") {
      r.grammar = {GrammarSpec::Kind::JsonObject, ""};
    } else if (t == "json_schema") {
      const json* js = optional_field(*v, "json_schema");
      if (!js || !js->is_object()) {
        bad_field("response_format.json_schema",
                  "'response_format' of type 'json_schema' needs a 'json_schema' object");
      }
      if (const json* name = optional_field(*js, "name")) string_field(*name, "response_format.json_schema.name");
      if (const json* strict = optional_field(*js, "strict"))
        boolean_field(*strict, "response_format.json_schema.strict");
      const json* schema = optional_field(*js, "schema");
      if (!schema || !(schema->is_object() || schema->is_boolean())) {
        bad_field("response_format.json_schema.schema",
                  "'response_format.json_schema.schema' must be a JSON schema (an object)");
      }
      // nlohmann::json keeps an object's keys sorted, but a schema's property order is the order
      // the answer's fields come in (OpenAI's Structured Outputs; vLLM and llama-server keep it):
      // the schema compiled is read from the body again with its keys in their written order.
      const nlohmann::ordered_json in_order = nlohmann::ordered_json::parse(body);
      r.grammar = {GrammarSpec::Kind::JsonSchema, in_order.at("response_format").at("json_schema").at("schema").dump()};
    } else if (t != "text") {
      bad_field("response_format.type",
                "'response_format.type' must be 'text', 'json_object' or 'json_schema', got '" + t + "'");
    }
    if (r.grammar.kind != GrammarSpec::Kind::None) r.grammar_field = "response_format";
  }
  if (const json* v = optional_field(j, "grammar")) {
    const std::string g = string_field(*v, "grammar");
    if (g.empty()) bad_field("grammar", "'grammar' is empty");
    if (r.grammar.kind != GrammarSpec::Kind::None) {
      bad_field("grammar", "give either 'response_format' (json_object / json_schema) or 'grammar', not both");
    }
    r.grammar = {GrammarSpec::Kind::Ebnf, g};
    r.grammar_field = "grammar";
  }
}

std::vector<std::vector<int32_t>> prompt_token_ids(const GenerationRequest& request,
                                                   const Tokenizer& tokenizer) {
  const bool chat = request.endpoint == Endpoint::ChatCompletions;
  const std::string field_name = chat ? "messages" : "prompt";
  std::vector<std::vector<int32_t>> out;
  try {
    if (chat) {
      const std::string text =
          tokenizer.apply_chat_template(request.messages, /*add_generation_prompt=*/true);
      out.push_back(tokenizer.encode(text, /*parse_special=*/true, tokenizer.add_bos_default()));
    } else {
      for (const PromptInput& p : request.prompts) {
        out.push_back(p.is_tokens ? p.token_ids
                                  : tokenizer.encode(p.text, /*parse_special=*/true,
                                                     tokenizer.add_bos_default()));
      }
    }
  } catch (const Error& e) {
    bad_field(field_name, e.what());
  }
  const int64_t vocab = tokenizer.vocab_size();
  for (size_t i = 0; i < out.size(); ++i) {
    const std::string param =
        request.prompts.size() > 1 ? field_name + "[" + std::to_string(i) + "]" : field_name;
    if (out[i].empty()) bad_field(param, "the prompt is empty (0 tokens)");
    for (size_t k = 0; k < out[i].size(); ++k) {
      if (out[i][k] >= vocab) {
        bad_field(param, "token id " + std::to_string(out[i][k]) + " at index " +
                             std::to_string(k) + " is outside the vocabulary [0, " +
                             std::to_string(vocab) + ")");
      }
    }
  }
  return out;
}

int64_t resolve_max_tokens(const GenerationRequest& request, int64_t n_prompt_tokens,
                           int64_t context_length) {
  const bool chat = request.endpoint == Endpoint::ChatCompletions;
  const std::string where = chat ? "messages" : "prompt";
  const int64_t room = context_length - n_prompt_tokens;
  if (room < 1) {
    bad_field(
        where,
        "This model's maximum context length is " + std::to_string(context_length) +
            " tokens. However, your " + where + " has " + std::to_string(n_prompt_tokens) +
            " tokens, which leaves no room for a completion. Please reduce the length of the " +
            where + ".");
  }
  if (!request.max_tokens_given) return chat ? room : std::min<int64_t>(16, room);
  const int64_t max_tokens = request.params.max_tokens;
  if (max_tokens > room) {
    bad_field(
        request.max_tokens_field,
        "This model's maximum context length is " + std::to_string(context_length) +
            " tokens. However, you requested " + std::to_string(n_prompt_tokens + max_tokens) +
            " tokens (" + std::to_string(n_prompt_tokens) + " in the " + where + ", " +
            std::to_string(max_tokens) + " in the completion). Please reduce the length of the " +
            where + " or completion.");
  }
  return max_tokens;
}

bool api_key_matches(std::string_view authorization, std::string_view key) {
  constexpr std::string_view kBearer = "Bearer ";
  const std::string_view given = authorization.substr(0, kBearer.size()) == kBearer
                                     ? authorization.substr(kBearer.size())
                                     : std::string_view();
  // Every byte of the longer string is visited; differences are OR-ed, never branched on.
  unsigned diff = given.size() == key.size() ? 0u : 1u;
  const size_t n = std::max(given.size(), key.size());
  for (size_t i = 0; i < n; ++i) {
    const auto a = i < given.size() ? static_cast<unsigned char>(given[i]) : 0u;
    const auto b = i < key.size() ? static_cast<unsigned char>(key[i]) : 0u;
    diff |= a ^ b;
  }
  return diff == 0 && !key.empty();
}

}  // namespace lio::server
