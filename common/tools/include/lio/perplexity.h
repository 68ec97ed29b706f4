// perplexity.h — perplexity of a model over a text, computed the way llama.cpp's
// `llama-perplexity` computes it (tools/perplexity/perplexity.cpp, function `perplexity`), so
// the two numbers can be compared directly (chapter 03 checks them within 1%).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "lio/model_runner.h"

namespace lio {

/// What perplexity() measured.
struct PerplexityResult {
  double ppl = 0.0;             ///< exp(mean NLL) over every scored token
  double ppl_uncertainty = 0.0; ///< llama.cpp's "+/-": ppl * sqrt(var(NLL) / (n_scored - 1))
  double mean_nll = 0.0;        ///< mean negative log-likelihood, nats per token
  int64_t n_ctx = 0;            ///< tokens per chunk
  int64_t n_chunks = 0;         ///< chunks evaluated
  int64_t n_scored = 0;         ///< tokens scored: n_chunks * (n_ctx - n_ctx / 2 - 1)
  int64_t n_text_tokens = 0;    ///< tokens of the whole text
  std::vector<double> running_ppl;  ///< (n_chunks) perplexity over chunks 0 .. i, as llama.cpp prints
};

/// Perplexity of the runner's model over `tokens` (the whole text, tokenized with the model's
/// BOS choice), as llama-perplexity computes it: the text is cut into n_chunks = min(n_chunks,
/// tokens / n_ctx) chunks of n_ctx tokens (the rest is dropped); each chunk runs from an empty
/// cache, its first token replaced by `bos_id` when bos_id >= 0 (the model adds BOS); only the
/// second half of each chunk is scored — position j in [n_ctx/2, n_ctx - 2] predicts token j+1 —
/// so every scored token sees at least n_ctx/2 tokens of context. NLL = -log softmax(logits)
/// [next] with the softmax sum in double. `on_chunk(i, running_ppl)` is called after each
/// chunk (progress). Uses the runner's pool from block 0 (nothing else may use it meanwhile);
/// the pool must hold n_ctx tokens.
/// Throws InvalidArgument when n_ctx < 4 or past the model's context, n_chunks == 0, the text
/// has fewer than 2 * n_ctx tokens (llama.cpp's rule), or the pool is too small.
PerplexityResult perplexity(ModelRunner& runner, std::span<const int32_t> tokens, int32_t bos_id, int64_t n_ctx,
                            int64_t n_chunks = -1,
                            const std::function<void(int64_t, double)>& on_chunk = {});

}  // namespace lio
