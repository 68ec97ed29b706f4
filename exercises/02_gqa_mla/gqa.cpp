// Chapter 02, Tasks 1 and 3 — YOUR implementation: the KV-head axis.
// Declarations and contracts: common/model/include/lio/gqa.h.
// Grade: ctest -R ch02_task_1 / ch02_task_3
#include "lio/gqa.h"

#include <string>

#include "lio/error.h"

namespace lio {

// ---- Task 1 -----------------------------------------------------------------------------------

int64_t kv_head_for_query_head(int64_t h, int64_t n_heads, int64_t n_kv_heads) {
  // TODO(Task 1): throw InvalidArgument unless 0 <= h < n_heads, n_kv_heads >= 1 and n_heads %
  //   n_kv_heads == 0. Query heads form n_kv_heads consecutive groups; return h's group.
  (void)h, (void)n_heads, (void)n_kv_heads;
  throw NotImplemented("Task 1 (exercises/02_gqa_mla/gqa.cpp): kv_head_for_query_head — "
                       "which group of n_heads / n_kv_heads query heads is h in?");
}

// ---- Task 3 -----------------------------------------------------------------------------------

std::vector<float> mean_pool_kv_heads(std::span<const float> w, int64_t n_kv_heads, int64_t head_dim, int64_t cols,
                                      int64_t n_groups) {
  // TODO(Task 3): check the counts and w.size() (InvalidArgument), then return
  //   (n_groups * head_dim, cols) where group g's rows are the element-wise mean of the
  //   n_kv_heads / n_groups consecutive heads starting at head g * (n_kv_heads / n_groups).
  (void)w, (void)n_kv_heads, (void)head_dim, (void)cols, (void)n_groups;
  throw NotImplemented("Task 3 (exercises/02_gqa_mla/gqa.cpp): mean_pool_kv_heads — "
                       "average each group's K/V heads into one");
}

}  // namespace lio
