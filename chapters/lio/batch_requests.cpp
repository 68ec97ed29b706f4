// batch_requests.cpp — reading `lio batch`'s JSONL requests (see batch_requests.h).
#include "batch_requests.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "lio/error.h"

namespace lio {
namespace {

using json = nlohmann::ordered_json;

// =====================================================================================
// Parsing one line
// =====================================================================================

/// Fields a line may carry besides its prompt.
const std::set<std::string> kSamplingFields = {"max_tokens", "temperature", "top_k",
                                               "top_p",      "min_p",       "repeat_penalty",
                                               "seed",       "stop",        "ignore_eos",
                                               "n"};
const std::set<std::string> kPromptFields = {"prompt", "messages", "prompt_token_ids"};
const std::set<std::string> kStructuredFields = {"response_format", "grammar"};

/// "NAME:LINE: what".
[[noreturn]] void line_error(const std::string& name, int64_t line, const std::string& what) {
  throw InvalidArgument(name + ":" + std::to_string(line) + ": " + what);
}

/// A JSON value for an error message, cut to a readable length.
std::string short_dump(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

/// The value as an integer in [lo, hi], or a line error naming `key`.
int64_t integer_field(const json& v, const std::string& key, int64_t lo, int64_t hi,
                      const std::string& name, int64_t line) {
  if (!v.is_number_integer())
    line_error(name, line, "\"" + key + "\" must be an integer, got " + short_dump(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
    line_error(name, line, "\"" + key + "\" is out of range: " + short_dump(v));
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) line_error(name, line, "\"" + key + "\" is out of range: " + short_dump(v));
  return x;
}

/// The value as a finite number, or a line error naming `key`.
float number_field(const json& v, const std::string& key, const std::string& name, int64_t line) {
  if (!v.is_number())
    line_error(name, line, "\"" + key + "\" must be a number, got " + short_dump(v));
  const float x = v.get<float>();
  if (!std::isfinite(x))
    line_error(name, line, "\"" + key + "\" is out of range: " + short_dump(v));
  return x;
}

/// The value as a string, or a line error naming `key`.
std::string string_field(const json& v, const std::string& key, const std::string& name,
                         int64_t line) {
  if (!v.is_string())
    line_error(name, line, "\"" + key + "\" must be a string, got " + short_dump(v));
  return v.get<std::string>();
}

/// SamplingParams::validate names command-line flags ("--top-p must be ..."); on a line the
/// same value is a JSON field, so name that instead.
std::string flags_to_fields(std::string message) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"--max-tokens", "max_tokens"},
      {"--temperature", "temperature"},
      {"--top-k", "top_k"},
      {"--top-p", "top_p"},
      {"--min-p", "min_p"},
      {"--repeat-penalty", "repeat_penalty"},
      {"--seed", "seed"}};
  for (const auto& [flag, field] : kNames) {
    const std::string f = flag;
    for (size_t at = message.find(f); at != std::string::npos; at = message.find(f, at))
      message.replace(at, f.size(), field);
  }
  return message;
}

/// Applies one sampling override `key: v` to `p`.
void apply_sampling_field(const std::string& key, const json& v, SamplingParams& p,
                          const std::string& name, int64_t line) {
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  if (key == "max_tokens") {
    p.max_tokens = integer_field(v, key, std::numeric_limits<int64_t>::min(),
                                 std::numeric_limits<int64_t>::max(), name, line);
  } else if (key == "temperature") {
    p.sampler.temperature = number_field(v, key, name, line);
  } else if (key == "top_k") {
    p.sampler.top_k =
        static_cast<int32_t>(integer_field(v, key, -kInt32Max, kInt32Max, name, line));
  } else if (key == "top_p") {
    p.sampler.top_p = number_field(v, key, name, line);
  } else if (key == "min_p") {
    p.sampler.min_p = number_field(v, key, name, line);
  } else if (key == "repeat_penalty") {
    p.sampler.repeat_penalty = number_field(v, key, name, line);
  } else if (key == "seed") {
    if (!v.is_number_unsigned())
      line_error(name, line, "\"seed\" must be a non-negative integer, got " + short_dump(v));
    p.sampler.seed = v.get<uint64_t>();
  } else if (key == "stop") {
    p.stop.clear();
    if (v.is_string()) {
      p.stop.push_back(v.get<std::string>());
    } else if (v.is_array()) {
      for (const json& s : v) p.stop.push_back(string_field(s, "stop[]", name, line));
    } else {
      line_error(name, line,
                 "\"stop\" must be a string or a list of strings, got " + short_dump(v));
    }
  } else if (key == "n") {
    p.n = integer_field(v, key, 1, 1024, name, line);
  } else if (key == "ignore_eos") {
    if (!v.is_boolean())
      line_error(name, line, "\"ignore_eos\" must be true or false, got " + short_dump(v));
    p.ignore_eos = v.get<bool>();
  }
}

/// "messages": a non-empty list of {"role": string, "content": string}.
std::vector<ChatMessage> messages_field(const json& v, const std::string& name, int64_t line) {
  if (!v.is_array() || v.empty())
    line_error(name, line,
               "\"messages\" must be a non-empty list of {\"role\", \"content\"} objects");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& m = v[i];
    const std::string where = "\"messages\"[" + std::to_string(i) + "]";
    if (!m.is_object()) line_error(name, line, where + " must be an object, got " + short_dump(m));
    for (const auto& [k, _] : m.items())
      if (k != "role" && k != "content")
        line_error(name, line, where + " has unknown field \"" + k + "\"");
    if (!m.contains("role") || !m.contains("content"))
      line_error(name, line, where + " needs \"role\" and \"content\"");
    out.push_back({string_field(m["role"], "role", name, line),
                   string_field(m["content"], "content", name, line)});
  }
  return out;
}

