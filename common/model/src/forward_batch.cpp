#include "lio/forward_batch.h"

#include <algorithm>
#include <bit>
#include <string>

#include "lio/error.h"

namespace lio {

ForwardBatch::ForwardBatch(int64_t block_size_tokens) : block_size(block_size_tokens) {
  if (block_size_tokens < 1) {
    throw InvalidArgument("ForwardBatch: block_size must be >= 1, got " + std::to_string(block_size_tokens));
  }
  query_start_loc.push_back(0);
}

void ForwardBatch::add_sequence(std::span<const int32_t> tokens, int64_t start_pos,
                                std::span<const int32_t> block_table, int64_t n_logits, bool write_kv) {
  const std::vector<int32_t> table(block_table.begin(), block_table.end());
  add_sequence(tokens, start_pos, std::span<const std::vector<int32_t>>(&table, 1), n_logits, write_kv);
}

void ForwardBatch::add_sequence(std::span<const int32_t> tokens, int64_t start_pos,
                                std::span<const std::vector<int32_t>> tables, int64_t n_logits, bool write_kv) {
  if (tables.empty()) throw InvalidArgument("ForwardBatch::add_sequence: a sequence has one block table per KV cache group");
  // Group 0's arrays are the batch's slot_mapping / block_tables; groups 1.. go to group_*.
  const std::span<const int32_t> block_table = tables.front();
  const std::span<const std::vector<int32_t>> group_tables = tables.subspan(1);
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw InvalidArgument("ForwardBatch::add_sequence: no tokens");
  if (start_pos < 0) throw InvalidArgument("ForwardBatch::add_sequence: start_pos < 0");
  if (n_logits < 0 || n_logits > n) {
    throw InvalidArgument("ForwardBatch::add_sequence: n_logits " + std::to_string(n_logits) +
                          " outside [0, " + std::to_string(n) + "]");
  }
  const int64_t seq_len = start_pos + n;
  const int64_t n_blocks_needed = (seq_len + block_size - 1) / block_size;
  if (static_cast<int64_t>(block_table.size()) < n_blocks_needed) {
    throw InvalidArgument("ForwardBatch::add_sequence: " + std::to_string(seq_len) + " tokens need " +
                          std::to_string(n_blocks_needed) + " blocks of " + std::to_string(block_size) +
                          ", the block table has " + std::to_string(block_table.size()));
  }
  if (n_seqs() > 0 && group_tables.size() != group_slot_mapping.size()) {
    throw InvalidArgument("ForwardBatch::add_sequence: " + std::to_string(group_tables.size()) +
                          " KV cache group tables; the batch's other sequences have " +
                          std::to_string(group_slot_mapping.size()));
  }
  for (const std::vector<int32_t>& t : group_tables) {
    if (static_cast<int64_t>(t.size()) < n_blocks_needed) {
      throw InvalidArgument("ForwardBatch::add_sequence: a KV cache group's block table has " +
                            std::to_string(t.size()) + " blocks; " + std::to_string(seq_len) + " tokens need " +
                            std::to_string(n_blocks_needed));
    }
  }
  if (n_seqs() == 0) {
    group_slot_mapping.assign(group_tables.size(), {});
    group_block_tables.assign(group_tables.size(), {});
  }
  const int64_t first_row = n_tokens();
  for (int64_t i = 0; i < n; ++i) {
    token_ids.push_back(tokens[static_cast<size_t>(i)]);
    positions.push_back(static_cast<int32_t>(start_pos + i));
  }
  slot_mapping.resize(static_cast<size_t>(first_row + n));
  compute_slot_mapping(block_table, start_pos, block_size,
                       std::span<int32_t>(slot_mapping).subspan(static_cast<size_t>(first_row)));  // Task 1
  if (!write_kv) std::fill(slot_mapping.begin() + first_row, slot_mapping.end(), kPadSlotId);
  for (size_t g = 0; g < group_tables.size(); ++g) {
    std::vector<int32_t>& sm = group_slot_mapping[g];
    sm.resize(static_cast<size_t>(first_row + n));
    compute_slot_mapping(group_tables[g], start_pos, block_size, std::span<int32_t>(sm).subspan(static_cast<size_t>(first_row)));
    if (!write_kv) std::fill(sm.begin() + first_row, sm.end(), kPadSlotId);
  }
  for (int64_t i = n - n_logits; i < n; ++i) logits_rows.push_back(static_cast<int32_t>(first_row + i));
  query_start_loc.push_back(static_cast<int32_t>(first_row + n));
  seq_lens.push_back(static_cast<int32_t>(seq_len));
  // Grow the table's width if this sequence needs more columns: re-pad the earlier rows.
  const int64_t n_seqs_before = n_seqs() - 1;
  const auto widen = [&](std::vector<int32_t>& tables) {
    std::vector<int32_t> wider(static_cast<size_t>(n_seqs_before * n_blocks_needed), 0);
    for (int64_t s = 0; s < n_seqs_before; ++s)
      std::copy_n(tables.begin() + s * max_blocks_per_seq, max_blocks_per_seq, wider.begin() + s * n_blocks_needed);
    tables = std::move(wider);
  };
  if (n_blocks_needed > max_blocks_per_seq) {
    widen(block_tables);
    for (std::vector<int32_t>& t : group_block_tables) widen(t);
    max_blocks_per_seq = n_blocks_needed;
  }
  const auto append_row = [&](std::vector<int32_t>& tables, std::span<const int32_t> table) {
    const size_t row0 = tables.size();
    tables.resize(row0 + static_cast<size_t>(max_blocks_per_seq), 0);
    std::copy_n(table.begin(), n_blocks_needed, tables.begin() + static_cast<ptrdiff_t>(row0));
  };
  append_row(block_tables, block_table);
  for (size_t g = 0; g < group_tables.size(); ++g) append_row(group_block_tables[g], group_tables[g]);
  if (!tree_lens.empty()) {  // a batch that already carries a tree: this sequence has none
    tree_masks.resize(static_cast<size_t>(n_tokens()), 0);
    tree_lens.push_back(0);
  }
}

void ForwardBatch::set_tree(int64_t s, std::span<const uint64_t> masks) {
  const std::string where = "ForwardBatch::set_tree: sequence " + std::to_string(s);
  if (s < 0 || s >= n_seqs()) throw InvalidArgument(where + " is not in the batch of " + std::to_string(n_seqs()));
  const auto n = static_cast<int64_t>(masks.size());
  if (n < 1 || n > 64 || n > query_len(s)) {
    throw InvalidArgument(where + ": a tree of " + std::to_string(n) + " nodes; it needs 1 .. 64 and at most the " +
                          std::to_string(query_len(s)) + " rows the sequence has");
  }
  if (!tree_lens.empty() && tree_lens[static_cast<size_t>(s)] != 0) throw InvalidArgument(where + " already has a tree");
  // Each mask is its own bit plus an earlier node's (its parent's) mask: a tree in topological
  // order. That alone rules out a missing own bit or a bit above i.
  if (masks[0] != 1) throw InvalidArgument(where + ": the root's mask must be 1 (itself only)");
  for (int64_t i = 1; i < n; ++i) {
    const uint64_t own = uint64_t{1} << i, m = masks[static_cast<size_t>(i)];
    bool ok = false;
    for (int64_t p = 0; p < i && !ok; ++p) ok = m == (own | masks[static_cast<size_t>(p)]);
    if (!ok) {
      throw InvalidArgument(where + ": node " + std::to_string(i) + "'s mask " + std::to_string(m) +
                            " is not its own bit plus an earlier node's mask");
    }
  }
  if (tree_lens.empty()) {
    tree_masks.assign(static_cast<size_t>(n_tokens()), 0);
    tree_lens.assign(static_cast<size_t>(n_seqs()), 0);
  }
  tree_lens[static_cast<size_t>(s)] = static_cast<int32_t>(n);
  const int64_t row0 = query_start_loc[static_cast<size_t>(s) + 1] - n;
  const int32_t first = positions[static_cast<size_t>(row0)];
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t m = masks[static_cast<size_t>(i)];
    tree_masks[static_cast<size_t>(row0 + i)] = m;
    positions[static_cast<size_t>(row0 + i)] = first + static_cast<int32_t>(std::popcount(m)) - 1;  // RoPE at the depth
  }
}

