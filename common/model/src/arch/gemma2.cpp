// gemma2.cpp — the Gemma 2 decoder layer (Gemma Team 2024, "Gemma 2: Improving Open Language
// Models at a Practical Size", sec. 2; llama.cpp's llm_build_gemma2_iswa, whose numbers are taken
// here): Gemma 3's layer without QK-norm - RMSNorm before and after each sub-block, GeGLU with
// GELU in its tanh form, embeddings scaled by sqrt(d_model) - plus logit soft-capping: every
// attention score s becomes cap * tanh(s / cap) before the mask and softmax (50 on the released
// models; ModelConfig::attn_softcap, in the attention kernels) and every final logit z becomes
// 30 tanh(z / 30) (ModelConfig::final_softcap, after the LM head in Model's frame). Attention
// alternates: even layers see a sliding window of the last 4,096 keys, odd layers every key
// (llama.cpp's set_swa_pattern(2): layer l is windowed unless l % 2 == 1), one RoPE base for
// both. The norm weights in a GGUF file already hold Gemma's 1 + w. RoPE pairs the two halves.
//   x' = x + PostNorm_attn(W_o Attn_capped(RoPE(W_q n), RoPE(W_k n), W_v n)),  n = Norm_attn(x)
//   y  = x' + PostNorm_ffn(W_down (gelu_tanh(W_gate m) * W_up m)),             m = Norm_ffn(x')
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "blocks.h"
#include "families.h"
#include "lio/backend.h"
#include "lio/error.h"
#include "lio/gguf.h"
#include "lio/model_config.h"

namespace lio::arch {

namespace {

void gemma2_layer(LayerPass& p, int64_t l) {
  qkv_projection(p, l);
  rope_qk(p, l);
  p.be.kv_append(p.pool, l, p.k, p.v, p.view);
  p.be.attention(p.pool, l, p.q, p.attn, p.view);  // the layer's window; scores soft-capped
  transformed_residual(p, {WeightKind::Wo, l}, p.attn, WeightRef{WeightKind::PostAttnNorm, l}, 1.0f);
  geglu_hidden(p, l);
  transformed_residual(p, {WeightKind::Down, l}, p.gate, WeightRef{WeightKind::PostFfnNorm, l}, 1.0f);
}

/// What both forms share once the window and the caps are read: Gemma 2's every-other-layer
/// window, sqrt(d_model) embeddings, GELU-tanh.
void gemma2_common(ModelConfig& c) {
  c.sliding_window_pattern = 2;
  c.embedding_scale = std::sqrt(static_cast<float>(c.d_model));
  c.ffn_activation = FfnActivation::GeluTanh;
}

/// gemma2.attention.sliding_window (llama.cpp's default 4096 when absent), the two soft-caps
/// (llama.cpp reads them as optional with defaults 50 and 30: llama_hparams), and the softmax
/// scale as llama.cpp's LLM_ARCH_GEMMA2 hparams set it: 1/sqrt(d_model / n_heads) for the 27B
/// model (46 layers; its query_pre_attn_scalar is 144), else 1/sqrt(head_dim) (a GGUF file
/// carries no query_pre_attn_scalar).
void gemma2_config(const GgufFile& file, ModelConfig& c) {
  c.sliding_window = file.has("gemma2.attention.sliding_window")
                         ? static_cast<int64_t>(file.get_uint("gemma2.attention.sliding_window"))
                         : 4096;
  c.attn_softcap = file.has("gemma2.attn_logit_softcapping")
                       ? static_cast<float>(file.get_float("gemma2.attn_logit_softcapping"))
                       : 50.0f;
  c.final_softcap = file.has("gemma2.final_logit_softcapping")
                        ? static_cast<float>(file.get_float("gemma2.final_logit_softcapping"))
                        : 30.0f;
  const float width = c.n_layers == 46 ? static_cast<float>(c.d_model / c.n_heads) : static_cast<float>(c.head_dim);
  c.attn_scale = 1.0f / std::sqrt(width);
  gemma2_common(c);
}

/// config.json of a Gemma2ForCausalLM (transformers' Gemma2Config): sliding_window,
/// query_pre_attn_scalar (the softmax scale is its inverse square root), attn_logit_softcapping
/// and final_logit_softcapping (null: off), GELU-tanh, and layer_types when present
/// (transformers >= 4.53) checked against the every-other-layer pattern.
void gemma2_hf_config(const nlohmann::json& j, const std::string& path, ModelConfig& c) {
  const std::string act = j.value("hidden_activation", std::string("gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh" && act != "gelu_tanh") {
    throw UnsupportedError(path + ": hidden_activation '" + act + "' (gemma2 runs gelu_pytorch_tanh)");
  }
  if (!j.contains("sliding_window") || !j["sliding_window"].is_number_integer()) {
    throw FormatError(path + ": gemma2 needs an integer sliding_window");
  }
  c.sliding_window = j["sliding_window"].get<int64_t>();
  gemma2_common(c);
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    const auto& types = j["layer_types"];
    for (size_t l = 0; l < types.size(); ++l) {
      const bool windowed = c.layer_window(static_cast<int64_t>(l)) > 0;
      if (types[l] != (windowed ? "sliding_attention" : "full_attention")) {
        throw UnsupportedError(path + ": layer_types[" + std::to_string(l) + "] = " + types[l].dump() +
                               " is off Gemma 2's every-other-layer pattern (even layers windowed) LIO runs");
      }
    }
  }
  const float scalar = j.value("query_pre_attn_scalar", static_cast<float>(c.head_dim));
  c.attn_scale = 1.0f / std::sqrt(scalar);
  const auto cap = [&](const char* key, float fallback) {
    return j.contains(key) ? (j[key].is_null() ? 0.0f : j[key].get<float>()) : fallback;
  };
  c.attn_softcap = cap("attn_logit_softcapping", 50.0f);
  c.final_softcap = cap("final_logit_softcapping", 30.0f);
  c.rms_norm_eps = j.value("rms_norm_eps", 1e-6f);
}

}  // namespace

const Architecture kGemma2{
    .name = "gemma2",
    .summary =
        "pre- and post-norms, GQA with every other layer sliding-window, attention and final logit "
        "soft-capping, GeGLU, embeddings x sqrt(d_model) (Gemma 2)",
    .rope_style = RopeStyle::Neox,
    .tensors = kGemmaTensors,
    .layer = gemma2_layer,
    .read_config = gemma2_config,
    .read_hf_config = gemma2_hf_config,
    .hf_norm_plus_one = true,
};

}  // namespace lio::arch
