// Chapter 01, Tasks 1 and 2 — YOUR implementation. Declarations and the formula:
// common/model/include/lio/kv_sizing.h. Lesson: docs/01_kv_cache.md. Grade: ctest -R ch01_task_1 / ch01_task_2
#include "lio/kv_sizing.h"

#include <string>

#include "lio/error.h"

namespace lio {

int64_t kv_cache_bytes(const ModelConfig& config, int64_t seq_len, int64_t batch, KvDtype dtype) {
  // TODO(Task 1): bytes = 2 (K and V) x n_layers x n_kv_heads x head_dim x seq_len x batch x
  //   kv_dtype_bytes(dtype). Use n_kv_heads, not n_heads: with GQA several query heads share
  //   one cached K/V head. Reject negative seq_len or batch with lio::InvalidArgument.
  (void)config, (void)seq_len, (void)batch, (void)dtype;
  throw NotImplemented("Task 1 (exercises/01_kv_cache/kv_sizing.cpp): kv_cache_bytes — "
                       "2 x layers x KV heads x head_dim x tokens x batch x bytes/element");
}

double kv_tokens_per_gib(const ModelConfig& config, KvDtype dtype) {
  // TODO(Task 1): one GiB is gib(1) = 2^30 bytes; divide it by the bytes one token costs
  //   (kv_cache_bytes for seq_len 1, batch 1). Return a double.
  (void)config, (void)dtype;
  throw NotImplemented("Task 1 (exercises/01_kv_cache/kv_sizing.cpp): kv_tokens_per_gib — "
                       "2^30 / bytes per token");
}

int64_t max_batch_under_budget(const ModelConfig& config, int64_t seq_len, KvDtype dtype,
                               int64_t budget_bytes, int64_t weight_bytes) {
  // TODO(Task 2): the weights take weight_bytes; what is left holds whole sequences of
  //   seq_len tokens each. Return how many fit (round down; 0 if none). Both arguments are
  //   bytes: the caller chose GiB (gib(40)) or GB (gb(40)); the answers differ (13 vs 12 for
  //   LLaMA-7B at 4096 tokens). Reject negative sizes or seq_len <= 0 with InvalidArgument.
  (void)config, (void)seq_len, (void)dtype, (void)budget_bytes, (void)weight_bytes;
  throw NotImplemented("Task 2 (exercises/01_kv_cache/kv_sizing.cpp): max_batch_under_budget — "
                       "(budget - weights) / bytes per sequence, rounded down");
}

}  // namespace lio