/// "prompt_token_ids": a list of integers in int32 range (the engine checks the vocabulary).
std::vector<int32_t> token_ids_field(const json& v, const std::string& name, int64_t line) {
  if (!v.is_array()) line_error(name, line, "\"prompt_token_ids\" must be a list of integers");
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const json& x : v)
    ids.push_back(static_cast<int32_t>(
        integer_field(x, "prompt_token_ids[]", std::numeric_limits<int32_t>::min(),
                      std::numeric_limits<int32_t>::max(), name, line)));
  return ids;
}

/// "response_format" (OpenAI's shapes: type text, json_object, or json_schema with a
/// json_schema.schema object) or "grammar" (a non-empty EBNF string); not both.
GrammarSpec structured_output_field(const json& j, const std::string& name, int64_t line) {
  GrammarSpec g;
  if (j.contains("response_format")) {
    const json& v = j["response_format"];
    const json* type = v.is_object() && v.contains("type") ? &v["type"] : nullptr;
    if (!type || !type->is_string())
      line_error(name, line, "\"response_format\" must be an object with a string \"type\", got " + short_dump(v));
    const std::string t = type->get<std::string>();
    if (t == "json_object") {
      g = {GrammarSpec::Kind::JsonObject, ""};
    } else if (t == "json_schema") {
      const json* schema = v.contains("json_schema") && v["json_schema"].is_object() && v["json_schema"].contains("schema")
                               ? &v["json_schema"]["schema"]
                               : nullptr;
      if (!schema || !(schema->is_object() || schema->is_boolean()))
        line_error(name, line, "\"response_format\" of type json_schema needs \"json_schema\": {\"schema\": {...}}");
      g = {GrammarSpec::Kind::JsonSchema, schema->dump()};
    } else if (t != "text") {
      line_error(name, line, "\"response_format.type\" must be text, json_object or json_schema, got " + short_dump(*type));
    }
  }
  if (j.contains("grammar")) {
    if (g.kind != GrammarSpec::Kind::None) line_error(name, line, "give \"response_format\" or \"grammar\", not both");
    const std::string text = string_field(j["grammar"], "grammar", name, line);
    if (text.empty()) line_error(name, line, "\"grammar\" is empty");
    g = {GrammarSpec::Kind::Ebnf, text};
  }
  return g;
}

