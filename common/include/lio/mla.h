// mla.h — chapter 02: multi-head latent attention (DeepSeek-AI 2024, "DeepSeek-V2", sec. 2.1).
//
// Per token MLA caches one latent row [c_kv (d_c = kv_lora_rank) | k_pe (d_R =
// qk_rope_head_dim)]. Query head i has a no-RoPE part q_nope (qk_nope_head_dim) and a RoPE
// part q_pe (d_R); its key is [W_UK,i c_kv ; k_pe] and its value W_UV,i c_kv. The naive path
// up-projects K and V from every cached latent; the absorbed path folds W_UK,i into the query
// (q_lat = W_UK,i^T q_nope) and W_UV,i into the output, and attends over the latents directly.
//
// Task 4 is declared here and defined in exercises/02_gqa_mla/mla.cpp (yours) or
// solutions/02_gqa_mla/mla.cpp (the reference); the CPU backend's absorbed path calls it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lio/model_loader.h"

namespace lio {

/// Widths of one MLA head's computation.
struct MlaHeadShape {
  int64_t qk_nope_head_dim = 0;  ///< d_nope: query/key width without RoPE
  int64_t qk_rope_head_dim = 0;  ///< d_R: RoPE query/key width (the shared k_pe)
  int64_t kv_lora_rank = 0;      ///< d_c: latent width
  int64_t v_head_dim = 0;        ///< d_v: value width
};

// ---- Task 4 -------------------------------------------------------------------------------

/// Absorbed MLA attention of one query head over n_ctx cached latents (DeepSeek-V2 sec.
/// 2.1.2-2.1.3, "W_UK can be absorbed into W_UQ, and W_UV into W_O"):
///   q_lat = W_UK^T q_nope                              (d_c)
///   s_j   = scale * (q_lat . c_j + q_pe . kpe_j)       j < n_ctx
///   p     = softmax(s)                                 (subtract the max first)
///   o_lat = sum_j p_j c_j                              (d_c)
///   out   = W_UV o_lat                                 (d_v)
/// equal (up to rounding) to the naive path's softmax(q . k_j) v_j with k_j = [W_UK c_j ;
/// kpe_j], v_j = W_UV c_j (cpu::mla_naive_attention_head), without building any k_j or v_j.
/// q_nope: (d_nope); q_pe: (d_R), already rotated; w_uk: this head's W_UK, (d_nope, d_c)
/// row-major; w_uv: this head's W_UV, (d_v, d_c); latents: (n_ctx, d_c + d_R), row j =
/// [c_j | kpe_j] (kpe_j rotated); out: (d_v).
/// Throws InvalidArgument if a span's size disagrees with `shape` and n_ctx, or n_ctx < 1.
void mla_absorbed_attention_head(std::span<const float> q_nope, std::span<const float> q_pe,
                                 std::span<const float> w_uk, std::span<const float> w_uv,
                                 std::span<const float> latents, int64_t n_ctx, const MlaHeadShape& shape,
                                 float scale, std::span<float> out);

// ---- the engine's MLA models (common/src/mla.cpp) ----------------------------------------

/// How the course model's GQA attention becomes MLA (no training): MHA2MLA's recipe (Ji et
/// al. 2025): partial RoPE keeping the highest-frequency pairs ("S_high"), then a joint
/// low-rank SVD of the no-RoPE keys and the values ("SVD_joint").
struct MlaConversion {
  int64_t rank = 0;        ///< d_c: latent width (even, 1 .. rows of [W_k,nope ; W_v])
  int64_t rope_pairs = 0;  ///< RoPE pairs each KV head keeps (1 .. head_dim / 2 - 1), highest frequency first
  /// Calibration text (token ids). Empty: the SVD factorises the weights alone (MHA2MLA's
  /// SVD_joint). Otherwise the model runs over these tokens first and each layer's latent is
  /// the PCA of the keys and values it actually produces there, keys scaled to the values'
  /// norm first (TransMLA's activation PCA with balanced K/V; Meng et al. 2025).
  std::vector<int32_t> calibration_tokens;
};

/// Converts `model` (a GQA Llama model) into MLA in place:
/// 1. Partial RoPE: of each KV head's head_dim / 2 rotary pairs, the `rope_pairs`
///    highest-frequency ones stay rotary; they form the shared RoPE key k_pe
///    (d_R = n_kv_heads * 2 * rope_pairs: each KV head's kept pairs side by side), and each
///    query head's RoPE query holds its own kept pairs in its KV head's place (zeros elsewhere),
///    so q_pe . k_pe is exactly the kept part of the original score. The other pairs lose their
///    rotation (they become no-RoPE dimensions): the approximation, small for the slow pairs.
/// 2. Joint low rank of [W_k,nope ; W_v] ((n_kv_heads * (head_dim - 2 * rope_pairs) +
///    n_kv_heads * head_dim), d_model). Without calibration tokens: its SVD U S V^T truncated to
///    `rank`, W_DKV = S_r V_r^T, and W_UK,i / W_UV,i are the rows of U_r for query head i's KV
///    head. With them: U_r are the top eigenvectors of the covariance of the (balanced) K/V
///    rows over the calibration text, W_DKV = U_r^T [a W_k,nope ; W_v], W_UK = U_r,K / a. At
///    full rank only step 1 changes the model.
/// The softmax scale stays 1/sqrt(head_dim); every new matrix is f32. Throws InvalidArgument
/// for an out-of-range rank or rope_pairs, UnsupportedError for a model that is already MLA.
void convert_to_mla(LoadedModel& model, const MlaConversion& conversion);

/// Rows of the matrix convert_to_mla factorises: n_kv_heads * (2 * head_dim - 2 * rope_pairs),
/// the largest rank it accepts.
int64_t mla_max_rank(const ModelConfig& config, int64_t rope_pairs);

}  // namespace lio
