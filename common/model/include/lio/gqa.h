// gqa.h — chapter 02: the KV-head axis (MHA, GQA, MQA) and the KV bytes each attention
// variant caches per token, including DeepSeek's MLA.
//
// Multi-head attention (Vaswani et al. 2017) gives every query head its own key/value head.
// Multi-query attention (Shazeer 2019) shares one K/V head among all query heads; grouped-query
// attention (Ainslie et al. 2023) shares each of n_kv_heads K/V heads among a group of
// n_heads / n_kv_heads query heads. Multi-head latent attention (DeepSeek-AI 2024,
// DeepSeek-V2 sec. 2.1) caches a latent c_kv of kv_lora_rank floats plus one shared RoPE key
// of qk_rope_head_dim floats per token and layer, whatever the number of heads.
//
// Tasks 1-3 of chapter 02 are declared here and defined in exercises/02_gqa_mla/gqa.cpp
// (yours) or solutions/02_gqa_mla/gqa.cpp (the reference); the engine calls them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "lio/model_config.h"

namespace lio {

// ---- Task 1 -------------------------------------------------------------------------------

/// The key/value head that query head `h` reads in grouped-query attention: query heads are
/// split into n_kv_heads consecutive groups of n_heads / n_kv_heads, and group g reads KV head
/// g, so the answer is h / (n_heads / n_kv_heads) (Ainslie et al. 2023, sec. 2.2; llama.cpp and
/// Hugging Face `repeat_kv` order heads the same way). MHA is n_kv_heads == n_heads (head h
/// reads h), MQA n_kv_heads == 1 (every head reads 0). The CPU backend's paged attention asks
/// this for every (row, query head) pair.
/// Throws InvalidArgument unless 0 <= h < n_heads, n_kv_heads >= 1 and n_heads is a multiple
/// of n_kv_heads.
int64_t kv_head_for_query_head(int64_t h, int64_t n_heads, int64_t n_kv_heads);

// ---- Task 2 -------------------------------------------------------------------------------

/// The attention variants whose KV cache chapter 02 sizes.
enum class AttentionKind {
  MHA,  ///< one K and one V head per query head: n_heads heads
  GQA,  ///< n_kv_heads shared K/V heads
  MQA,  ///< a single shared K/V head
  MLA,  ///< DeepSeek's latent: kv_lora_rank + qk_rope_head_dim floats, K and V together
};

/// The shape numbers that decide how many values an attention layer caches per token.
struct AttentionShape {
  AttentionKind kind = AttentionKind::GQA;  ///< which variant
  int64_t n_layers = 0;          ///< decoder layers (each caches its own K/V)
  int64_t n_heads = 0;           ///< query heads (MHA caches this many K and V heads)
  int64_t n_kv_heads = 0;        ///< K/V heads (GQA only)
  int64_t head_dim = 0;          ///< per-head K and V width (MHA/GQA/MQA)
  int64_t kv_lora_rank = 0;      ///< MLA latent width d_c (DeepSeek-V2: 512)
  int64_t qk_rope_head_dim = 0;  ///< MLA shared RoPE key width d_h^R (DeepSeek-V2: 64)
};

/// KV-cache bytes one token occupies over all layers, at `bytes_per_elem` bytes per value
/// (2 for f16/bf16, 4 for f32):
///   MHA: 2 * n_layers * n_heads * head_dim * b;  GQA: 2 * n_layers * n_kv_heads * head_dim * b;
///   MQA: 2 * n_layers * head_dim * b;  MLA: n_layers * (kv_lora_rank + qk_rope_head_dim) * b
/// (the latent serves as both K and V: no factor 2). DeepSeek-V2 (60 layers, 128 heads of 128,
/// rank 512, RoPE 64) at f16: MHA 3,932,160 bytes, MLA 69,120 bytes per token.
/// Throws InvalidArgument if bytes_per_elem < 1 or a count the variant uses is < 1 (MLA's
/// qk_rope_head_dim may be 0).
int64_t kv_bytes_per_token(const AttentionShape& shape, int64_t bytes_per_elem);

// ---- Task 3 -------------------------------------------------------------------------------

/// Mean-pools the K (or V) projection's heads into fewer groups, as the GQA paper builds a
/// GQA/MQA checkpoint from an MHA one before uptraining (Ainslie et al. 2023, sec. 2.1: "the
/// projection matrices for key and value heads are mean pooled into a single projection").
/// w: (n_kv_heads * head_dim, cols) row-major, head j in rows j*head_dim .. (j+1)*head_dim-1.
/// Returns (n_groups * head_dim, cols): group g is the element-wise mean of the
/// n_kv_heads / n_groups consecutive heads g*(n_kv_heads/n_groups) ... (so query head h, which
/// read head h / (n_heads/n_kv_heads), now reads group h / (n_heads/n_groups): its own head's
/// group). Throws InvalidArgument if w.size() != n_kv_heads * head_dim * cols, a count is < 1,
/// or n_kv_heads is not a multiple of n_groups.
std::vector<float> mean_pool_kv_heads(std::span<const float> w, int64_t n_kv_heads, int64_t head_dim,
                                      int64_t cols, int64_t n_groups);

}  // namespace lio
