// Chapter 04, Task 1 — YOUR implementation: where each new token's K/V goes in the pool.
// Declaration and contract: common/model/include/lio/forward_batch.h (lio::compute_slot_mapping).
// Grade: ctest -R ch04_task_1
#include <string>

#include "lio/error.h"
#include "lio/forward_batch.h"

namespace lio {

void compute_slot_mapping(std::span<const int32_t> block_table, int64_t start_pos, int64_t block_size,
                          std::span<int32_t> out) {
  // TODO(Task 1): out[i] = the pool slot of position start_pos + i, through the block table
  //   (lio/forward_batch.h's contract; lesson: docs/04_paged_attention.md, "Task 1"). Throw
  //   InvalidArgument if block_size < 1, start_pos < 0, or a position is past the table's end.
  (void)block_table, (void)start_pos, (void)block_size, (void)out;
  throw NotImplemented("Task 1 (exercises/04_paged_attention/slot_mapping.cpp): compute_slot_mapping — "
                       "lesson docs/04_paged_attention.md, section 2 and Task 1");
}

}  // namespace lio
