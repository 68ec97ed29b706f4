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
    .layer = llama_mla_layer,
};

}  // namespace lio::arch
