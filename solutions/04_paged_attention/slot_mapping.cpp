// Chapter 04, Task 1 — reference solution: where each new token's K/V goes in the pool.
// Declaration and contract: common/model/include/lio/forward_batch.h (lio::compute_slot_mapping).
#include <string>

#include "lio/error.h"
#include "lio/forward_batch.h"

namespace lio {

void compute_slot_mapping(std::span<const int32_t> block_table, int64_t start_pos, int64_t block_size,
                          std::span<int32_t> out) {
  if (block_size < 1 || start_pos < 0) {
    throw InvalidArgument("compute_slot_mapping: block_size must be >= 1 and start_pos >= 0");
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t pos = start_pos + static_cast<int64_t>(i);
    const int64_t block_index = pos / block_size;  // which entry of the table
    if (block_index >= static_cast<int64_t>(block_table.size())) {
      throw InvalidArgument("compute_slot_mapping: position " + std::to_string(pos) + " needs block " +
                            std::to_string(block_index) + ", the table has " + std::to_string(block_table.size()));
    }
    // slot = block_table[pos / block_size] * block_size + pos % block_size
    out[i] = static_cast<int32_t>(block_table[static_cast<size_t>(block_index)] * block_size + pos % block_size);
  }
}

}  // namespace lio
