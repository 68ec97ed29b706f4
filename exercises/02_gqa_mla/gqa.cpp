// Chapter 02, Tasks 1-3 — YOUR implementation: the KV-head axis.
// Declarations and contracts: common/model/include/lio/gqa.h.
// Grade: ctest -R ch02_task_K (K = 1..3)
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

// ---- Task 2 -----------------------------------------------------------------------------------

int64_t kv_bytes_per_token(const AttentionShape& s, int64_t bytes_per_elem) {
  // TODO(Task 2): MHA caches K and V for every query head, GQA for n_kv_heads heads, MQA for
  //   one; MLA caches kv_lora_rank + qk_rope_head_dim values (no separate V). Every layer
  //   caches its own. Throw InvalidArgument for bytes_per_elem < 1 or a count the variant
  //   uses < 1 (qk_rope_head_dim may be 0).
  (void)s, (void)bytes_per_elem;
  throw NotImplemented("Task 2 (exercises/02_gqa_mla/gqa.cpp): kv_bytes_per_token — "
                       "layers x cached values per layer x bytes");
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
