// perplexity.cpp — llama.cpp's perplexity procedure on our engine (see lio/perplexity.h).
#include "lio/perplexity.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "lio/error.h"
#include "lio/forward_batch.h"

namespace lio {

namespace {

/// log softmax(logits)[token], the sum of exponentials in double (llama.cpp's log_softmax).
double log_prob(const float* logits, int64_t vocab, int32_t token) {
  const float max_logit = *std::max_element(logits, logits + vocab);
  double sum_exp = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum_exp += std::exp(static_cast<double>(logits[i] - max_logit));
  return static_cast<double>(logits[token] - max_logit) - std::log(sum_exp);
}

}  // namespace

PerplexityResult perplexity(ModelRunner& runner, std::span<const int32_t> tokens, int32_t bos_id, int64_t n_ctx,
                            int64_t n_chunks, const std::function<void(int64_t, double)>& on_chunk) {
  const ModelConfig& c = runner.config();
  const auto n_text = static_cast<int64_t>(tokens.size());
  if (n_ctx < 4 || n_ctx > c.context_length) {
    throw InvalidArgument("perplexity: --ctx-size must be in [4, " + std::to_string(c.context_length) + "], got " +
                          std::to_string(n_ctx));
  }
  if (n_chunks == 0) throw InvalidArgument("perplexity: --chunks must be > 0 (or -1 for all)");
  if (n_text < 2 * n_ctx) {
    throw InvalidArgument("perplexity: the text tokenizes to " + std::to_string(n_text) + " tokens; a context of " +
                          std::to_string(n_ctx) + " needs at least " + std::to_string(2 * n_ctx) +
                          " (as llama-perplexity requires)");
  }
  const int64_t bs = runner.kv_pool().block_size();
  const int64_t n_blocks = (n_ctx + bs - 1) / bs;
  if (n_blocks > runner.kv_pool().n_blocks()) {
    throw InvalidArgument("perplexity: a chunk of " + std::to_string(n_ctx) + " tokens needs " +
                          std::to_string(n_blocks) + " KV blocks; the pool has " +
                          std::to_string(runner.kv_pool().n_blocks()) + " (raise --kv-cache-mib)");
  }
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  for (int64_t b = 0; b < n_blocks; ++b) table[static_cast<size_t>(b)] = static_cast<int32_t>(b);

  PerplexityResult r;
  r.n_ctx = n_ctx;
  r.n_text_tokens = n_text;
  r.n_chunks = n_chunks < 0 ? n_text / n_ctx : std::min(n_chunks, n_text / n_ctx);
  const int64_t first = n_ctx / 2;
  double nll = 0.0, nll2 = 0.0;
  std::vector<int32_t> chunk(static_cast<size_t>(n_ctx));
  for (int64_t i = 0; i < r.n_chunks; ++i) {
    std::copy_n(tokens.begin() + i * n_ctx, n_ctx, chunk.begin());
    if (bos_id >= 0) chunk[0] = bos_id;
    ForwardBatch batch(bs);
    batch.add_sequence(chunk, 0, table, /*n_logits=*/n_ctx - first);  // rows first .. n_ctx - 1
    const std::span<const float> logits = runner.forward(batch);
    for (int64_t j = first; j < n_ctx - 1; ++j) {
      // The next token is the text's, not the BOS substitute (j + 1 >= 1 anyway).
      const double lp = log_prob(logits.data() + (j - first) * c.vocab_size, c.vocab_size,
                                 tokens[static_cast<size_t>(i * n_ctx + j + 1)]);
      nll -= lp;
      nll2 += lp * lp;
      ++r.n_scored;
    }
    r.running_ppl.push_back(std::exp(nll / static_cast<double>(r.n_scored)));
    if (on_chunk) on_chunk(i, r.running_ppl.back());
  }
  const auto n = static_cast<double>(r.n_scored);
  r.mean_nll = nll / n;
  r.ppl = std::exp(r.mean_nll);
  const double var = nll2 / n - r.mean_nll * r.mean_nll;
  r.ppl_uncertainty = var > 0 && r.n_scored > 1 ? std::sqrt(var / (n - 1)) * r.ppl : 0.0;
  return r;
}

}  // namespace lio
