// solo_sequence.cpp — SoloSequence (lio/model_runner.h): one sequence on a runner's pool with
// fixed block tables, for the tools and tests that run a single prompt without an Engine.
#include <string>

#include "lio/error.h"
#include "lio/model_runner.h"

namespace lio {

SoloSequence::SoloSequence(ModelRunner& runner, int64_t capacity_tokens) : runner_(runner), capacity_(capacity_tokens) {
  const ModelConfig& c = runner.config();
  if (capacity_tokens < 1 || capacity_tokens > c.context_length) {
    throw InvalidArgument("KV cache capacity must be in [1, " + std::to_string(c.context_length) + "] tokens, got " +
                          std::to_string(capacity_tokens));
  }
  const KvPool& pool = runner.kv_pool();
  const int64_t n_blocks = (capacity_tokens + pool.block_size() - 1) / pool.block_size();
  if (n_blocks * pool.n_groups() > pool.n_blocks()) {  // every KV cache group its own blocks
    throw InvalidArgument("a sequence of " + std::to_string(capacity_tokens) + " tokens needs " +
                          std::to_string(n_blocks * pool.n_groups()) + " KV blocks of " +
                          std::to_string(pool.block_size()) + " tokens; the pool has " +
                          std::to_string(pool.n_blocks()) + " (raise --kv-cache-mib)");
  }
  for (int64_t g = 0; g < pool.n_groups(); ++g) {
    block_tables_.emplace_back();
    for (int64_t b = 0; b < n_blocks; ++b) block_tables_.back().push_back(static_cast<int32_t>(g * n_blocks + b));
  }
}

ForwardBatch SoloSequence::batch(std::span<const int32_t> tokens, bool all_logits) const {
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw InvalidArgument("forward: no tokens");
  if (n_tokens_ + n > capacity_) {
    throw InvalidArgument("forward: " + std::to_string(n_tokens_ + n) + " tokens do not fit in a KV cache of " +
                          std::to_string(capacity_) + " tokens");
  }
  ForwardBatch b(runner_.kv_pool().block_size());
  b.add_sequence(tokens, n_tokens_, block_tables_, all_logits ? n : 1, true);
  return b;
}

std::span<const float> SoloSequence::forward(std::span<const int32_t> tokens, bool all_logits, bool return_hidden) {
  ForwardBatch b = batch(tokens, all_logits);
  b.return_hidden = return_hidden;
  std::span<const float> logits = runner_.forward(b);
  n_tokens_ += b.n_tokens();
  return logits;
}

int32_t SoloSequence::forward_sample(std::span<const int32_t> tokens, Sampler& sampler,
                                     std::span<const int32_t> history) {
  const ForwardBatch b = batch(tokens, false);
  const SampleRow row{&sampler, history};
  const int32_t next = runner_.forward_sample(b, std::span<const SampleRow>(&row, 1)).front();
  n_tokens_ += b.n_tokens();
  return next;
}

}  // namespace lio
