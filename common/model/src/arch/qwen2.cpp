// qwen2.cpp — the Qwen2 / Qwen2.5 decoder layer (Yang et al. 2024, "Qwen2 Technical Report",
// sec. 2.2.2; llama.cpp's llm_build_qwen2): the Llama layer with biases on the Q, K and V
// projections (and none on W_o or the MLP), RoPE pairing the two halves of each head (NEOX).
#include "blocks.h"
#include "families.h"

namespace lio::arch {

namespace {

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
    .qkv_bias = true,
    .layer = qwen2_layer,
};

}  // namespace lio::arch