/// One non-blank line -> a request.
BatchRequest parse_line(const std::string& text, const std::string& name, int64_t line,
                        const SamplingParams& defaults) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    // nlohmann says "[json.exception.parse_error.101] parse error at line 1, column 7: ...":
    // keep what follows the position, and give the column ourselves.
    std::string detail = e.what();
    const size_t col = detail.find("column ");
    const size_t colon = col == std::string::npos ? std::string::npos : detail.find(": ", col);
    if (colon != std::string::npos) detail = detail.substr(colon + 2);
    line_error(name, line, "not valid JSON at column " + std::to_string(e.byte) + ": " + detail);
  } catch (const json::exception& e) {  // out_of_range 406: a number past a double ("1e400")
    line_error(name, line, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) line_error(name, line, "expected a JSON object, got " + short_dump(j));

  BatchRequest r;
  r.line = line;
  r.params = defaults;
  int n_prompt_forms = 0;
  for (const auto& [key, v] : j.items()) {
    if (kPromptFields.count(key)) {
      ++n_prompt_forms;
    } else if (!kSamplingFields.count(key) && !kStructuredFields.count(key)) {
      line_error(name, line,
                 "unknown field \"" + key +
                     "\" (expected one of prompt, messages, prompt_token_ids, and optionally "
                     "max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, "
                     "stop, ignore_eos, n, response_format, grammar)");
    }
  }
  if (n_prompt_forms != 1)
    line_error(name, line,
               std::string(n_prompt_forms == 0 ? "no prompt" : "several prompts") +
                   ": give exactly one of \"prompt\", \"messages\", \"prompt_token_ids\"");
  if (j.contains("prompt")) r.prompt = string_field(j["prompt"], "prompt", name, line);
  if (j.contains("messages")) r.messages = messages_field(j["messages"], name, line);
  if (j.contains("prompt_token_ids"))
    r.token_ids = token_ids_field(j["prompt_token_ids"], name, line);
  for (const auto& [key, v] : j.items())
    if (kSamplingFields.count(key)) apply_sampling_field(key, v, r.params, name, line);
  r.grammar = structured_output_field(j, name, line);
  if (r.grammar.kind != GrammarSpec::Kind::None && r.params.ignore_eos)
    line_error(name, line, "\"ignore_eos\" cannot be combined with \"response_format\" or \"grammar\"");
  try {
    r.params.validate();
  } catch (const InvalidArgument& e) {
    line_error(name, line, flags_to_fields(e.what()));
  }
  return r;
}

}  // namespace

// =====================================================================================
// The file, and tokenizing
// =====================================================================================

std::vector<BatchRequest> parse_batch_requests(std::istream& in, const std::string& name,
                                               const SamplingParams& defaults) {
  std::vector<BatchRequest> out;
  std::string text;
  for (int64_t line = 1; std::getline(in, text); ++line) {
    if (line == 1 && text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // UTF-8 BOM
    if (!text.empty() && text.back() == '\r') text.pop_back();              // CRLF files
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    SamplingParams d = defaults;
    d.sampler.seed = defaults.sampler.seed + out.size();
    out.push_back(parse_line(text, name, line, d));
  }
  if (out.empty()) throw InvalidArgument(name + ": no requests (the file has no non-blank line)");
  return out;
}

std::vector<int32_t> batch_prompt_ids(const BatchRequest& r, const Tokenizer& tok) {
  if (r.token_ids) return *r.token_ids;
  if (r.messages)
    return tok.encode(tok.apply_chat_template(*r.messages, /*add_generation_prompt=*/true),
                      /*parse_special=*/true, tok.add_bos_default());
  return tok.encode(*r.prompt, /*parse_special=*/true, tok.add_bos_default());
}

}  // namespace lio
