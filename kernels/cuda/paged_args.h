// paged_args.h — the host-side checks every paged-attention launcher runs on its shape
// arguments before touching the device (paged_attention.cu, flash_attention.cu): one message
// per rule, so the chapter 04 and chapter 07 kernels reject a bad batch the same way.
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "lio/error.h"

namespace lio::cuda::detail {

/// The shape arguments of a paged-attention launcher (see cuda::paged_attention for their
/// meaning), checked once.
struct PagedShape {
  int64_t n_tokens, n_seqs, max_blocks_per_seq, block_size, n_heads, n_kv_heads, head_dim;
};

/// Throws InvalidArgument, prefixed "cuda::<op>: ", for null pointers, sizes outside int32,
/// n_heads not a multiple of n_kv_heads (or > 65535), head_dim outside (0, max_head_dim] or a
/// non-finite scale.
inline void check_paged_attention_args(const char* op, const float* q, const float* k_pool,
                                       const float* v_pool, const float* out,
                                       const int32_t* query_start_loc, const int32_t* seq_lens,
                                       const int32_t* block_tables, const PagedShape& p,
                                       int64_t max_head_dim, float scale) {
  const std::string where = std::string("cuda::") + op + ": ";
  if (q == nullptr || k_pool == nullptr || v_pool == nullptr || out == nullptr ||
      query_start_loc == nullptr || seq_lens == nullptr || block_tables == nullptr) {
    throw InvalidArgument(where + "null device pointer (q, k_pool, v_pool, out, query_start_loc, "
                          "seq_lens or block_tables)");
  }
  if (p.n_tokens < 0 || p.n_tokens > INT_MAX || p.n_seqs < 0 || p.n_seqs > INT_MAX - 1 ||
      (p.n_tokens > 0 && p.n_seqs < 1)) {
    throw InvalidArgument(where + "need 0 <= n_tokens <= INT32_MAX and 1 <= n_seqs < INT32_MAX "
                          "(when n_tokens > 0), got n_tokens=" + std::to_string(p.n_tokens) +
                          " n_seqs=" + std::to_string(p.n_seqs));
  }
  if (p.block_size < 1 || p.max_blocks_per_seq < 1 ||
      p.max_blocks_per_seq > INT_MAX / p.block_size) {
    throw InvalidArgument(where + "need block_size >= 1, max_blocks_per_seq >= 1 and their "
                          "product (positions per sequence) <= INT32_MAX, got block_size=" +
                          std::to_string(p.block_size) + " max_blocks_per_seq=" +
                          std::to_string(p.max_blocks_per_seq));
  }
  if (p.n_kv_heads <= 0 || p.n_heads <= 0 || p.n_heads % p.n_kv_heads != 0 || p.n_heads > 65535 ||
      p.head_dim <= 0 || p.head_dim > max_head_dim) {
    throw InvalidArgument(where + "need n_heads a positive multiple of n_kv_heads > 0, n_heads <= "
                          "65535 and 0 < head_dim <= " + std::to_string(max_head_dim) +
                          ", got n_heads=" + std::to_string(p.n_heads) + " n_kv_heads=" +
                          std::to_string(p.n_kv_heads) + " head_dim=" +
                          std::to_string(p.head_dim));
  }
  if (!std::isfinite(scale)) throw InvalidArgument(where + "scale must be finite");
}

/// Checks what flash_attention and naive_attention take beyond paged_attention's arguments
/// (after check_paged_attention_args): 1 <= max_query_len <= n_tokens when n_tokens > 0, and
/// n_kv_heads within a grid dimension. Throws InvalidArgument.
inline void check_flash_attention_args(const char* op, const PagedShape& shape, int64_t max_query_len) {
  const std::string where = std::string("cuda::") + op + ": ";
  if (shape.n_tokens > 0 && (max_query_len < 1 || max_query_len > shape.n_tokens)) {
    throw InvalidArgument(where + "need 1 <= max_query_len <= n_tokens (" + std::to_string(shape.n_tokens) +
                          "), got " + std::to_string(max_query_len));
  }
  if (shape.n_kv_heads > 65535) {
    throw InvalidArgument(where + "need n_kv_heads <= 65535 (a grid dimension), got " +
                          std::to_string(shape.n_kv_heads));
  }
}

/// Checks a sliding window (0 = none): 0 <= window <= INT32_MAX, and a window only on causal
/// attention (a row's window is counted back from its own position). Throws InvalidArgument.
inline void check_window(const char* op, int64_t window, bool causal = true) {
  const std::string where = std::string("cuda::") + op + ": ";
  if (window < 0 || window > INT_MAX) {
    throw InvalidArgument(where + "need 0 <= window <= INT32_MAX (0: no sliding window), got " + std::to_string(window));
  }
  if (window > 0 && !causal) throw InvalidArgument(where + "a sliding window needs causal attention");
}

}  // namespace lio::cuda::detail
