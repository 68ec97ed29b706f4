// Chapter 01, Task 4 — YOUR implementation: one query token over the cached prefix (GQA).
// Declaration and contract: kernels/cpu/cpu_ops.h (lio::cpu::decode_attention).
// Grade: ctest -R ch01_task_4
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_ops.h"
#include "lio/error.h"

namespace lio::cpu {

void decode_attention(const float* q, const float* k_cache, const float* v_cache, float* out,
                      int64_t n_ctx, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                      float scale) {
  // TODO(Task 4): out (n_heads, head_dim) = every query head's attention over the n_ctx cached
  //   positions, as kernels/cpu/cpu_ops.h defines it; the cache rows are (n_ctx, n_kv_heads,
  //   head_dim) and a query head reads its group's KV head.
  //   Must hold: equal to attention_reference to f32 rounding, for MHA, GQA and MQA, and finite
  //   when the scores are far too large for exp (lesson: docs/01_kv_cache.md, "Task 4").
  //   Throw InvalidArgument if n_ctx < 1 or n_heads % n_kv_heads != 0.
  (void)q, (void)k_cache, (void)v_cache, (void)out, (void)n_ctx, (void)n_heads, (void)n_kv_heads,
      (void)head_dim, (void)scale;
  throw NotImplemented("Task 4 (exercises/01_kv_cache/decode_attention.cpp): decode_attention — "
                       "lesson docs/01_kv_cache.md, Task 4");
}

}  // namespace lio::cpu
