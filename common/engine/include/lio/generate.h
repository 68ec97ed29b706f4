// generate.h — one sequence from prompt to finish: prefill, then decode token by token,
// with or without the KV cache, streaming complete UTF-8 text as it goes. It is a
// one-request Engine (lio/engine.h): the same scheduler, batch and forward pass as a server.
//
// Metrics follow the serving vocabulary (vLLM / MLPerf Inference):
//   TTFT  time to first token = prefill + first sample (ms)
//   TPOT  time per output token after the first = (total - TTFT) / (n_generated - 1) (ms)
//   tokens/s = n_generated / total decode-phase time (first token excluded)
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lio/model_runner.h"
#include "lio/sampler.h"
#include "lio/sequence.h"
#include "lio/speculative.h"
#include "lio/tokenizer.h"

namespace lio {

/// Settings for one generate() call.
struct GenerateOptions {
  int64_t max_tokens = 128;       ///< generated tokens at most (>= 1)
  std::vector<std::string> stop;  ///< stop strings (not included in the output text)
  bool use_kv_cache = true;       ///< false: recompute the whole sequence every step
  bool ignore_eos = false;        ///< keep generating past EOS (benchmarks need fixed lengths)
  SamplerConfig sampler;          ///< token selection (validated by Sampler)
  SpeculativeConfig speculative;  ///< chapter 06: who drafts (method None: plain decoding)
  ModelRunner* draft = nullptr;   ///< the draft model's runner for SpecMethod::Draft (not owned)
  bool enforce_eager = true;      ///< no CUDA graphs (EngineConfig::enforce_eager, and its default)
  /// Structured outputs: the compiled JSON schema or grammar the output must follow
  /// (SamplingParams::grammar; lio/grammar.h); null = unconstrained.
  std::shared_ptr<const CompiledGrammar> grammar;
};

/// Output text, token ids and timings of one generate() call.
struct GenerateResult {
  std::string text;                 ///< generated text (prompt excluded, stop string excluded)
  std::vector<int32_t> token_ids;   ///< generated ids (EOS excluded)
  int64_t n_prompt_tokens = 0;      ///< tokens in the prompt
  double ttft_ms = 0;               ///< prefill + first token
  double tpot_ms = 0;               ///< mean time per later token
  double tokens_per_s = 0;          ///< decode throughput (tokens after the first / their time)
  double total_ms = 0;              ///< prefill + decode wall time
  int64_t kv_bytes = 0;             ///< K/V bytes of the positions held at the end (0 without a cache)
  int64_t kv_bytes_allocated = 0;   ///< bytes of the KV blocks the sequence held at the end
  int64_t kv_tokens = 0;            ///< positions held in the cache at the end
  FinishReason finish_reason = FinishReason::Length;  ///< why generation ended
  std::string spec_method = "none";     ///< chapter 06: the drafter used
  int64_t spec_num_drafts = 0;          ///< verification rounds with drafts
  int64_t spec_num_draft_tokens = 0;    ///< drafts verified
  int64_t spec_num_accepted_tokens = 0; ///< drafts accepted
  int64_t spec_num_rejections = 0;      ///< verification rounds that ended at a rejected draft
  int64_t n_steps = 0;                  ///< engine steps (target forward passes), prefill included
  /// Prompt tokens found in the engine's prefix cache: 0, since generate() runs its one-request
  /// Engine without one (reported so a warm-up can show it left the timed prompt cold).
  int64_t prefix_cache_hits = 0;
  /// Structured outputs: the token masks computed (one per step) and their wall time, ms.
  int64_t n_grammar_masks = 0;
  double grammar_mask_ms = 0;  ///< see n_grammar_masks
};

/// Callback receiving each newly completed piece of text (UTF-8 complete).
using TextCallback = std::function<void(std::string_view)>;

/// Generates a continuation of `prompt_ids` with a one-request Engine over `runner` (whose
/// KV pool must be free: the engine hands out its blocks). Throws InvalidArgument when the
/// prompt is empty, the prompt does not leave room for one generated token in the context
/// window ("prompt has N tokens; the context holds M"), the pool cannot hold the prompt,
/// max_tokens < 1, or the sampler settings are invalid. Generation also ends at the context
/// length, or when the pool cannot hold the next token (FinishReason::Length).
GenerateResult generate(ModelRunner& runner, const Tokenizer& tokenizer,
                        std::span<const int32_t> prompt_ids, const GenerateOptions& options,
                        const TextCallback& on_text = {});

/// A prompt for untimed warm-up runs before a timed generate() of `prompt_ids` (`lio generate
/// --warmup N`): the same length, made of the prompt's own tokens, and sharing no prefix with it
/// (its first token differs), so that no prefix cache, token- or block-grained, could serve the
/// timed prompt from the warm-up. Rotates the prompt left to its first token that differs from
/// prompt_ids[0]; when every token equals prompt_ids[0], repeats (prompt_ids[0] + 1) % vocab_size.
/// Returns (prompt_ids.size()) ids in [0, vocab_size). Throws InvalidArgument when the prompt is
/// empty, vocab_size < 2, or a token is outside [0, vocab_size).
std::vector<int32_t> warmup_prompt(std::span<const int32_t> prompt_ids, int64_t vocab_size);

}  // namespace lio
