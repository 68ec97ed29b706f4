// blocks.h — the sub-blocks decoder families share, each a few Backend calls on a LayerPass
// (lio/architecture.h). A family's layer (arch/<family>.cpp) strings them together, so the
// differences between families are the lines that differ, not copies of the whole layer.
#pragma once

#include <cstdint>
#include <optional>

#include "lio/architecture.h"
#include "lio/backend.h"

namespace lio::arch {

/// out (n_tokens, config.d_model) = [out +] in W^T for the row-parallel projection `w` (W_o,
/// W_down: this rank holds W's columns for its slice of in's features), summed over the
/// tensor-parallel group: on one rank a plain matmul, over ranks chapter 08's Task 5a
/// (row_parallel_linear, Megatron-LM's g operator). add_to_out: out holds the residual stream.
void row_parallel_out(LayerPass& p, WeightRef w, const float* in, float* out, bool add_to_out);

/// xn = RMSNorm(x) * attn_norm; q, k, v = xn W_q^T, xn W_k^T, xn W_v^T (one matmul_many; over
/// tensor parallelism: column-parallel, this rank's heads). Shapes as LayerPass.
void qkv_projection(LayerPass& p, int64_t layer);

/// q += b_q, k += b_k, v += b_v on every row (qwen2's projection biases).
void add_qkv_bias(LayerPass& p, int64_t layer);

/// QK-norm (qwen3, gemma3): each query head and each key head RMS-normalized over its head_dim
/// values with the layer's q_norm / k_norm weight, before RoPE (Dehghani et al. 2023, "Scaling
/// Vision Transformers to 22B", sec. 3.1; llama.cpp's llm_build_qwen3).
void qk_norm(LayerPass& p, int64_t layer);

/// RoPE (Su et al. 2021) in place on q (n_heads heads) and k (n_kv_heads heads) at the batch's
/// positions, pairing dimensions as config.rope_style says, at layer l's base frequency.
void rope_qk(LayerPass& p, int64_t layer);

/// Grouped-query paged attention (Ainslie et al. 2023; Kwon et al. 2023): k, v into the pool at
/// the slot mapping, each row's attention over its sequence into attn, then x += attn W_o^T
/// (row-parallel: all-reduced over the tensor-parallel group).
void gqa_attend(LayerPass& p, int64_t layer);

/// Chapter 02's multi-head latent attention (DeepSeek-V2 sec. 2.1), the attention variant of an
/// MLA model: xn = RMSNorm(x); q = xn W_q^T; the latent [c_kv | k_pe] = xn W_kvA^T cached per
/// token; RoPE on the decoupled parts; attention through the latents; x += attn W_o^T. One rank
/// only (make_rank_plan refuses tensor parallelism of an MLA model).
void mla_self_attention(LayerPass& p, int64_t layer);

/// x += f(W in) for the row-parallel projection `w` (W_o, W_down) of a sub-block whose output
/// is transformed before the residual add: W in goes into p.xn (summed over the tensor-parallel
/// group from zero: f needs the whole sum), is RMS-normalized with `post_norm` when given
/// (Gemma's post-norms, Gemma Team 2024, "Gemma 2", sec. 2) and multiplied by `scale` when it
/// is not 1 (granite's residual_multiplier), then added into p.x. p.xn must be free (the
/// sub-block has read its normalized input). Shapes as LayerPass.
void transformed_residual(LayerPass& p, WeightRef w, const float* in, std::optional<WeightRef> post_norm, float scale);

/// GeGLU's hidden layer (Shazeer 2020, eq. 5; Gemma's MLP): xn = RMSNorm(x) * ffn_norm; gate =
/// gelu_tanh(xn W_gate^T) * (xn W_up^T) (column-parallel: this rank's features). The caller
/// projects gate with W_down (transformed_residual).
void geglu_hidden(LayerPass& p, int64_t layer);

/// SwiGLU MLP (Shazeer 2020, eq. 6): xn = RMSNorm(x) * ffn_norm; x += (silu(xn W_gate^T) *
/// (xn W_up^T)) W_down^T (gate/up column-parallel, down row-parallel and all-reduced).
void swiglu_mlp(LayerPass& p, int64_t layer);

}  // namespace lio::arch
