// openai_protocol.cpp — field-by-field validation of OpenAI request bodies (see the header).
#include "openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "lio/error.h"

namespace lio::server {

using json = nlohmann::json;

ApiError::ApiError(int status_, const std::string& message, std::string param_, std::string code_,
                   std::string type_)
    : std::runtime_error(message),
      status(status_),
      param(std::move(param_)),
      code(std::move(code_)),
      type(std::move(type_)) {}

nlohmann::ordered_json error_body(const ApiError& e) {
  using ojson = nlohmann::ordered_json;
  return ojson{{"error",
                {{"message", e.what()},
                 {"type", e.type},
                 {"param", e.param.empty() ? ojson(nullptr) : ojson(e.param)},
                 {"code", e.code.empty() ? ojson(nullptr) : ojson(e.code)}}}};
}

namespace {

// ==== field access ============================================================================

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

/// JSON's name for the type of `v`, as an error message shows it.
const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "an unknown type";
  }
}

/// The field `name` of `obj`, or nullptr when it is absent or null (OpenAI treats null as
/// "not given" for every optional field).
const json* field(const json& obj, const char* name) {
  const auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::string format_number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

/// A finite number in [lo, hi] (lo excluded when `lo_open`).
double number_in(const json& v, const std::string& param, double lo, double hi,
                 bool lo_open = false) {
  if (!v.is_number()) bad(param, "'" + param + "' must be a number, got " + type_name(v));
  const double x = v.get<double>();
  const bool ok = std::isfinite(x) && (lo_open ? x > lo : x >= lo) && x <= hi;
  if (!ok) {
    bad(param, "'" + param + "' must be in " + (lo_open ? "(" : "[") + format_number(lo) + ", " +
                   format_number(hi) + "], got " + format_number(x));
  }
  return x;
}

/// An integer in [lo, hi] (64-bit; a value past int64 is out of range, never wrapped).
int64_t integer_in(const json& v, const std::string& param, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) bad(param, "'" + param + "' must be an integer, got " + type_name(v));
  const bool too_big =
      v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  const int64_t x = too_big ? std::numeric_limits<int64_t>::max() : v.get<int64_t>();
  if (too_big || x < lo || x > hi) {
    const std::string shown = v.dump();
    if (hi == std::numeric_limits<int64_t>::max())
      bad(param, "'" + param + "' must be >= " + std::to_string(lo) + ", got " + shown);
    bad(param, "'" + param + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                   "], got " + shown);
  }
  return x;
}

bool boolean(const json& v, const std::string& param) {
  if (!v.is_boolean()) bad(param, "'" + param + "' must be a boolean, got " + type_name(v));
  return v.get<bool>();
}

const std::string& string_of(const json& v, const std::string& param) {
  if (!v.is_string()) bad(param, "'" + param + "' must be a string, got " + type_name(v));
  return v.get_ref<const std::string&>();
}

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

// ==== shared fields ===========================================================================

/// The fields both endpoints share: model, sampling, stop, n, stream, unsupported features.
void parse_common(const json& j, GenerationRequest& r, const RequestLimits& limits) {
  if (const json* v = field(j, "model")) r.model = string_of(*v, "model");
  SamplerConfig& s = r.params.sampler;
  s.temperature = 1.0f;  // OpenAI's default (the engine's own default is greedy)
  if (const json* v = field(j, "temperature"))
    s.temperature = static_cast<float>(number_in(*v, "temperature", 0, 2));
  if (const json* v = field(j, "top_p"))
    s.top_p = static_cast<float>(number_in(*v, "top_p", 0, 1, true));
  if (const json* v = field(j, "top_k")) {
    const int64_t k = integer_in(*v, "top_k", -1, std::numeric_limits<int32_t>::max());
    s.top_k = k < 0 ? 0 : static_cast<int32_t>(k);  // vLLM: -1 (or 0) = off
  }
  if (const json* v = field(j, "min_p")) s.min_p = static_cast<float>(number_in(*v, "min_p", 0, 1));
  if (const json* v = field(j, "presence_penalty"))
    s.presence_penalty = static_cast<float>(number_in(*v, "presence_penalty", -2, 2));
  if (const json* v = field(j, "frequency_penalty"))
    s.frequency_penalty = static_cast<float>(number_in(*v, "frequency_penalty", -2, 2));
  if (const json* v = field(j, "repetition_penalty"))
    s.repeat_penalty = static_cast<float>(number_in(*v, "repetition_penalty", 0, 1e6, true));
  if (const json* v = field(j, "seed")) {
    s.seed = static_cast<uint64_t>(integer_in(*v, "seed", std::numeric_limits<int64_t>::min(),
                                              std::numeric_limits<int64_t>::max()));
    r.seed_given = true;
  }
  if (const json* v = field(j, "n")) r.params.n = integer_in(*v, "n", 1, limits.max_n);
  if (const json* v = field(j, "best_of")) {
    const int64_t best_of = integer_in(*v, "best_of", 1, limits.max_n);
    if (best_of != 1 && best_of != r.params.n)
      bad("best_of", "'best_of' other than n is not supported");
  }
  if (const json* v = field(j, "stop")) {
    if (v->is_string()) {
      r.params.stop = {v->get<std::string>()};
    } else if (v->is_array()) {
      if (v->size() > 4)
        bad("stop", "'stop' holds at most 4 sequences, got " + std::to_string(v->size()));
      for (size_t i = 0; i < v->size(); ++i)
        r.params.stop.push_back(string_of((*v)[i], "stop[" + std::to_string(i) + "]"));
    } else {
      bad("stop",
          std::string("'stop' must be a string or a list of strings, got ") + type_name(*v));
    }
  }
  if (const json* v = field(j, "ignore_eos")) r.params.ignore_eos = boolean(*v, "ignore_eos");
  if (const json* v = field(j, "stream")) r.stream = boolean(*v, "stream");
  if (const json* v = field(j, "stream_options")) {
    if (!v->is_object())
      bad("stream_options",
          std::string("'stream_options' must be an object, got ") + type_name(*v));
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    if (const json* u = field(*v, "include_usage"))
      r.include_usage = boolean(*u, "stream_options.include_usage");
  }
  if (const json* v = field(j, "logit_bias")) {
    if (!v->is_object())
      bad("logit_bias", std::string("'logit_bias' must be an object, got ") + type_name(*v));
    if (!v->empty()) bad("logit_bias", "'logit_bias' is not supported");
  }
  if (const json* v = field(j, "user")) string_of(*v, "user");  // accepted, unused
}

