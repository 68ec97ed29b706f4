// Chapter 01, Tasks 1 and 2 — YOUR implementation. Declarations and contracts:
// common/model/include/lio/kv_sizing.h. Lesson: docs/01_kv_cache.md, section 2 and "Task 1" /
// "Task 2". Grade: ctest -R ch01_task_1 / ch01_task_2
#include "lio/kv_sizing.h"

#include <string>

#include "lio/error.h"

namespace lio {

int64_t kv_cache_bytes(const ModelConfig& config, int64_t seq_len, int64_t batch, KvDtype dtype) {
  // TODO(Task 1): the bytes the cache holds for `batch` sequences of `seq_len` tokens: every
  //   tensor a decode step reads back instead of recomputing, for every layer and token, at
  //   kv_dtype_bytes(dtype) per element. Which of the model's head counts is cached? (Lesson,
  //   section 2, "What the cache stores, and how big it is".) Must hold: LLaMA-7B (32 layers, 32
  //   KV heads, head_dim 128), fp16, 4,096 tokens, batch 16 -> 32 GiB. Reject a negative seq_len
  //   or batch with lio::InvalidArgument.
  (void)config, (void)seq_len, (void)batch, (void)dtype;
  throw NotImplemented("Task 1 (exercises/01_kv_cache/kv_sizing.cpp): kv_cache_bytes — "
                       "lesson docs/01_kv_cache.md, section 2 and Task 1");
}

double kv_tokens_per_gib(const ModelConfig& config, KvDtype dtype) {
  // TODO(Task 1): how many tokens' cache fit in one GiB (gib(1) bytes), as a real number.
  //   Must hold: LLaMA-7B fp16 -> 2048.
  (void)config, (void)dtype;
  throw NotImplemented("Task 1 (exercises/01_kv_cache/kv_sizing.cpp): kv_tokens_per_gib — "
                       "lesson docs/01_kv_cache.md, Task 1");
}

int64_t max_batch_under_budget(const ModelConfig& config, int64_t seq_len, KvDtype dtype, MemorySize budget,
                               MemorySize weights) {
  // TODO(Task 2): the largest number of whole seq_len-token sequences whose cache fits in
  //   `budget` beside `weights` (0 if none), as lio/kv_sizing.h states. Both sizes arrive as a
  //   person wrote them, a value and a unit (MemoryUnit says how many bytes each unit is); the
  //   conversion to whole bytes is yours (lesson: docs/01_kv_cache.md, section 2, "Memory
  //   budgeting"). Must hold: LLaMA-7B fp16, seq 4096 -> 13 in {40, GiB} beside {14, GiB}, 12
  //   in {40, GB} beside {14, GB}. Throw InvalidArgument for seq_len <= 0, a negative or
  //   non-finite value, a unit outside MemoryUnit, or more bytes than an int64_t holds.
  (void)config, (void)seq_len, (void)dtype, (void)budget, (void)weights;
  throw NotImplemented("Task 2 (exercises/01_kv_cache/kv_sizing.cpp): max_batch_under_budget — "
                       "lesson docs/01_kv_cache.md, section 2 (Memory budgeting) and Task 2");
}

}  // namespace lio
