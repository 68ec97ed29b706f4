// paged_index.cuh — the two index computations every paged kernel needs: which sequence a
// batch row belongs to, and where a sequence's position lives in the pool (PagedAttention,
// Kwon et al. 2023, sec. 4.1; vLLM's block table). Shared by paged_attention.cu and mla.cu.
#pragma once

#include <cstdint>

namespace lio::cuda::detail {

/// The sequence that owns row `row`: the largest s with starts[s] <= row (starts ascending,
/// [0] = 0 <= row): query_start_loc for batch rows, prefix sums of seq_lens for context rows.
/// Sequences with no rows are skipped over.
__device__ __forceinline__ int find_sequence(const int32_t* starts, int n_seqs, int row) {
  int lo = 0;
  int hi = n_seqs - 1;
  while (lo < hi) {  // invariant: starts[lo] <= row; the answer is in [lo, hi]
    const int mid = (lo + hi + 1) / 2;
    if (starts[mid] <= row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

/// Pool slot of position `pos` of a sequence whose block table row is `table`.
__device__ __forceinline__ int64_t slot_of(const int32_t* table, int block_size, int pos) {
  return static_cast<int64_t>(table[pos / block_size]) * block_size + pos % block_size;
}

}  // namespace lio::cuda::detail
