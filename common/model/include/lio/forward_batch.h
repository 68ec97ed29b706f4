// forward_batch.h — everything one forward pass runs, for any mix of prefill chunks and
// decode tokens of different sequences.
//
// The engine never says "this is a decode step": a sequence contributes its next
// `query_len` tokens at explicit positions, and its cached prefix is reached through its block
// table. Eight sequences decoding one token each are a batch of eight rows; a 300-token
// prompt split into chunks is several batches whose rows attend to their cached prefix plus
// themselves. Field names follow vLLM v1 (`vllm/v1/attention/backends/*`, `InputBatch`,
// `BlockTable.compute_slot_mapping`) so the course can point at the real thing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace lio {

/// A copy the engine makes before the next forward pass: block `src`'s K and V, every layer,
/// into block `dst` (copy-on-write; vLLM v0's `blocks_to_copy`), or between the pool and
/// host memory (swap preemption). BlockManager::append_slots produces them; ModelRunner
/// carries them out.
struct BlockCopy {
  int32_t src = 0;  ///< block read
  int32_t dst = 0;  ///< block written (a fresh block the writer now owns alone)
};

/// Task 1 (chapter 04 exercise point; solutions|exercises/04_paged_attention/slot_mapping.cpp).
/// out[i] = the KV-pool slot of position start_pos + i of a sequence whose blocks are
/// `block_table`: entry b of the table is the pool block holding the sequence's positions
/// b * block_size .. (b + 1) * block_size - 1, in order, and lio/kv_pool.h numbers a block's
/// slots (vLLM `BlockTable.compute_slot_mapping`; docs/04_paged_attention.md, section 2 and
/// "Task 1"). Example: table [9, 3], block_size 4, positions 0 .. 5 -> 36 37 38 39 12 13.
/// Throws InvalidArgument if block_size < 1, start_pos < 0, or a position falls past the
/// table's last block.
void compute_slot_mapping(std::span<const int32_t> block_table, int64_t start_pos, int64_t block_size,
                          std::span<int32_t> out);

/// The slot of a row whose K/V are not written (vLLM's PAD_SLOT_ID): a padding row that
/// re-reads a computed position, e.g. static batching's finished rows (chapter 05).
inline constexpr int32_t kPadSlotId = -1;

/// Inputs of one forward pass, built on the host (by the Engine, or by hand in tests) and
/// copied to the device by the backend. Rows of one sequence are contiguous and in position
/// order; sequences appear in any order.
struct ForwardBatch {
  std::vector<int32_t> token_ids;        ///< (n_tokens) token ids, in [0, vocab_size)
  std::vector<int32_t> positions;        ///< (n_tokens) absolute position of each token (RoPE)
  /// (n_tokens) KV slot each token's K/V is written to, from its sequence's block table
  /// (compute_slot_mapping; vLLM `BlockTable.compute_slot_mapping`); kPadSlotId = not written.
  std::vector<int32_t> slot_mapping;
  std::vector<int32_t> query_start_loc;  ///< (n_seqs + 1) row offsets: cu_seqlens_q, [0] = 0
  std::vector<int32_t> seq_lens;         ///< (n_seqs) cached + new tokens of each sequence
  /// (n_seqs, max_blocks_per_seq) row-major block ids; unused entries are 0 (never read:
  /// a row reads only blocks that hold positions < seq_len).
  std::vector<int32_t> block_tables;
  int64_t max_blocks_per_seq = 0;        ///< columns of block_tables
  int64_t block_size = 0;                ///< tokens per KV block (the pool's)
  /// (n_logits) rows whose logits are wanted, ascending: the last row of a sequence that
  /// finishes its prompt or decodes; every row for teacher forcing (`lio logits`); k + 1 rows
  /// per sequence when verifying speculative drafts (chapter 06).
  std::vector<int32_t> logits_rows;
  /// KV cache groups 1 .. G-1 of a hybrid pool (lio/kv_pool.h, KvCacheGroups; vLLM v1's
  /// per-group block tables): each group's (n_tokens) slot mapping, computed from its own block
  /// table as slot_mapping is from group 0's. Empty with one group (every model without both
  /// full and sliding-window layers). A windowed group's table may name the null block for
  /// positions that slid out of the window: no row reads them.
  std::vector<std::vector<int32_t>> group_slot_mapping;
  /// (G - 1) tables, each (n_seqs, max_blocks_per_seq) as block_tables.
  std::vector<std::vector<int32_t>> group_block_tables;
  /// Decoder layers to run: 0 = all of them; L in [1, n_layers) = early exit (chapter 06's
  /// self-drafting, Elhoushi et al. 2024, LayerSkip): the first L layers, then the final norm
  /// and the LM head. Only layers 0 .. L - 1 write K/V.
  int64_t n_layers = 0;
  /// Keep the final hidden state of each logits row (after the output norm, before the LM head):
  /// ModelRunner::hidden_states() returns them, (n_logits, d_model). What Medusa heads and EAGLE
  /// drafters read (Cai et al. 2024, sec. 2.1; issue 63) and what `lio spec-data` collects.
  /// Such a batch runs eagerly (no CUDA graph); refused under pipeline parallelism.
  bool return_hidden = false;
  /// Tree verification (chapter 06; SpecInfer, Miao et al. 2024, sec. 4; Medusa, Cai et al.
  /// 2024, sec. 2.1.2): (n_tokens) per row the tree attention mask of its draft-tree node, or
  /// empty when no sequence of the batch carries a tree. Bit j of a tree row's mask is set iff
  /// tree node j is the row's node or one of its ancestors (lio/spec_decode.h,
  /// tree_attention_masks): the row attends to its sequence's cached prefix (every key before the
  /// tree) and to those tree keys only. Rows that are not tree rows hold 0 (causal as usual).
  /// Set by set_tree().
  std::vector<uint64_t> tree_masks;
  /// (n_seqs) sequence s's last tree_lens[s] rows (and keys seq_len - tree_lens[s] to
  /// seq_len - 1) are its tree's nodes in node order (0 = no tree), or empty as tree_masks.
  std::vector<int32_t> tree_lens;

