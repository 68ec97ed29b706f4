// generate.h — one sequence from prompt to finish: prefill, then decode token by token,
// with or without the KV cache, streaming complete UTF-8 text as it goes.
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
#include "lio/tokenizer.h"

namespace lio {

/// Settings for one generate() call.
struct GenerateOptions {
  int64_t max_tokens = 128;       ///< generated tokens at most (>= 1)
  std::vector<std::string> stop;  ///< stop strings (not included in the output text)
  bool use_kv_cache = true;       ///< false: recompute the whole sequence every step
  bool ignore_eos = false;        ///< keep generating past EOS (benchmarks need fixed lengths)
  SamplerConfig sampler;          ///< token selection (validated by Sampler)
};

/// Why generation ended.
enum class FinishReason { Stop, Length };  // Stop: EOS/stop string; Length: max_tokens or context
/// "stop" or "length", as in OpenAI-style `finish_reason` fields.
const char* finish_reason_name(FinishReason r);

/// Output text, token ids and timings of one generate() call.
struct GenerateResult {
  std::string text;                 ///< generated text (prompt excluded, stop string excluded)
  std::vector<int32_t> token_ids;   ///< generated ids (EOS excluded)
  int64_t n_prompt_tokens = 0;      ///< tokens in the prompt
  double ttft_ms = 0;               ///< prefill + first token
  double tpot_ms = 0;               ///< mean time per later token
  double tokens_per_s = 0;          ///< decode throughput (tokens after the first / their time)
  double total_ms = 0;              ///< prefill + decode wall time
  int64_t kv_bytes = 0;             ///< K/V bytes held at the end (0 without a cache)
  int64_t kv_bytes_allocated = 0;   ///< bytes the cache allocated
  int64_t kv_tokens = 0;            ///< positions held in the cache at the end
  FinishReason finish_reason = FinishReason::Length;  ///< why generation ended
};

/// Callback receiving each newly completed piece of text (UTF-8 complete).
using TextCallback = std::function<void(std::string_view)>;

/// Generates a continuation of `prompt_ids`. Throws InvalidArgument when the prompt is
/// empty, the prompt does not leave room for one generated token in the context window
/// ("prompt has N tokens; the context holds M"), max_tokens < 1, or the sampler
/// settings are invalid. Generation also ends at the context length (FinishReason::Length).
/// `runner` may be on any device; its cache is reset (sized to prompt + max_tokens, capped at
/// the context length) and holds the sequence afterwards.
GenerateResult generate(ModelRunner& runner, const Tokenizer& tokenizer,
                        std::span<const int32_t> prompt_ids, const GenerateOptions& options,
                        const TextCallback& on_text = {});

/// Finds the earliest occurrence of any stop string in `text`; returns npos if none.
/// Also reports, via `holdback`, how many trailing bytes could still begin a stop string
/// (so a streamer must not emit them yet).
size_t find_stop(std::string_view text, std::span<const std::string> stops, size_t* holdback);

}  // namespace lio
