// blocks.h — the sub-blocks decoder families share, each a few Backend calls on a LayerPass
// (lio/architecture.h). A family's layer (arch/<family>.cpp) strings them together, so the
// differences between families are the lines that differ, not copies of the whole layer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "lio/architecture.h"
#include "lio/backend.h"

namespace lio::arch {

// ---- the tensors the shared blocks read: rows of the families' tables (lio/architecture.h) ----

// clang-format off
/// Llama's layer (llama.cpp's LLM_ARCH_LLAMA tensors; transformers' LlamaDecoderLayer): the
/// attention norm, W_q, W_k, W_v, W_o, the MLP norm, and SwiGLU's W_gate, W_up, W_down.
inline constexpr std::array kLlamaTensors{
    TensorSpec{WeightKind::AttnNorm, "attn_norm.weight", "input_layernorm.weight", Dim::DModel},
    TensorSpec{WeightKind::Wq, "attn_q.weight", "self_attn.q_proj.weight", Dim::Heads, Dim::DModel},
    TensorSpec{WeightKind::Wk, "attn_k.weight", "self_attn.k_proj.weight", Dim::KvHeads, Dim::DModel},
    TensorSpec{WeightKind::Wv, "attn_v.weight", "self_attn.v_proj.weight", Dim::KvHeads, Dim::DModel},
    TensorSpec{WeightKind::Wo, "attn_output.weight", "self_attn.o_proj.weight", Dim::DModel, Dim::Heads},
    TensorSpec{WeightKind::FfnNorm, "ffn_norm.weight", "post_attention_layernorm.weight", Dim::DModel},
    TensorSpec{WeightKind::Gate, "ffn_gate.weight", "mlp.gate_proj.weight", Dim::DFf, Dim::DModel},
    TensorSpec{WeightKind::Up, "ffn_up.weight", "mlp.up_proj.weight", Dim::DFf, Dim::DModel},
    TensorSpec{WeightKind::Down, "ffn_down.weight", "mlp.down_proj.weight", Dim::DModel, Dim::DFf},
};
// clang-format on

// clang-format off
/// QK-norm's two weights, one row of head_dim shared by every head (qwen3, gemma3).
inline constexpr std::array kQkNormTensors{
    TensorSpec{WeightKind::QNorm, "attn_q_norm.weight", "self_attn.q_norm.weight", Dim::HeadDim},
    TensorSpec{WeightKind::KNorm, "attn_k_norm.weight", "self_attn.k_norm.weight", Dim::HeadDim},
};
// clang-format on

// clang-format off
/// Gemma's layer (Gemma 2 and 3): llama's tensors under Gemma's Hugging Face names - its
/// post_attention_layernorm is the attention block's post-norm, pre_feedforward_layernorm the
/// MLP's pre-norm (convert_hf_to_gguf.py's tensor map) - plus the two post-norms.
inline constexpr std::array kGemmaTensors{
    kLlamaTensors[0], kLlamaTensors[1], kLlamaTensors[2], kLlamaTensors[3], kLlamaTensors[4],
    TensorSpec{WeightKind::PostAttnNorm, "post_attention_norm.weight", "post_attention_layernorm.weight", Dim::DModel},
    TensorSpec{WeightKind::FfnNorm, "ffn_norm.weight", "pre_feedforward_layernorm.weight", Dim::DModel},
    kLlamaTensors[6], kLlamaTensors[7], kLlamaTensors[8],
    TensorSpec{WeightKind::PostFfnNorm, "post_ffw_norm.weight", "post_feedforward_layernorm.weight", Dim::DModel},
};
// clang-format on

/// The rows of `a` followed by those of `b`: a family's table as shared rows plus its own.
template <size_t N, size_t M>
constexpr std::array<TensorSpec, N + M> concat(const std::array<TensorSpec, N>& a, const std::array<TensorSpec, M>& b) {
  std::array<TensorSpec, N + M> out{};
  for (size_t i = 0; i < N; ++i) out[i] = a[i];
  for (size_t i = 0; i < M; ++i) out[N + i] = b[i];
  return out;
}

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
