// Chapter 04, Task 1 — YOUR implementation: where each new token's K/V goes in the pool.
// Declaration and contract: common/model/include/lio/forward_batch.h (lio::compute_slot_mapping).
// Grade: ctest -R ch04_task_1
#include <string>

#include "lio/error.h"
#include "lio/forward_batch.h"

namespace lio {

void compute_slot_mapping(std::span<const int32_t> block_table, int64_t start_pos, int64_t block_size,
                          std::span<int32_t> out) {
  // TODO(Task 1): for each i, pos = start_pos + i:
  //   block index = pos / block_size (throw InvalidArgument if it is past the table's end),
  //   out[i] = block_table[block index] * block_size + pos % block_size.
  //   Throw InvalidArgument if block_size < 1 or start_pos < 0.
  (void)block_table, (void)start_pos, (void)block_size, (void)out;
  throw NotImplemented("Task 1 (exercises/04_paged_attention/slot_mapping.cpp): compute_slot_mapping — "
                       "block_table[pos / block_size] * block_size + pos % block_size");
}

}  // namespace lio