/// max_tokens (completions) or max_completion_tokens / max_tokens (chat).
void parse_max_tokens(const json& j, GenerationRequest& r, const char* name) {
  if (const json* v = field(j, name)) {
    r.params.max_tokens = integer_in(*v, name, 1, std::numeric_limits<int64_t>::max());
    r.max_tokens_given = true;
    r.max_tokens_field = name;
  }
}

// ==== prompts and messages ====================================================================

std::vector<int32_t> token_list(const json& v, const std::string& param) {
  if (v.empty()) bad(param, "'" + param + "' must not be an empty list of tokens");
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    ids.push_back(static_cast<int32_t>(integer_in(v[i], param + "[" + std::to_string(i) + "]", 0,
                                                  std::numeric_limits<int32_t>::max())));
  }
  return ids;
}

std::vector<PromptInput> parse_prompts(const json& j, const RequestLimits& limits) {
  const json* v = field(j, "prompt");
  if (!v) bad("prompt", "'prompt' is required");
  const auto text = [](std::string s) { return PromptInput{false, std::move(s), {}}; };
  if (v->is_string()) return {text(v->get<std::string>())};
  if (!v->is_array())
    bad("prompt",
        std::string("'prompt' must be a string, a list of token ids, or a list of either, got ") +
            type_name(*v));
  if (v->empty()) bad("prompt", "'prompt' must not be an empty list");
  if ((*v)[0].is_number()) return {PromptInput{true, {}, token_list(*v, "prompt")}};
  if (static_cast<int64_t>(v->size()) > limits.max_prompts) {
    bad("prompt", "'prompt' holds at most " + std::to_string(limits.max_prompts) +
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
      bad(param, "'" + param + "' must be a string or a list of token ids, got " + type_name(p));
    }
  }
  return out;
}

/// A message's content: a string, or a list of {"type": "text", "text": ...} parts (joined by
/// newlines, as vLLM does); null only for an assistant turn.
std::string message_content(const json& m, const std::string& param, const std::string& role) {
  const json* c = field(m, "content");
  if (!c) {
    if (role == "assistant") return {};
    bad(param + ".content", "'" + param + ".content' is required");
  }
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array())
    bad(param + ".content", "'" + param +
                                ".content' must be a string or a list of content parts, got " +
                                type_name(*c));
  std::string text;
  for (size_t i = 0; i < c->size(); ++i) {
    const json& part = (*c)[i];
    const std::string pp = param + ".content[" + std::to_string(i) + "]";
    if (!part.is_object()) bad(pp, "'" + pp + "' must be an object, got " + type_name(part));
    const json* type = field(part, "type");
    if (!type) bad(pp + ".type", "'" + pp + ".type' is required");
    if (string_of(*type, pp + ".type") != "text") {
      bad(pp + ".type",
          "content part type '" + type->get<std::string>() + "' is not supported (only 'text')");
    }
    const json* t = field(part, "text");
    if (!t) bad(pp + ".text", "'" + pp + ".text' is required");
    if (i > 0) text += "\n";
    text += string_of(*t, pp + ".text");
  }
  return text;
}

