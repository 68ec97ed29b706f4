// Chapter 02, Tasks 1 and 3 — reference solution. Declarations: common/model/include/lio/gqa.h.
#include "lio/gqa.h"

#include <string>

#include "lio/error.h"

namespace lio {

// ---- Task 1 -----------------------------------------------------------------------------------

int64_t kv_head_for_query_head(int64_t h, int64_t n_heads, int64_t n_kv_heads) {
  if (n_kv_heads < 1 || n_heads < 1 || n_heads % n_kv_heads != 0 || h < 0 || h >= n_heads) {
    throw InvalidArgument("kv_head_for_query_head: need 0 <= h < n_heads and n_heads a multiple of n_kv_heads, got h " +
                          std::to_string(h) + ", n_heads " + std::to_string(n_heads) + ", n_kv_heads " +
                          std::to_string(n_kv_heads));
  }
  // Consecutive query heads share a KV head: a group of n_heads / n_kv_heads of them.
  return h / (n_heads / n_kv_heads);
}

// ---- Task 3 -----------------------------------------------------------------------------------

std::vector<float> mean_pool_kv_heads(std::span<const float> w, int64_t n_kv_heads, int64_t head_dim, int64_t cols,
                                      int64_t n_groups) {
  if (n_kv_heads < 1 || head_dim < 1 || cols < 1 || n_groups < 1 || n_kv_heads % n_groups != 0) {
    throw InvalidArgument("mean_pool_kv_heads: need counts >= 1 and n_kv_heads a multiple of n_groups, got " +
                          std::to_string(n_kv_heads) + " heads into " + std::to_string(n_groups) + " groups");
  }
  if (static_cast<int64_t>(w.size()) != n_kv_heads * head_dim * cols) {
    throw InvalidArgument("mean_pool_kv_heads: w holds " + std::to_string(w.size()) + " floats, " +
                          std::to_string(n_kv_heads * head_dim * cols) + " expected");
  }
  // Group g: the mean of the per_group consecutive heads from g * (n_kv_heads / n_groups) on.
  const int64_t per_group = n_kv_heads / n_groups, head_floats = head_dim * cols;
  std::vector<float> out(static_cast<size_t>(n_groups * head_floats), 0.0f);
  for (int64_t g = 0; g < n_groups; ++g) {
    float* dst = out.data() + g * head_floats;
    for (int64_t j = g * per_group; j < (g + 1) * per_group; ++j) {
      const float* src = w.data() + j * head_floats;
      for (int64_t i = 0; i < head_floats; ++i) dst[i] += src[i];
    }
    for (int64_t i = 0; i < head_floats; ++i) dst[i] /= static_cast<float>(per_group);
  }
  return out;
}

}  // namespace lio
