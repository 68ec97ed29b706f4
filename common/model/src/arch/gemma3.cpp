// gemma3.cpp — the Gemma 3 decoder layer (Gemma Team 2025, "Gemma 3 Technical Report", sec. 2;
// llama.cpp's llm_build_gemma3_iswa, whose numbers are taken here): RMSNorm before and after
// each sub-block (the post-norm output is what the residual adds), QK-norm, GeGLU with GELU in
// its tanh form, embeddings scaled by sqrt(d_model), and interleaved attention: five local
// layers with a 512-key sliding window and RoPE base 10,000, then one global layer with RoPE
// base 1,000,000 (the file's rope.freq_base). The norm weights in a GGUF file already hold
// Gemma's 1 + w (convert_hf_to_gguf.py adds the 1). RoPE pairs the two halves of each head.
//   x' = x + PostNorm_attn(W_o Attn(RoPE(QKNorm(W_q n)), RoPE(QKNorm(W_k n)), W_v n)),  n = Norm_attn(x)
//   y  = x' + PostNorm_ffn(W_down (gelu_tanh(W_gate m) * W_up m)),                    m = Norm_ffn(x')
#include <cmath>
#include <string>

#include "blocks.h"
#include "families.h"
#include "lio/backend.h"
#include "lio/error.h"
#include "lio/gguf.h"
#include "lio/model_config.h"

namespace lio::arch {

namespace {

/// y (n, d_model) = W y_in, all-reduced over the tensor-parallel group (every rank's partial from
/// zero: the post-norm needs the whole sum before the residual add), post-normed by `norm`, and
/// added into x.
void post_normed_residual(LayerPass& p, WeightKind out_kind, const float* in, WeightKind norm, int64_t l) {
  const int64_t n = p.n_tokens, d = p.config.d_model;
  p.be.matmul({out_kind, l}, in, p.xn, n, /*accumulate=*/false);  // xn is free once read: the sub-block's output
  if (p.all_reduce) p.all_reduce(p.xn, n * d);
  p.be.rmsnorm(p.xn, {norm, l}, p.xn, n);
  p.be.add(p.x, p.xn, n * d);
}

void gemma3_layer(LayerPass& p, int64_t l) {
  qkv_projection(p, l);
  qk_norm(p, l);
  rope_qk(p, l);  // local layers at base 10,000, global ones at the file's
  p.be.kv_append(p.pool, l, p.k, p.v, p.view);
  p.be.attention(p.pool, l, p.q, p.attn, p.view);  // the layer's window (ModelConfig::layer_window)
  post_normed_residual(p, WeightKind::Wo, p.attn, WeightKind::PostAttnNorm, l);
  // GeGLU MLP
  const int64_t n = p.n_tokens;
  p.be.rmsnorm(p.x, {WeightKind::FfnNorm, l}, p.xn, n);
  const MatmulOut gate_up[] = {{{WeightKind::Gate, l}, p.gate}, {{WeightKind::Up, l}, p.up}};
  p.be.matmul_many(gate_up, p.xn, n);
  p.be.geglu(p.gate, p.up, p.gate, n * p.config.d_ff);
  post_normed_residual(p, WeightKind::Down, p.gate, WeightKind::PostFfnNorm, l);
}

/// gemma3.attention.sliding_window from the file; the window pattern (5 local : 1 global), the
/// local RoPE base and the embedding scale from llama.cpp's LLM_ARCH_GEMMA3 hparams.
void gemma3_config(const GgufFile& file, ModelConfig& c) {
  if (!file.has("gemma3.attention.sliding_window")) {
    throw FormatError(file.path() + ": gemma3.attention.sliding_window is missing");
  }
  c.sliding_window = static_cast<int64_t>(file.get_uint("gemma3.attention.sliding_window"));
  c.sliding_window_pattern = 6;
  c.rope_theta_local = 10000.0f;
  c.embedding_scale = std::sqrt(static_cast<float>(c.d_model));
  c.ffn_activation = FfnActivation::GeluTanh;
  if (file.has("gemma3.rope.scaling.type") && file.get_string("gemma3.rope.scaling.type") != "none") {
    throw UnsupportedError(file.path() + ": RoPE scaling '" + file.get_string("gemma3.rope.scaling.type") +
                           "' on the global layers (Gemma 3 4B and larger) is not supported yet");
  }
  if (file.has("gemma3.final_logit_softcapping") || file.has("gemma3.attn_logit_softcapping")) {
    throw UnsupportedError(file.path() + ": logit soft-capping (Gemma 2) is not supported");
  }
}

}  // namespace

const Architecture kGemma3{
    .name = "gemma3",
    .summary = "pre- and post-norms, QK-norm, MQA/GQA with 5 sliding-window : 1 global layers, GeGLU, "
               "embeddings x sqrt(d_model) (Gemma 3 text)",
    .rope_style = RopeStyle::Neox,
    .qk_norm = true,
    .post_norms = true,
    .layer = gemma3_layer,
    .read_config = gemma3_config,
};

}  // namespace lio::arch
