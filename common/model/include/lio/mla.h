// mla.h — chapter 02: multi-head latent attention (DeepSeek-AI 2024, "DeepSeek-V2", sec. 2.1).
//
// Per token MLA caches one latent row [c_kv (d_c = kv_lora_rank) | k_pe (d_R =
// qk_rope_head_dim)]. Query head i has a no-RoPE part q_nope (qk_nope_head_dim) and a RoPE
// part q_pe (d_R); its key is [W_UK,i c_kv ; k_pe] and its value W_UV,i c_kv. The naive path
// up-projects K and V from every cached latent; the absorbed path (Task 4) computes the same
// attention without building any head's key or value (docs/02_gqa_mla.md, section 5).
//
// Tasks 2 and 4 are declared here and defined in exercises/02_gqa_mla/mla.cpp (yours) or
// solutions/02_gqa_mla/mla.cpp (the reference): the KV pool sizes an MLA model's blocks with
// Task 2 (kv_block_bytes), and the CPU backend's absorbed path calls Task 4.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lio/model_config.h"

namespace lio {

// ---- Task 2 -------------------------------------------------------------------------------

/// KV-cache bytes one token of an MLA model occupies over all layers, at `bytes_per_elem`
/// bytes per cached value (4 for the engine's f32 pool, 2 for f16/bf16), for the cache of
/// DeepSeek-AI 2024, "DeepSeek-V2", sec. 2.1 (docs/02_gqa_mla.md, section 5, says what a layer
/// keeps). Must hold: DeepSeek-V2 (60 layers, kv_lora_rank 512, qk_rope_head_dim 64) at 2 bytes
/// caches 69,120 bytes (sec. 2.1.4, Table 1), and the answer does not change with n_heads,
/// n_kv_heads, head_dim, qk_nope_head_dim or v_head_dim.
/// Throws InvalidArgument if the config is not MLA (kv_lora_rank < 1), n_layers < 1,
/// qk_rope_head_dim < 0 (0 is allowed: no RoPE key) or bytes_per_elem < 1.
int64_t mla_latent_bytes_per_token(const ModelConfig& config, int64_t bytes_per_elem);

/// Widths of one MLA head's computation.
struct MlaHeadShape {
  int64_t qk_nope_head_dim = 0;  ///< d_nope: query/key width without RoPE
  int64_t qk_rope_head_dim = 0;  ///< d_R: RoPE query/key width (the shared k_pe)
  int64_t kv_lora_rank = 0;      ///< d_c: latent width
  int64_t v_head_dim = 0;        ///< d_v: value width
};

// ---- Task 4 -------------------------------------------------------------------------------

/// Absorbed MLA attention of one query head over n_ctx cached latents (DeepSeek-V2 sec.
/// 2.1.2-2.1.3, "W_UK can be absorbed into W_UQ, and W_UV into W_O"; docs/02_gqa_mla.md,
/// section 5, derives it): out equals (up to rounding) the naive path's
/// sum_j softmax_j(scale * q . k_j) v_j with q = [q_nope ; q_pe], k_j = [W_UK c_j ; kpe_j] and
/// v_j = W_UV c_j (cpu::mla_naive_attention_head), computed without building any k_j or v_j
/// (no (n_ctx, d_nope) or (n_ctx, d_v) tensor), and stays finite for scores that overflow exp.
/// q_nope: (d_nope); q_pe: (d_R), already rotated; w_uk: this head's W_UK, (d_nope, d_c)
/// row-major; w_uv: this head's W_UV, (d_v, d_c); latents: (n_ctx, d_c + d_R), row j =
/// [c_j | kpe_j] (kpe_j rotated); out: (d_v).
/// Throws InvalidArgument if a span's size disagrees with `shape` and n_ctx, or n_ctx < 1.
void mla_absorbed_attention_head(std::span<const float> q_nope, std::span<const float> q_pe,
                                 std::span<const float> w_uk, std::span<const float> w_uv,
                                 std::span<const float> latents, int64_t n_ctx, const MlaHeadShape& shape,
                                 float scale, std::span<float> out);

}  // namespace lio
