// mla.cpp — multi-head latent attention as an attention variant (chapter 02; DeepSeek-AI 2024,
// DeepSeek-V2 sec. 2.1): the self-attention sub-block of a model whose GQA attention chapter 02
// converted to MLA (lio/mla_conversion.h). It caches one latent row per token and layer, the
// compressed c_kv (d_c) and the shared RoPE key k_pe (d_R), instead of n_kv_heads keys and values.
#include "blocks.h"
#include "families.h"
#include "lio/backend.h"
#include "lio/model_config.h"

namespace lio::arch {

void mla_self_attention(LayerPass& p, int64_t l) {
  p.be.rmsnorm(p.x, {WeightKind::AttnNorm, l}, p.xn, p.n_tokens);
  p.be.matmul({WeightKind::Wq, l}, p.xn, p.q, p.n_tokens, false);     // (n, n_heads * (d_nope + d_R))
  p.be.matmul({WeightKind::WkvA, l}, p.xn, p.k, p.n_tokens, false);   // (n, d_c + d_R): the latents
  p.be.mla_rope(p.q, p.k, p.view.positions, p.n_tokens);
  p.be.mla_attention(p.pool, l, p.q, p.k, p.attn, p.view);            // latents cached, then attended
  p.be.matmul({WeightKind::Wo, l}, p.attn, p.x, p.n_tokens, /*accumulate=*/true);
}

namespace {

// clang-format off
/// The MLA layer's tensors: llama's with W_k and W_v replaced by the latent down-projection
/// and the two up-projections (llama.cpp's DeepSeek-V2 names; a Hugging Face checkpoint keeps
/// W_UK and W_UV in one kv_b_proj, so they have no name of their own there). Chapter 02 makes
/// these in memory (lio/mla_conversion.h); no file is loaded with them.
constexpr std::array kLlamaMlaTensors{
    kLlamaTensors[0],
    TensorSpec{WeightKind::Wq, "attn_q.weight", "self_attn.q_proj.weight", Dim::MlaQ, Dim::DModel},
    TensorSpec{WeightKind::WkvA, "attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight", Dim::MlaKvA,
               Dim::DModel},
    TensorSpec{WeightKind::WkB, "attn_k_b.weight", "", Dim::MlaKB, Dim::KvLoraRank},
    TensorSpec{WeightKind::WvB, "attn_v_b.weight", "", Dim::MlaVB, Dim::KvLoraRank},
    TensorSpec{WeightKind::Wo, "attn_output.weight", "self_attn.o_proj.weight", Dim::DModel, Dim::MlaVB},
    kLlamaTensors[5], kLlamaTensors[6], kLlamaTensors[7], kLlamaTensors[8],
};
// clang-format on

/// A Llama layer with MLA in place of GQA: MLA self-attention, then the family's SwiGLU MLP.
void llama_mla_layer(LayerPass& p, int64_t l) {
  mla_self_attention(p, l);
  swiglu_mlp(p, l);
}

}  // namespace

const Architecture kLlamaMla{
    .name = "llama",
    .summary = "a llama-family model chapter 02 converted to MLA: RMSNorm, MLA (latent KV cache), SwiGLU",
    .rope_style = RopeStyle::Normal,
    .tensors = kLlamaMlaTensors,
    .layer = llama_mla_layer,
};

}  // namespace lio::arch
