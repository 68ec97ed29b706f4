// Chapter 01, Tasks 1 and 2 — reference solution. Declarations: common/model/include/lio/kv_sizing.h.
#include "lio/kv_sizing.h"

#include <string>

#include "lio/error.h"

namespace lio {

int64_t kv_cache_bytes(const ModelConfig& config, int64_t seq_len, int64_t batch, KvDtype dtype) {
  if (seq_len < 0 || batch < 0) {
    throw InvalidArgument("kv_cache_bytes: seq_len and batch must be >= 0, got " +
                          std::to_string(seq_len) + " and " + std::to_string(batch));
  }
  // K and V, per layer, per KV head (not per query head: GQA shares them), per dimension.
  const int64_t per_token = 2 * config.n_layers * config.n_kv_heads * config.head_dim * kv_dtype_bytes(dtype);
  return per_token * seq_len * batch;
}

double kv_tokens_per_gib(const ModelConfig& config, KvDtype dtype) {
  return static_cast<double>(gib(1)) / static_cast<double>(kv_cache_bytes(config, 1, 1, dtype));
}

int64_t max_batch_under_budget(const ModelConfig& config, int64_t seq_len, KvDtype dtype,
                               int64_t budget_bytes, int64_t weight_bytes) {
  if (budget_bytes < 0 || weight_bytes < 0 || seq_len <= 0) {
    throw InvalidArgument("max_batch_under_budget: budget and weight bytes must be >= 0 and seq_len > 0");
  }
  const int64_t free_bytes = budget_bytes - weight_bytes;
  if (free_bytes <= 0) return 0;
  // Integer division rounds down: a sequence either fits whole or not at all.
  return free_bytes / kv_cache_bytes(config, seq_len, 1, dtype);
}

}  // namespace lio
