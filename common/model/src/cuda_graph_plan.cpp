// cuda_graph_plan.cpp — bucket sizes and decode-batch padding for CUDA graphs (see the header).
#include "lio/cuda_graph_plan.h"

#include <algorithm>
#include <string>

#include "lio/error.h"

namespace lio {

std::vector<int64_t> graph_capture_sizes(int64_t max_num_seqs) {
  if (max_num_seqs < 1) throw InvalidArgument("graph_capture_sizes: max_num_seqs must be >= 1, got " + std::to_string(max_num_seqs));
  std::vector<int64_t> sizes;
  for (int64_t s = 1; s <= max_num_seqs;) {
    sizes.push_back(s);
    s = s < 8 ? 2 * s : s < 32 ? s + 8 : s < 64 ? s + 16 : s + 32;
  }
  if (sizes.back() != max_num_seqs) sizes.push_back(max_num_seqs);
  return sizes;
}

int64_t graph_bucket(std::span<const int64_t> sizes, int64_t n) {
  if (n < 1) throw InvalidArgument("graph_bucket: a batch needs >= 1 sequence, got " + std::to_string(n));
  const auto it = std::lower_bound(sizes.begin(), sizes.end(), n);
  return it == sizes.end() ? -1 : *it;
}

bool is_graph_decode_batch(const ForwardBatch& b) {
  if (b.n_seqs() < 1 || b.n_layers != 0 || b.return_hidden || b.n_tokens() != b.n_seqs() ||
      b.n_logits() != b.n_seqs())
    return false;
  for (int64_t s = 0; s < b.n_seqs(); ++s)
    if (b.query_len(s) != 1 || b.logits_rows[static_cast<size_t>(s)] != b.query_start_loc[static_cast<size_t>(s)])
      return false;
  return true;
}

void pad_decode_batch(ForwardBatch& b, int64_t bucket) {
  if (!is_graph_decode_batch(b)) {
    throw InvalidArgument("pad_decode_batch: not a decode batch (one row with logits per sequence, every layer)");
  }
  if (bucket < b.n_seqs()) {
    throw InvalidArgument("pad_decode_batch: bucket " + std::to_string(bucket) + " < the batch's " +
                          std::to_string(b.n_seqs()) + " sequences");
  }
  const std::vector<int32_t> block0(static_cast<size_t>(std::max<int64_t>(b.max_blocks_per_seq, 1)), 0);
  const std::vector<std::vector<int32_t>> tables(b.group_block_tables.size() + 1, block0);  // every group's
  const int32_t token = 0;
  while (b.n_seqs() < bucket) b.add_sequence(std::span(&token, 1), 0, tables, /*n_logits=*/0, /*write_kv=*/false);
}

namespace {

/// (n_seqs, from) row-major block tables -> (n_seqs, to), the new columns 0.
void widen_tables(std::vector<int32_t>& tables, int64_t n_seqs, int64_t from, int64_t to) {
  std::vector<int32_t> wider(static_cast<size_t>(n_seqs * to), 0);
  for (int64_t s = 0; s < n_seqs; ++s) {
    std::copy_n(tables.begin() + s * from, from, wider.begin() + s * to);
  }
  tables = std::move(wider);
}

}  // namespace

ForwardBatch graph_decode_batch(const ForwardBatch& b, int64_t bucket, int64_t width) {
  if (width < b.max_blocks_per_seq) {
    throw InvalidArgument("graph_decode_batch: width " + std::to_string(width) + " < the batch's " +
                          std::to_string(b.max_blocks_per_seq) + " block-table columns");
  }
  ForwardBatch g = b;
  pad_decode_batch(g, bucket);
  g.logits_rows.resize(static_cast<size_t>(bucket));
  for (int64_t row = 0; row < bucket; ++row) g.logits_rows[static_cast<size_t>(row)] = static_cast<int32_t>(row);
  if (width > g.max_blocks_per_seq) {
    widen_tables(g.block_tables, g.n_seqs(), g.max_blocks_per_seq, width);
    for (std::vector<int32_t>& t : g.group_block_tables) widen_tables(t, g.n_seqs(), g.max_blocks_per_seq, width);
    g.max_blocks_per_seq = width;
  }
  return g;
}

ForwardBatch graph_capture_batch(int64_t bucket, int64_t width, int64_t block_size, int64_t n_groups) {
  if (bucket < 1 || width < 1 || block_size < 1 || n_groups < 1) {
    throw InvalidArgument("graph_capture_batch: bucket, width, block_size and n_groups must be >= 1, got " +
                          std::to_string(bucket) + ", " + std::to_string(width) + ", " + std::to_string(block_size) +
                          ", " + std::to_string(n_groups));
  }
  ForwardBatch b(block_size);
  const std::vector<int32_t> block0(static_cast<size_t>(width), 0);
  const std::vector<std::vector<int32_t>> tables(static_cast<size_t>(n_groups), block0);
  const int32_t token = 0;
  b.add_sequence(std::span(&token, 1), 0, tables, /*n_logits=*/1, /*write_kv=*/false);
  return graph_decode_batch(b, bucket, width);
}

}  // namespace lio
