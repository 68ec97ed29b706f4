// qwen3.cpp — the Qwen3 dense decoder layer (Qwen Team 2025, "Qwen3 Technical Report", sec.
// 2: "we remove QKV-bias ... and introduce QK-Norm"; llama.cpp's llm_build_qwen3): the Llama
// layer with each query and key head RMS-normalized before RoPE, RoPE on halves (NEOX). Its
// head_dim is set apart from d_model / n_heads (attention.key_length: 128 on Qwen3-0.6B,
// whose d_model is 1024 with 16 heads).
#include "blocks.h"
#include "families.h"

namespace lio::arch {

namespace {

/// Llama's tensors plus QK-norm's two weights.
constexpr auto kQwen3Tensors = concat(kLlamaTensors, kQkNormTensors);

void qwen3_layer(LayerPass& p, int64_t l) {
  qkv_projection(p, l);
  qk_norm(p, l);  // the one difference from llama's layer
  rope_qk(p, l);
  gqa_attend(p, l);
  swiglu_mlp(p, l);
}

}  // namespace

const Architecture kQwen3{
    .name = "qwen3",
    .summary = "llama + QK-norm per head, RoPE on halves, no biases (Qwen3 dense)",
    .rope_style = RopeStyle::Neox,
    .tensors = kQwen3Tensors,
    .layer = qwen3_layer,
};

}  // namespace lio::arch
