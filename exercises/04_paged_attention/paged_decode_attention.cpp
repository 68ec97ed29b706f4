// Chapter 04, Task 5 — YOUR implementation: one query head over a sequence's K/V gathered
// through its block table. Declaration and contract: kernels/cpu/cpu_ops.h
// (lio::cpu::paged_decode_attention). Grade: ctest -R ch04_task_5
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cpu_ops.h"
#include "lio/error.h"

namespace lio::cpu {

void paged_decode_attention(const float* q, const float* k_pool, const float* v_pool, float* out,
                            std::span<const int32_t> block_table, int64_t n_ctx, int64_t block_size,
                            int64_t n_kv_heads, int64_t kv_head, int64_t head_dim, float scale,
                            std::span<float> scores) {
  // TODO(Task 5): chapter 01's decode attention for one query head over positions
  //   [0, n_ctx), with each position's K/V found in the pool through the block table (the
  //   pool's layout: lio/kv_pool.h); numerically stable; `scores` is the caller's scratch of at
  //   least n_ctx floats (allocate nothing: the engine calls this once per (row, head)).
  //   Lesson: docs/04_paged_attention.md, "Task 5".
  //   Throw InvalidArgument if n_ctx < 1, block_size < 1, the table has fewer than
  //   ceil(n_ctx / block_size) blocks, or scores holds fewer than n_ctx floats.
  (void)q, (void)k_pool, (void)v_pool, (void)out, (void)block_table, (void)n_ctx, (void)block_size,
      (void)n_kv_heads, (void)kv_head, (void)head_dim, (void)scale, (void)scores;
  throw NotImplemented("Task 5 (exercises/04_paged_attention/paged_decode_attention.cpp): paged_decode_attention — "
                       "lesson docs/04_paged_attention.md, section 2 and Task 5");
}

}  // namespace lio::cpu
