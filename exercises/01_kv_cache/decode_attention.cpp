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
  // TODO(Task 4): for each query head h (q + h * head_dim), with KV head g = h / (n_heads / n_kv_heads):
  //   1. s[j] = scale * dot(q_h, k[j, g]) for j in [0, n_ctx)   (k[j, g] = k_cache + (j * n_kv_heads + g) * head_dim)
  //   2. p = softmax(s) — subtract max(s) before exp so nothing overflows
  //   3. out[h] = sum_j p[j] * v[j, g]
  //   Throw InvalidArgument if n_ctx < 1 or n_heads % n_kv_heads != 0.
  (void)q, (void)k_cache, (void)v_cache, (void)out, (void)n_ctx, (void)n_heads, (void)n_kv_heads,
      (void)head_dim, (void)scale;
  throw NotImplemented("Task 4 (exercises/01_kv_cache/decode_attention.cpp): decode_attention — "
                       "scores, stable softmax, weighted sum of values, per query head");
}

}  // namespace lio::cpu