std::vector<ChatMessage> parse_messages(const json& j) {
  const json* v = field(j, "messages");
  if (!v) bad("messages", "'messages' is required");
  if (!v->is_array())
    bad("messages", std::string("'messages' must be a list, got ") + type_name(*v));
  if (v->empty()) bad("messages", "'messages' must hold at least one message");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(param, "'" + param + "' must be an object, got " + type_name(m));
    const json* role_v = field(m, "role");
    if (!role_v) bad(param + ".role", "'" + param + ".role' is required");
    std::string role = string_of(*role_v, param + ".role");
    if (role == "developer") role = "system";  // OpenAI's newer name for the system turn
    if (role != "system" && role != "user" && role != "assistant") {
      bad(param + ".role",
          "'" + param + ".role' must be one of 'system', 'developer', 'user', 'assistant', got '" +
              role + "'");
    }
    out.push_back({role, message_content(m, param, role)});
  }
  return out;
}

}  // namespace

// ==== entry points ============================================================================

json parse_json_body(std::string_view body) {
  if (!valid_utf8(body)) bad("", "the request body is not valid UTF-8");
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Parse again for the reason (byte position and what was expected).
    try {
      j = json::parse(body);
    } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
      bad("", std::string("the request body is not valid JSON: ") + e.what());
    }
    bad("", "the request body is not valid JSON");
  }
  if (!j.is_object())
    bad("", std::string("the request body must be a JSON object, got ") + type_name(j));
  return j;
}

GenerationRequest parse_completion_request(std::string_view body, const RequestLimits& limits) {
  const json j = parse_json_body(body);
  GenerationRequest r;
  r.endpoint = Endpoint::Completions;
  r.prompts = parse_prompts(j, limits);
  parse_common(j, r, limits);
  parse_max_tokens(j, r, "max_tokens");
  if (const json* v = field(j, "logprobs"))
    r.params.sampler.logprobs = static_cast<int32_t>(integer_in(*v, "logprobs", 0, 5));
  if (const json* v = field(j, "echo")) r.echo = boolean(*v, "echo");
  if (r.echo && r.params.sampler.logprobs >= 0) {
    bad("echo",
        "'echo' together with 'logprobs' is not supported (the prompt's log-probabilities are not "
        "computed)");
  }
  if (const json* v = field(j, "suffix")) {
    if (!string_of(*v, "suffix").empty()) bad("suffix", "'suffix' is not supported");
  }
  return r;
}

GenerationRequest parse_chat_request(std::string_view body, const RequestLimits& limits) {
  const json j = parse_json_body(body);
  GenerationRequest r;
  r.endpoint = Endpoint::ChatCompletions;
  r.messages = parse_messages(j);
  parse_common(j, r, limits);
  parse_max_tokens(j, r, "max_tokens");
  parse_max_tokens(j, r, "max_completion_tokens");  // the newer name wins
  bool logprobs = false;
  if (const json* v = field(j, "logprobs")) logprobs = boolean(*v, "logprobs");
  if (const json* v = field(j, "top_logprobs")) {
    const int64_t k = integer_in(*v, "top_logprobs", 0, 20);
    if (!logprobs) bad("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    r.params.sampler.logprobs = static_cast<int32_t>(k);
  } else if (logprobs) {
    r.params.sampler.logprobs = 0;
  }
  for (const char* name : {"tools", "functions"}) {
    if (const json* v = field(j, name)) {
      if (!v->is_array())
        bad(name, std::string("'") + name + "' must be a list, got " + type_name(*v));
      if (!v->empty()) bad(name, std::string("'") + name + "' (tool calling) is not supported");
    }
  }
  if (const json* v = field(j, "response_format")) {
    if (!v->is_object())
      bad("response_format",
          std::string("'response_format' must be an object, got ") + type_name(*v));
    const json* type = field(*v, "type");
    if (!type || string_of(*type, "response_format.type") != "text") {
      bad("response_format", "only 'response_format' {\"type\": \"text\"} is supported");
    }
  }
  return r;
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
    bad(field_name, e.what());
  }
  const int64_t vocab = tokenizer.vocab_size();
  for (size_t i = 0; i < out.size(); ++i) {
    const std::string param =
        request.prompts.size() > 1 ? field_name + "[" + std::to_string(i) + "]" : field_name;
    if (out[i].empty()) bad(param, "the prompt is empty (0 tokens)");
    for (size_t k = 0; k < out[i].size(); ++k) {
      if (out[i][k] >= vocab) {
        bad(param, "token id " + std::to_string(out[i][k]) + " at index " + std::to_string(k) +
                       " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
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
    bad(where,
        "This model's maximum context length is " + std::to_string(context_length) +
            " tokens. However, your " + where + " has " + std::to_string(n_prompt_tokens) +
            " tokens, which leaves no room for a completion. Please reduce the length of the " +
            where + ".");
  }
  if (!request.max_tokens_given) return chat ? room : std::min<int64_t>(16, room);
  const int64_t max_tokens = request.params.max_tokens;
  if (max_tokens > room) {
    bad(request.max_tokens_field,
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
