// attention_reference.h — the naive CPU attention: the reference twin every attention kernel
// is tested against, never on the engine's path.
//
// The engine's CPU attention (CpuBackend::attention, cpu_ops.h) is chapter 07's tiled kernel
// (flash_attention.h), or with --attention-backend naive chapter 04's paged_decode_attention
// (Task 5) for f32 decode rows and naive_attention for the rest. These two functions compute
// the same thing the plain way, for a whole chunk of queries at once, and stay only as the
// oracle: tests check chapter 01's decode_attention (Task 4), chapter 04's
// paged_decode_attention, the CUDA kernels (cuda::attention, cuda::paged_attention) and, in
// chapter 07, the flash kernel against them. A benchmark may time them as "the naive
// variant", never as the engine's.
#pragma once

#include <cstdint>

/// CPU operators of the Llama forward pass (f32, row-major).
namespace lio::cpu {

/// Reference causal grouped-query attention for a chunk of queries against a contiguous cache.
/// q: (n_q, n_heads, head_dim) for positions start_pos .. start_pos + n_q - 1;
/// k_cache, v_cache: (n_ctx, n_kv_heads, head_dim) with n_ctx >= start_pos + n_q, holding
/// keys/values for positions 0 .. n_ctx-1; query i attends to positions <= start_pos + i.
/// Each query head reads its group's KV head: n_heads / n_kv_heads consecutive query heads share
/// one (Ainslie et al. 2023, GQA; lio::kv_head_for_query_head).
/// out: (n_q, n_heads, head_dim). scale is usually 1/sqrt(head_dim).
/// Softmax subtracts the row's max, so no score overflows. Threads: OpenMP over (row, head).
/// Throws InvalidArgument if n_heads is not a multiple of n_kv_heads.
void attention_reference(const float* q, const float* k_cache, const float* v_cache, float* out,
                         int64_t n_q, int64_t start_pos, int64_t n_heads, int64_t n_kv_heads,
                         int64_t head_dim, float scale);

/// Reference paged causal grouped-query attention over a KV pool (Kwon et al. 2023,
/// PagedAttention; the contract of vLLM's attention backends on a flattened batch).
/// q, out: (n_tokens, n_heads, head_dim); k_pool, v_pool: one layer of the pool,
/// (n_slots, n_kv_heads, head_dim) with slot = block * block_size + offset.
/// Row i of sequence s (query_start_loc[s] <= i < query_start_loc[s + 1]) is at position
/// p = seq_lens[s] - query_len(s) + (i - query_start_loc[s]) and attends to positions 0 .. p of
/// s; position j is at the slot row s of block_tables gives it (lio::compute_slot_mapping's
/// rule). Query heads read KV heads as attention_reference's do. Softmax subtracts the row's
/// max. row_mask: optional (n_tokens); rows with 0 are skipped (left untouched).
/// Threads: OpenMP over rows. Throws InvalidArgument if n_heads is not a multiple of n_kv_heads.
void paged_attention_reference(const float* q, const float* k_pool, const float* v_pool, float* out,
                               const int32_t* query_start_loc, const int32_t* seq_lens,
                               const int32_t* block_tables, int64_t n_seqs,
                               int64_t max_blocks_per_seq, int64_t block_size, int64_t n_heads,
                               int64_t n_kv_heads, int64_t head_dim, float scale,
                               const uint8_t* row_mask = nullptr);

}  // namespace lio::cpu
