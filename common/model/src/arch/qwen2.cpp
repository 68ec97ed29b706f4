// qwen2.cpp — the Qwen2 / Qwen2.5 decoder layer (Yang et al. 2024, "Qwen2 Technical Report",
// sec. 2.2.2; llama.cpp's llm_build_qwen2): the Llama layer with biases on the Q, K and V
// projections (and none on W_o or the MLP), RoPE pairing the two halves of each head (NEOX).
#include "blocks.h"
#include "families.h"

namespace lio::arch {

namespace {

// clang-format off
/// Llama's tensors plus the three projection biases (blk.N.attn_{q,k,v}.bias).
constexpr auto kQwen2Tensors = concat(kLlamaTensors, std::array{
    TensorSpec{WeightKind::BiasQ, "attn_q.bias", "self_attn.q_proj.bias", Dim::Heads},
    TensorSpec{WeightKind::BiasK, "attn_k.bias", "self_attn.k_proj.bias", Dim::KvHeads},
    TensorSpec{WeightKind::BiasV, "attn_v.bias", "self_attn.v_proj.bias", Dim::KvHeads},
});
// clang-format on

void qwen2_layer(LayerPass& p, int64_t l) {
  qkv_projection(p, l);
  add_qkv_bias(p, l);  // the one difference from llama's layer
  rope_qk(p, l);
  gqa_attend(p, l);
  swiglu_mlp(p, l);
}

}  // namespace

const Architecture kQwen2{
    .name = "qwen2",
    .summary = "llama + Q/K/V projection biases, RoPE on halves (Qwen2, Qwen2.5)",
    .rope_style = RopeStyle::Neox,
    .tensors = kQwen2Tensors,
    .layer = qwen2_layer,
};

}  // namespace lio::arch