  /// Rows in the batch (tokens).
  int64_t n_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  /// Sequences in the batch.
  int64_t n_seqs() const { return static_cast<int64_t>(seq_lens.size()); }
  /// Rows whose logits are computed.
  int64_t n_logits() const { return static_cast<int64_t>(logits_rows.size()); }
  /// Query rows of sequence `s`: query_start_loc[s + 1] - query_start_loc[s].
  int64_t query_len(int64_t s) const {
    return query_start_loc[static_cast<size_t>(s) + 1] - query_start_loc[static_cast<size_t>(s)];
  }

  /// Starts an empty batch over KV blocks of `block_size` tokens. Throws InvalidArgument if
  /// block_size < 1.
  explicit ForwardBatch(int64_t block_size = 16);

  /// Appends one sequence: `tokens` (its next query_len tokens) at positions
  /// start_pos .. start_pos + query_len - 1, whose K/V go to the slots `block_table` gives,
  /// and whose cached prefix 0 .. start_pos - 1 is already in those blocks. `n_logits` of its
  /// last rows get logits (0, 1 = the usual last token, or query_len = teacher forcing).
  /// block_table: (>= ceil((start_pos + query_len) / block_size)) block ids.
  /// `write_kv` false makes the rows padding (slot kPadSlotId): they compute and attend but
  /// write no K/V, so their positions must already hold K/V (static batching's finished
  /// rows re-run their last computed token; HF `generate` keeps such rows in the batch).
  /// Throws InvalidArgument if tokens is empty, start_pos < 0, n_logits outside
  /// [0, query_len], or the block table is too short for start_pos + query_len.
  /// A pool of one KV cache group: `block_table` is its table.
  void add_sequence(std::span<const int32_t> tokens, int64_t start_pos,
                    std::span<const int32_t> block_table, int64_t n_logits = 1, bool write_kv = true);
  /// add_sequence() with the sequence's block tables of every KV cache group (`tables`, one per
  /// group of the pool, each as long as the positions need: a Sequence's block_tables); every
  /// sequence of a batch passes the same number. Throws InvalidArgument if `tables` is empty or
  /// its size differs from the batch's other sequences', or as add_sequence() above.
  void add_sequence(std::span<const int32_t> tokens, int64_t start_pos, std::span<const std::vector<int32_t>> tables,
                    int64_t n_logits = 1, bool write_kv = true);

  /// Marks the last T = masks.size() rows of sequence `s` (already added with add_sequence;
  /// which of them get logits is the caller's choice) as the nodes of a draft tree, node i at row
  /// query_start_loc[s + 1] - T + i, for verification in one pass (SpecInfer, Miao et al. 2024,
  /// sec. 4; Medusa, Cai et al. 2024, sec. 2.1.2). masks: (T) tree_attention_masks' form (bit j
  /// of masks[i] set iff node j is node i or an ancestor; node 0 is the root, the sequence's last
  /// real token). Sets tree_masks / tree_lens (sized to the batch on first use; sequences added
  /// later get none) and rewrites the rows' positions (RoPE) to first + depth(i), first = the
  /// tree's first row's position and depth(i) = popcount(masks[i]) - 1; slot_mapping keeps the
  /// linear slots (node i's K/V go to position first + i of the block table, as a chain's would:
  /// the engine compacts the accepted path afterwards). Throws InvalidArgument if s is not a
  /// sequence of the batch or already has a tree, T is 0, above 64 or above query_len(s), or the
  /// masks are not a tree's: masks[0] != 1, or for some i > 0 masks[i] != (1 << i) | masks[p]
  /// for every p < i (which also rules out an unset own bit or a bit above i).
  void set_tree(int64_t s, std::span<const uint64_t> masks);

  /// Checks the batch against a model and a pool before anything runs: token ids in
  /// [0, vocab_size), every slot in [0, n_slots) or kPadSlotId, positions below context_length, block ids
  /// in [0, n_blocks), shapes consistent, tables for exactly the pool's `n_groups` KV cache
  /// groups, tree_masks / tree_lens empty or (n_tokens) / (n_seqs), each tree of at most 64
  /// nodes within its sequence's rows, non-tree rows 0. Throws InvalidArgument naming the row or
  /// sequence.
  void validate(int64_t vocab_size, int64_t context_length, int64_t n_blocks, int64_t n_groups = 1) const;
};

}  // namespace lio
