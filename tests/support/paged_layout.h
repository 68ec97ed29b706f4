// paged_layout.h — the varlen batch layout the paged-attention tests build (PagedAttention's
// block tables, Kwon et al. 2023; vLLM's query_start_loc / seq_lens): sequences given as (cached
// positions, new query rows), their blocks handed out in a shuffled order from a pool with a few
// spare blocks nobody owns, so block tables are scattered and unused slots exist.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace lio::testing {

/// One sequence of a test batch: `cached` positions before its `query_len` new rows.
struct SeqSpec {
  int32_t cached;
  int32_t query_len;
};

/// A batch's index arrays (int32, as the kernels read them) and sizes.
struct PagedLayout {
  int64_t n_tokens = 0, n_seqs = 0, max_blocks_per_seq = 0, n_slots = 0, max_query_len = 0;
  int64_t block_size = 0;
  std::vector<int32_t> query_start_loc;  ///< (n_seqs + 1)
  std::vector<int32_t> seq_lens;         ///< (n_seqs) cached + query_len
  std::vector<int32_t> block_tables;     ///< (n_seqs, max_blocks_per_seq), unused entries 0

  /// Pool slot of position `pos` of sequence `s`.
  int64_t slot(int64_t s, int64_t pos) const {
    return int64_t{block_tables[static_cast<size_t>(s * max_blocks_per_seq + pos / block_size)]} * block_size +
           pos % block_size;
  }
};

/// The layout of `seqs` over blocks of `block_size` tokens: ceil((cached + query_len) /
/// block_size) blocks per sequence, taken in the order of a shuffle (std::mt19937(seed)) of
/// all blocks, of which there are 3 more than the sequences need.
inline PagedLayout scattered_layout(const std::vector<SeqSpec>& seqs, int64_t block_size, uint32_t seed) {
  PagedLayout l;
  l.block_size = block_size;
  l.n_seqs = static_cast<int64_t>(seqs.size());
  int64_t total_blocks = 0;
  for (const SeqSpec& s : seqs) {
    const int64_t blocks = (s.cached + s.query_len + block_size - 1) / block_size;
    l.max_blocks_per_seq = std::max(l.max_blocks_per_seq, blocks);
    l.max_query_len = std::max<int64_t>(l.max_query_len, s.query_len);
    total_blocks += blocks;
    l.n_tokens += s.query_len;
  }
  const int64_t n_blocks = total_blocks + 3;  // a few blocks nobody owns
  l.n_slots = n_blocks * block_size;
  std::vector<int32_t> order(static_cast<size_t>(n_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  l.block_tables.assign(static_cast<size_t>(l.n_seqs * l.max_blocks_per_seq), 0);
  l.query_start_loc.push_back(0);
  size_t next_block = 0;
  for (int64_t s = 0; s < l.n_seqs; ++s) {
    const SeqSpec& spec = seqs[static_cast<size_t>(s)];
    const int32_t seq_len = spec.cached + spec.query_len;
    for (int64_t j = 0; j < (seq_len + block_size - 1) / block_size; ++j) {
      l.block_tables[static_cast<size_t>(s * l.max_blocks_per_seq + j)] = order[next_block++];
    }
    l.seq_lens.push_back(seq_len);
    l.query_start_loc.push_back(l.query_start_loc.back() + spec.query_len);
  }
  return l;
}

}  // namespace lio::testing
