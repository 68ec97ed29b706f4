// openai_response.h — engine outputs -> OpenAI response bodies and server-sent-event chunks.
//
// Shapes follow the OpenAI API reference: a completion is {"id": "cmpl-...", "object":
// "text_completion", "created", "model", "choices": [{"index", "text", "logprobs",
// "finish_reason"}], "usage"}; a chat completion has object "chat.completion" and
// choices[i].message {"role": "assistant", "content"}; streamed chunks are
// "chat.completion.chunk" objects with choices[i].delta, or "text_completion" objects, each
// sent as `data: {json}\n\n`, ending with `data: [DONE]\n\n`.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lio/engine.h"
#include "lio/tokenizer.h"
#include "openai_protocol.h"

namespace lio::server {

/// What every body of one response repeats.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::Completions;  ///< decides the object names and choice shape
  std::string id;                             ///< "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;                        ///< Unix time, seconds
  std::string model;                          ///< the served model name
};

/// One choice (one sample of one prompt) as the engine's outputs accumulate.
struct Choice {
  std::string text;                           ///< generated text so far (stop string excluded)
  int64_t n_tokens = 0;                       ///< generated tokens so far (EOS excluded)
  std::optional<FinishReason> finish_reason;  ///< set once finished
  std::vector<SampleLogprobs> logprobs;       ///< one per generated token, when asked for
  std::vector<int64_t> text_offsets;  ///< byte offset in `text` where each token's text starts
};

/// Appends `out` (an engine output for this choice) to `choice`: text, token count, logprobs
/// and their text offsets, finish reason.
void append_output(Choice& choice, const RequestOutput& out);

/// A token as the logprobs fields show it: its text (control tokens by name, e.g.
/// "<|im_end|>"); a token whose bytes are not valid UTF-8 on their own (part of a character)
/// as "bytes:\xe2\x80" with the bytes escaped, as OpenAI does.
std::string token_display(const Tokenizer& tokenizer, int32_t token);

/// Logprobs of `lp` (tokens first .. first + lp.size() - 1 of a choice) in the endpoint's shape:
/// completions {"tokens", "token_logprobs", "top_logprobs" (dicts, sampled token included),
/// "text_offset"} with `text_offsets` (+ `offset_base`); chat {"content": [{"token",
/// "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}.
nlohmann::ordered_json logprobs_json(Endpoint endpoint, const Tokenizer& tokenizer,
                                     std::span<const SampleLogprobs> lp,
                                     std::span<const int64_t> text_offsets,
                                     int64_t offset_base = 0);

/// {"prompt_tokens", "completion_tokens", "total_tokens"}.
nlohmann::ordered_json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

/// "stop", "length" or "abort"; null when not finished.
nlohmann::ordered_json finish_reason_json(const std::optional<FinishReason>& reason);

/// The whole (non-streamed) response. choices[i] has index i; `echo_texts[i]` (when not empty)
/// precedes choice i's text (completions' echo). With `want_logprobs` each choice carries its
/// logprobs (else null).
nlohmann::ordered_json response_json(const ResponseMeta& meta, std::span<const Choice> choices,
                                     std::span<const std::string> echo_texts, bool want_logprobs,
                                     const Tokenizer& tokenizer, int64_t prompt_tokens);

/// One streamed chunk for choice `index`. Completions: {"text": text}; chat: `delta` as given
/// (e.g. {"role": "assistant", "content": ""}, {"content": text} or {}); `text` is used for
/// completions only, `delta` for chat only. `logprobs` and `finish_reason` may be null. With
/// `include_usage` the chunk carries "usage": null, as OpenAI sends it.
nlohmann::ordered_json chunk_json(const ResponseMeta& meta, int64_t index, const std::string& text,
                                  nlohmann::ordered_json delta, nlohmann::ordered_json logprobs,
                                  nlohmann::ordered_json finish_reason, bool include_usage);

/// The final usage chunk of a stream: empty choices and the usage.
nlohmann::ordered_json usage_chunk_json(const ResponseMeta& meta, int64_t prompt_tokens,
                                        int64_t completion_tokens);

/// `j` as one server-sent event: sse_data_event (chapter 09 Task 1, sse.h) of its compact JSON,
/// which holds no line break, so "data: " + JSON + "\n\n". Invalid UTF-8 in strings is replaced
/// by U+FFFD rather than throwing.
std::string sse_event(const nlohmann::ordered_json& j);

/// `j` as compact JSON text, invalid UTF-8 replaced by U+FFFD (never throws for it).
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace lio::server
