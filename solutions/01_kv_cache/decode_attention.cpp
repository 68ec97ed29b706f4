// Chapter 01, Task 4 — reference solution: one query token over the cached prefix (GQA).
// Declaration: kernels/cpu/cpu_ops.h.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_ops.h"
#include "lio/error.h"

namespace lio::cpu {

void decode_attention(const float* q, const float* k_cache, const float* v_cache, float* out,
                      int64_t n_ctx, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                      float scale) {
  if (n_ctx < 1) throw InvalidArgument("decode_attention: n_ctx must be >= 1");
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0) {
    throw InvalidArgument("decode_attention: n_heads must be a multiple of n_kv_heads");
  }
  const int64_t group = n_heads / n_kv_heads;  // query heads sharing one KV head
  const int64_t kv_stride = n_kv_heads * head_dim;
#pragma omp parallel
  {
    std::vector<float> scores(static_cast<size_t>(n_ctx));
#pragma omp for schedule(static)
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* qh = q + h * head_dim;
      const int64_t g = h / group;
      // Scores against every cached key, tracking the max for a stable softmax.
      float max_s = -INFINITY;
      for (int64_t j = 0; j < n_ctx; ++j) {
        const float* kj = k_cache + j * kv_stride + g * head_dim;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t d = 0; d < head_dim; ++d) s += qh[d] * kj[d];
        scores[static_cast<size_t>(j)] = s * scale;
        max_s = std::max(max_s, s * scale);
      }
      float denom = 0.0f;
      for (int64_t j = 0; j < n_ctx; ++j) {
        scores[static_cast<size_t>(j)] = std::exp(scores[static_cast<size_t>(j)] - max_s);
        denom += scores[static_cast<size_t>(j)];
      }
      // Weighted sum of the cached values.
      float* oh = out + h * head_dim;
      std::fill_n(oh, head_dim, 0.0f);
      for (int64_t j = 0; j < n_ctx; ++j) {
        const float p = scores[static_cast<size_t>(j)] / denom;
        const float* vj = v_cache + j * kv_stride + g * head_dim;
#pragma omp simd
        for (int64_t d = 0; d < head_dim; ++d) oh[d] += p * vj[d];
      }
    }
  }
}

}  // namespace lio::cpu
