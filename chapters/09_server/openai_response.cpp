// openai_response.cpp — response bodies and chunks (see the header).
#include "openai_response.h"

#include <cmath>
#include <cstdio>

#include "sse.h"

namespace lio::server {

using json = nlohmann::ordered_json;

namespace {

/// Whether `s` is valid UTF-8 as nlohmann::json would accept it (a round trip through dump).
bool is_valid_utf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::type_error&) {
    return false;
  }
}

json bytes_json(const std::string& s) {
  json out = json::array();
  for (const char c : s) out.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return out;
}

/// log p as JSON: -inf (a masked token) has no JSON number, so it becomes -9999.0 as OpenAI
/// reports "impossible" tokens.
json logprob_value(float lp) { return std::isfinite(lp) ? json(lp) : json(-9999.0); }

}  // namespace

void append_output(Choice& choice, const RequestOutput& out) {
  for (size_t i = 0; i < out.logprobs.size(); ++i) {
    choice.logprobs.push_back(out.logprobs[i]);
    choice.text_offsets.push_back(static_cast<int64_t>(choice.text.size()));
  }
  choice.text += out.new_text;
  choice.n_tokens = out.n_generated_tokens;
  if (out.finished) choice.finish_reason = out.finish_reason;
}

std::string token_display(const Tokenizer& tokenizer, int32_t token) {
  const std::string text =
      tokenizer.decode(std::span<const int32_t>(&token, 1), /*render_special=*/true);
  if (is_valid_utf8(text)) return text;
  std::string out = "bytes:";
  char buf[8];
  for (const char c : text) {
    std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
    out += buf;
  }
  return out;
}

json logprobs_json(Endpoint endpoint, const Tokenizer& tokenizer,
                   std::span<const SampleLogprobs> lp, std::span<const int64_t> text_offsets,
                   int64_t offset_base) {
  if (endpoint == Endpoint::ChatCompletions) {
    const auto entry = [&](const TokenLogprob& t) {
      const std::string raw = tokenizer.decode(std::span<const int32_t>(&t.token, 1), true);
      return json{{"token", token_display(tokenizer, t.token)},
                  {"logprob", logprob_value(t.logprob)},
                  {"bytes", bytes_json(raw)}};
    };
    json content = json::array();
    for (const SampleLogprobs& s : lp) {
      json e = entry(s.sampled);
      json top = json::array();
      for (const TokenLogprob& t : s.top) top.push_back(entry(t));
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    return json{{"content", std::move(content)}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       offsets = json::array();
  for (size_t i = 0; i < lp.size(); ++i) {
    const SampleLogprobs& s = lp[i];
    tokens.push_back(token_display(tokenizer, s.sampled.token));
    token_logprobs.push_back(logprob_value(s.sampled.logprob));
    // The legacy API's dict holds the k most likely tokens and always the sampled one.
    json top = json::object();
    for (const TokenLogprob& t : s.top)
      top[token_display(tokenizer, t.token)] = logprob_value(t.logprob);
    top[token_display(tokenizer, s.sampled.token)] = logprob_value(s.sampled.logprob);
    top_logprobs.push_back(std::move(top));
    offsets.push_back(offset_base + (i < text_offsets.size() ? text_offsets[i] : 0));
  }
  return json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top_logprobs)},
              {"text_offset", std::move(offsets)}};
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}};
}

json finish_reason_json(const std::optional<FinishReason>& reason) {
  return reason ? json(finish_reason_name(*reason)) : json(nullptr);
}

json response_json(const ResponseMeta& meta, std::span<const Choice> choices,
                   std::span<const std::string> echo_texts, bool want_logprobs,
                   const Tokenizer& tokenizer, int64_t prompt_tokens) {
  const bool chat = meta.endpoint == Endpoint::ChatCompletions;
  json out_choices = json::array();
  int64_t completion_tokens = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    const Choice& c = choices[i];
    completion_tokens += c.n_tokens;
    const std::string echo = i < echo_texts.size() ? echo_texts[i] : std::string();
    json lp = want_logprobs ? logprobs_json(meta.endpoint, tokenizer, c.logprobs, c.text_offsets,
                                            static_cast<int64_t>(echo.size()))
                            : json(nullptr);
    json choice = {{"index", i}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = echo + c.text;
    }
    choice["logprobs"] = std::move(lp);
    choice["finish_reason"] = finish_reason_json(c.finish_reason);
    out_choices.push_back(std::move(choice));
  }
  return json{{"id", meta.id},
              {"object", chat ? "chat.completion" : "text_completion"},
              {"created", meta.created},
              {"model", meta.model},
              {"choices", std::move(out_choices)},
              {"usage", usage_json(prompt_tokens, completion_tokens)}};
}

json chunk_json(const ResponseMeta& meta, int64_t index, const std::string& text, json delta,
                json logprobs, json finish_reason, bool include_usage) {
  const bool chat = meta.endpoint == Endpoint::ChatCompletions;
  json choice = {{"index", index}};
  if (chat) {
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = std::move(finish_reason);
  json out = {{"id", meta.id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", meta.created},
              {"model", meta.model},
              {"choices", json::array({std::move(choice)})}};
  if (include_usage) out["usage"] = nullptr;
  return out;
}

json usage_chunk_json(const ResponseMeta& meta, int64_t prompt_tokens, int64_t completion_tokens) {
  const bool chat = meta.endpoint == Endpoint::ChatCompletions;
  return json{{"id", meta.id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", meta.created},
              {"model", meta.model},
              {"choices", json::array()},
              {"usage", usage_json(prompt_tokens, completion_tokens)}};
}

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_event(const json& j) { return sse_data_event(dump_json(j)); }

}  // namespace lio::server
