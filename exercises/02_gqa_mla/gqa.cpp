// Chapter 02, Tasks 1 and 3 — YOUR implementation: the KV-head axis.
// Declarations and contracts: common/model/include/lio/gqa.h.
// Grade: ctest -R ch02_task_1 / ch02_task_3
#include "lio/gqa.h"

#include <string>

#include "lio/error.h"

namespace lio {

// ---- Task 1 -----------------------------------------------------------------------------------

int64_t kv_head_for_query_head(int64_t h, int64_t n_heads, int64_t n_kv_heads) {
  // TODO(Task 1): the KV head query head h reads, in the order the stored models use
  //   (lio/gqa.h; docs/02_gqa_mla.md, section 1). Must hold: 9 heads over 3 KV heads read
  //   0 0 0 1 1 1 2 2 2; MHA and MQA are the two ends. Throw InvalidArgument unless
  //   0 <= h < n_heads, n_kv_heads >= 1 and n_kv_heads divides n_heads.
  (void)h, (void)n_heads, (void)n_kv_heads;
  throw NotImplemented("Task 1 (exercises/02_gqa_mla/gqa.cpp): kv_head_for_query_head — "
                       "lesson docs/02_gqa_mla.md, section 1 and Task 1");
}

// ---- Task 3 -----------------------------------------------------------------------------------

std::vector<float> mean_pool_kv_heads(std::span<const float> w, int64_t n_kv_heads, int64_t head_dim, int64_t cols,
                                      int64_t n_groups) {
  // TODO(Task 3): check the counts and w.size() (InvalidArgument), then return
  //   (n_groups * head_dim, cols): each group the element-wise mean of the stored heads its
  //   query heads read before, as lio/gqa.h states (docs/02_gqa_mla.md, section 4).
  (void)w, (void)n_kv_heads, (void)head_dim, (void)cols, (void)n_groups;
  throw NotImplemented("Task 3 (exercises/02_gqa_mla/gqa.cpp): mean_pool_kv_heads — "
                       "lesson docs/02_gqa_mla.md, section 4 and Task 3");
}

}  // namespace lio
