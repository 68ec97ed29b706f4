// openai_protocol.h — OpenAI request bodies -> validated engine parameters, and the error type
// every malformed request becomes.
//
// Source: the OpenAI API reference (Completions, Chat Completions, Error codes), with vLLM's
// OpenAI server (vllm/entrypoints/openai/protocol.py) where the reference leaves a choice open
// (defaults, ranges, `stream_options` only with `stream`). Nothing here touches HTTP, so the
// parsing and validation are unit-tested on their own (tests/unit/test_server_protocol.cpp).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "api_error.h"
#include "lio/sequence.h"
#include "lio/tokenizer.h"

namespace lio::server {

/// Which endpoint a request came to.
enum class Endpoint { Completions, ChatCompletions };

/// One completion prompt: text, or token ids (the OpenAI API accepts both).
struct PromptInput {
  bool is_tokens = false;          ///< true: `token_ids`; false: `text`
  std::string text;                ///< the prompt text
  std::vector<int32_t> token_ids;  ///< the prompt ids (not yet checked against the vocabulary)
};

/// Limits on what one request may ask for.
struct RequestLimits {
  int64_t max_n = 128;        ///< samples per prompt (OpenAI's `n`) at most
  int64_t max_prompts = 256;  ///< prompts in one completions request at most
};

/// A validated completions or chat request.
struct GenerationRequest {
  Endpoint endpoint = Endpoint::Completions;  ///< where it came
  std::string model;                          ///< the `model` field; "" when absent
  std::vector<PromptInput> prompts;           ///< completions: 1 .. max_prompts prompts
  std::vector<ChatMessage> messages;          ///< chat: the conversation (roles normalized)
  /// Engine parameters: max_tokens, stop, ignore_eos, n, sampler (temperature, top_k, top_p,
  /// min_p, repeat_penalty, presence / frequency penalties, seed, logprobs).
  SamplingParams params;
  bool max_tokens_given = false;                ///< false: resolve_max_tokens() picks the default
  std::string max_tokens_field = "max_tokens";  ///< the field that gave it (errors name it)
  bool seed_given = false;                      ///< false: the server draws a seed per request
  bool stream = false;                          ///< answer as server-sent events
  bool include_usage = false;  ///< stream_options.include_usage: a final usage chunk
  bool echo = false;           ///< completions: the prompt text precedes each choice's text
  /// Structured outputs (lio/grammar.h): what `response_format` ({"type": "json_object"} or
  /// {"type": "json_schema", "json_schema": {"schema": ...}}) or the extra field `grammar`
  /// (an EBNF string, xgrammar's dialect of GBNF, as llama-server's `grammar` field) asked
  /// for; kind None when neither. The server compiles it (GrammarCompiler) into params.grammar.
  GrammarSpec grammar;
  std::string grammar_field;  ///< "response_format" or "grammar": the field errors name
};

/// Reads `response_format` and `grammar` (both endpoints, as vLLM takes them) into
/// request.grammar. response_format: an object whose type is "text" (no constraint),
/// "json_object" or "json_schema" (then "json_schema" must be an object whose "schema" is an
/// object or a boolean; "name" a string and "strict" a boolean when given). grammar: a
/// non-empty string. Throws ApiError 400 naming the field for any other shape, or for both
/// fields at once. `body` is the request's text, `j` its parse (parse_json_body): the schema is
/// taken from the text with its keys in their written order, the order the answer's fields
/// must follow. Source: OpenAI API reference, Chat Completions, `response_format` (Structured
/// Outputs); llama.cpp tools/server/README.md, `grammar`.
void parse_structured_output(const nlohmann::json& j, std::string_view body, GenerationRequest& request);

// ---- Chapter 09, Task 3 (solutions/09_server/request_validation.cpp) --------------------------
// Both parsers below call these two; each throws ApiError 400 whose `param` names the first
// offending field (e.g. "messages[2].role", "stop[1]"), with the message the field readers of
// json_fields.h word. Lesson: docs/09_server.md, "Task 3".

/// Reads the fields both endpoints share from `body` (a JSON object) into `request`: model
/// (string); temperature [0, 2] (default 1, OpenAI's); top_p (0, 1]; top_k (-1 or 0 = off, up to
/// INT32_MAX); min_p [0, 1]; presence_penalty / frequency_penalty [-2, 2]; repetition_penalty
/// (0, 1e6]; seed (any int64; sets seed_given); n [1, limits.max_n]; best_of [1, limits.max_n]
/// and equal to 1 or n; stop (a string, or a list of at most 4 strings); ignore_eos, stream
/// (booleans); stream_options (an object, only with stream true; include_usage a boolean);
/// logit_bias (an object, and empty); user (a string, unused). A null field counts as absent;
/// unknown fields are ignored. Source: OpenAI API reference (Completions, Chat Completions),
/// with vLLM's protocol.py for top_k, min_p and repetition_penalty.
void parse_common_fields(const nlohmann::json& body, GenerationRequest& request,
                         const RequestLimits& limits);

/// The chat conversation of `body`: "messages" must be a non-empty list of objects, each with
/// a role "system", "developer" (returned as "system"), "user" or "assistant", and a content
/// that is a string or a list of {"type": "text", "text": string} parts (their texts joined by
/// "\n"); content may be absent or null only for an assistant turn (then ""). Roles and
/// contents in order, one ChatMessage per message.
std::vector<ChatMessage> parse_messages(const nlohmann::json& body);

/// Parses a request body into JSON. Throws ApiError 400 if it is not valid UTF-8 or not JSON,
/// or if the top level is not an object.
nlohmann::json parse_json_body(std::string_view body);

/// Validates a POST /v1/completions body (OpenAI's legacy Completions API): `prompt` (string,
/// token-id list, or a list of either), max_tokens (default 16), temperature [0, 2] (default 1),
/// top_p (0, 1], top_k (-1 or 0 = off), min_p [0, 1], n [1, limits.max_n],
/// presence_penalty / frequency_penalty [-2, 2], repetition_penalty > 0, seed, stop (string
/// or up to 4 strings), logprobs [0, 5], echo, stream, stream_options, ignore_eos. Unknown
/// fields are ignored. Throws ApiError 400 naming the field for a wrong type, a value out of
/// range, a missing prompt, or an unsupported feature (suffix, logit_bias, best_of != n,
/// echo with logprobs).
GenerationRequest parse_completion_request(std::string_view body, const RequestLimits& limits = {});

/// Validates a POST /v1/chat/completions body: `messages` (non-empty; role system, developer
/// (as system), user or assistant; content a string or a list of {"type": "text", "text"}
/// parts), max_completion_tokens / max_tokens (default: what the context leaves), logprobs
/// (bool) + top_logprobs [0, 20], and the sampling fields as parse_completion_request.
/// Throws ApiError 400 naming the field (e.g. "messages[2].role") as parse_completion_request,
/// and for tools, non-text content parts or a response_format other than text.
GenerationRequest parse_chat_request(std::string_view body, const RequestLimits& limits = {});

/// The prompts' token ids, one list per prompt (chat: one, through the model's chat template
/// with the generation prompt). Text is encoded with special tokens parsed and BOS as the model
/// wants, as `lio generate` does. Throws ApiError 400 for an empty prompt, an id outside
/// [0, vocab), or a chat template the tokenizer cannot render.
std::vector<std::vector<int32_t>> prompt_token_ids(const GenerationRequest& request,
                                                   const Tokenizer& tokenizer);

/// The request's max_tokens given its longest prompt: as asked, or by default 16
/// (completions) or the rest of the context (chat). Throws ApiError 400 with the counts when
/// prompt + max_tokens passes `context_length` ("This model's maximum context length is ...").
int64_t resolve_max_tokens(const GenerationRequest& request, int64_t n_prompt_tokens,
                           int64_t context_length);

/// Whether an Authorization header value is "Bearer <key>" with exactly `key`. The comparison
/// takes the same time wherever the first difference is (no early exit), so response times do
/// not reveal how much of a guessed key was right.
bool api_key_matches(std::string_view authorization, std::string_view key);

}  // namespace lio::server
