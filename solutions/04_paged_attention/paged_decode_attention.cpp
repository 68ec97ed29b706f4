// Chapter 04, Task 5 — reference solution: one query head over a sequence's K/V gathered
// through its block table. Declaration and contract: kernels/cpu/cpu_ops.h.
#include <algorithm>
#include <cmath>
#include <string>

#include "cpu_ops.h"
#include "lio/error.h"

namespace lio::cpu {

void paged_decode_attention(const float* q, const float* k_pool, const float* v_pool, float* out,
                            std::span<const int32_t> block_table, int64_t n_ctx, int64_t block_size,
                            int64_t n_kv_heads, int64_t kv_head, int64_t head_dim, float scale,
                            std::span<float> scores) {
  if (n_ctx < 1 || block_size < 1) throw InvalidArgument("paged_decode_attention: n_ctx and block_size must be >= 1");
  if ((n_ctx + block_size - 1) / block_size > static_cast<int64_t>(block_table.size())) {
    throw InvalidArgument("paged_decode_attention: " + std::to_string(n_ctx) + " positions need more than the " +
                          std::to_string(block_table.size()) + " blocks of the table");
  }
  if (static_cast<int64_t>(scores.size()) < n_ctx) {
    throw InvalidArgument("paged_decode_attention: " + std::to_string(n_ctx) + " positions need " +
                          std::to_string(n_ctx) + " floats of scores scratch, got " +
                          std::to_string(scores.size()));
  }
  // Where position j's vector for this KV head starts: the block table is the only indirection,
  // slot = block_table[j / block_size] * block_size + j % block_size.
  auto at = [&](const float* pool, int64_t j) {
    const int64_t slot = block_table[static_cast<size_t>(j / block_size)] * block_size + j % block_size;
    return pool + (slot * n_kv_heads + kv_head) * head_dim;
  };
  scores = scores.first(static_cast<size_t>(n_ctx));  // the caller's scratch, one per thread
  float max_s = -INFINITY;
  for (int64_t j = 0; j < n_ctx; ++j) {
    const float* k = at(k_pool, j);
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t d = 0; d < head_dim; ++d) s += q[d] * k[d];
    scores[static_cast<size_t>(j)] = s * scale;
    max_s = std::max(max_s, s * scale);
  }
  float denom = 0.0f;
  for (float& s : scores) {
    s = std::exp(s - max_s);  // stable: the largest term is exp(0)
    denom += s;
  }
  std::fill_n(out, head_dim, 0.0f);
  for (int64_t j = 0; j < n_ctx; ++j) {
    const float p = scores[static_cast<size_t>(j)] / denom;
    const float* v = at(v_pool, j);
#pragma omp simd
    for (int64_t d = 0; d < head_dim; ++d) out[d] += p * v[d];
  }
}

}  // namespace lio::cpu
