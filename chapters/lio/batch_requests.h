// batch_requests.h — `lio batch`'s input: one JSON request a line, checked whole before
// anything runs, then tokenized.
//
//   {"prompt": "text"}                                   plain text, tokenized as-is
//   {"messages": [{"role": "user", "content": "..."}]}   chat template + generation prompt
//   {"prompt_token_ids": [1, 2, 3]}                      exact ids (benchmarks)
// plus optional per-request overrides of the sampling defaults: max_tokens, temperature, top_k,
// top_p, min_p, repeat_penalty, seed, stop (string or list), ignore_eos, n (samples of the
// prompt, sharing its KV blocks). Blank lines are skipped.
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <vector>

#include "lio/sequence.h"
#include "lio/tokenizer.h"

namespace lio {

/// One input line, checked but not yet tokenized. Exactly one of the three prompt forms is set.
struct BatchRequest {
  int64_t line = 0;                                  ///< 1-based line number in the file
  std::optional<std::string> prompt;                 ///< "prompt"
  std::optional<std::vector<ChatMessage>> messages;  ///< "messages"
  std::optional<std::vector<int32_t>> token_ids;     ///< "prompt_token_ids"
  SamplingParams params;                             ///< defaults with the line's overrides
  /// Structured outputs: the line's "response_format" ({"type": "json_object"} or
  /// {"type": "json_schema", "json_schema": {"schema": ...}}, OpenAI's shapes) or "grammar"
  /// (EBNF); kind None when neither. lio batch compiles it into params.grammar.
  GrammarSpec grammar;
};

/// Parses JSONL requests from `in`; `name` is the file name used in error messages.
/// Each request starts from `defaults`; when a line has no "seed", request i (0-based, in file
/// order) gets defaults.sampler.seed + i so that equal prompts sampled at temperature > 0 differ,
/// as vLLM's unseeded requests do — and a rerun gives the same outputs.
/// Throws InvalidArgument "NAME:LINE: what is wrong" for a line that is not JSON, not an object,
/// has none or several of prompt / messages / prompt_token_ids, a field of the wrong type or
/// range, an unknown field, a malformed response_format or grammar (or both), or sampling
/// values SamplingParams::validate rejects; and
/// "NAME: no requests" when no non-blank line is left.
std::vector<BatchRequest> parse_batch_requests(std::istream& in, const std::string& name,
                                               const SamplingParams& defaults);

/// Token ids of `request` for `tokenizer`: the ids as given; the text encoded with special
/// tokens parsed and BOS per add_bos_default(); or the messages rendered by the chat template
/// (with the generation prompt) and encoded likewise. Throws UnsupportedError for a chat
/// template the tokenizer cannot render.
std::vector<int32_t> batch_prompt_ids(const BatchRequest& request, const Tokenizer& tokenizer);

}  // namespace lio
