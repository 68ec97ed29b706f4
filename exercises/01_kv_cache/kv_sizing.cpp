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

int64_t max_batch_under_budget(const ModelConfig& config, int64_t seq_len, KvDtype dtype, MemorySize budget,
                               MemorySize weights) {
  // TODO(Task 2): budget and weights arrive as a person wrote them: a value and a unit
  //   (lio/kv_sizing.h, MemoryUnit). Turn each into whole bytes yourself: which units are
  //   powers of ten and which powers of two? (Lesson, "Memory budgeting".) The weights take
  //   theirs; what is left holds whole sequences of seq_len tokens each. Return how many fit
  //   (0 if none). Throw InvalidArgument for seq_len <= 0, a negative or non-finite value, a
  //   unit outside MemoryUnit, or more bytes than an int64_t holds.
  (void)config, (void)seq_len, (void)dtype, (void)budget, (void)weights;
  throw NotImplemented("Task 2 (exercises/01_kv_cache/kv_sizing.cpp): max_batch_under_budget — "
                       "budget and weights to bytes (GB or GiB?), then free bytes / bytes per sequence");
}

}  // namespace lio