void ForwardBatch::validate(int64_t vocab_size, int64_t context_length, int64_t n_blocks, int64_t n_groups) const {
  const int64_t n = n_tokens();
  if (n == 0) throw InvalidArgument("forward: the batch has no tokens");
  if (static_cast<int64_t>(group_slot_mapping.size()) != n_groups - 1 ||
      group_block_tables.size() != group_slot_mapping.size()) {
    throw InvalidArgument("forward: the batch carries block tables for " + std::to_string(group_slot_mapping.size() + 1) +
                          " KV cache groups; the pool has " + std::to_string(n_groups));
  }
  for (size_t g = 0; g < group_slot_mapping.size(); ++g) {
    if (static_cast<int64_t>(group_slot_mapping[g].size()) != n ||
        static_cast<int64_t>(group_block_tables[g].size()) != n_seqs() * max_blocks_per_seq) {
      throw InvalidArgument("forward: inconsistent shapes of KV cache group " + std::to_string(g + 1) + "'s tables");
    }
    for (const int32_t slot : group_slot_mapping[g]) {
      if ((slot < 0 && slot != kPadSlotId) || slot >= n_blocks * block_size) {
        throw InvalidArgument("forward: KV cache group " + std::to_string(g + 1) + " names slot " +
                              std::to_string(slot) + "; the pool has " + std::to_string(n_blocks * block_size));
      }
    }
    for (const int32_t id : group_block_tables[g]) {
      if (id < 0 || id >= n_blocks) {
        throw InvalidArgument("forward: KV cache group " + std::to_string(g + 1) + " names block " +
                              std::to_string(id) + "; the pool has " + std::to_string(n_blocks));
      }
    }
  }
  if (static_cast<int64_t>(positions.size()) != n || static_cast<int64_t>(slot_mapping.size()) != n ||
      static_cast<int64_t>(query_start_loc.size()) != n_seqs() + 1 || query_start_loc.front() != 0 ||
      query_start_loc.back() != n ||
      static_cast<int64_t>(block_tables.size()) != n_seqs() * max_blocks_per_seq) {
    throw InvalidArgument("forward: inconsistent batch shapes (" + std::to_string(n) + " tokens, " +
                          std::to_string(n_seqs()) + " sequences)");
  }
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = token_ids[static_cast<size_t>(i)];
    if (t < 0 || t >= vocab_size) {
      throw InvalidArgument("forward: token id " + std::to_string(t) + " at index " + std::to_string(i) +
                            " is outside [0, " + std::to_string(vocab_size) + ")");
    }
    if (positions[static_cast<size_t>(i)] < 0 || positions[static_cast<size_t>(i)] >= context_length) {
      throw InvalidArgument("forward: position " + std::to_string(positions[static_cast<size_t>(i)]) +
                            " at row " + std::to_string(i) + " is outside the context of " +
                            std::to_string(context_length) + " tokens");
    }
    const int32_t slot = slot_mapping[static_cast<size_t>(i)];
    if ((slot < 0 && slot != kPadSlotId) || slot >= n_blocks * block_size) {
      throw InvalidArgument("forward: slot " + std::to_string(slot) + " at row " + std::to_string(i) +
                            " is outside the pool's " + std::to_string(n_blocks * block_size) + " slots");
    }
  }
  for (int64_t s = 0; s < n_seqs(); ++s) {
    const int64_t q_len = query_len(s);
    const int64_t seq_len = seq_lens[static_cast<size_t>(s)];
    if (q_len < 1 || seq_len < q_len || seq_len > context_length ||
        (seq_len + block_size - 1) / block_size > max_blocks_per_seq) {
      throw InvalidArgument("forward: sequence " + std::to_string(s) + " has " + std::to_string(q_len) +
                            " query rows and seq_len " + std::to_string(seq_len));
    }
    for (int64_t b = 0; b < (seq_len + block_size - 1) / block_size; ++b) {
      const int32_t id = block_tables[static_cast<size_t>(s * max_blocks_per_seq + b)];
      if (id < 0 || id >= n_blocks) {
        throw InvalidArgument("forward: sequence " + std::to_string(s) + " names block " + std::to_string(id) +
                              "; the pool has " + std::to_string(n_blocks));
      }
    }
  }
  if (!tree_lens.empty() || !tree_masks.empty()) {
    if (static_cast<int64_t>(tree_lens.size()) != n_seqs() || static_cast<int64_t>(tree_masks.size()) != n) {
      throw InvalidArgument("forward: tree_masks / tree_lens hold " + std::to_string(tree_masks.size()) + " / " +
                            std::to_string(tree_lens.size()) + " entries for " + std::to_string(n) + " rows and " +
                            std::to_string(n_seqs()) + " sequences");
    }
    for (int64_t s = 0; s < n_seqs(); ++s) {
      const int64_t t = tree_lens[static_cast<size_t>(s)];
      if (t < 0 || t > 64 || t > query_len(s)) {
        throw InvalidArgument("forward: sequence " + std::to_string(s) + " has a tree of " + std::to_string(t) +
                              " nodes in " + std::to_string(query_len(s)) + " rows (at most 64)");
      }
      const int64_t tree0 = query_start_loc[static_cast<size_t>(s) + 1] - t;
      for (int64_t i = query_start_loc[static_cast<size_t>(s)]; i < query_start_loc[static_cast<size_t>(s) + 1]; ++i) {
        const uint64_t m = tree_masks[static_cast<size_t>(i)];
        const bool bad = i < tree0 ? m != 0 : (m >> (i - tree0) & 1) == 0 || (i - tree0 < 63 && m >> (i - tree0 + 1) != 0);
        if (bad) {
          throw InvalidArgument("forward: row " + std::to_string(i) + "'s tree mask " + std::to_string(m) +
                                " does not fit its place in sequence " + std::to_string(s) + "'s tree");
        }
      }
    }
  }
  for (size_t i = 0; i < logits_rows.size(); ++i) {
    if (logits_rows[i] < 0 || logits_rows[i] >= n || (i > 0 && logits_rows[i] <= logits_rows[i - 1])) {
      throw InvalidArgument("forward: logits_rows must be ascending rows of the batch");
    }
  }
}

}  // namespace lio
