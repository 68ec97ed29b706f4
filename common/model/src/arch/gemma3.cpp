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
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "blocks.h"
#include "families.h"
#include "lio/backend.h"
#include "lio/error.h"
#include "lio/gguf.h"
#include "lio/model_config.h"

namespace lio::arch {

namespace {

/// Gemma's tensors (pre- and post-norms) plus QK-norm's two weights.
constexpr auto kGemma3Tensors = concat(kGemmaTensors, kQkNormTensors);

void gemma3_layer(LayerPass& p, int64_t l) {
  qkv_projection(p, l);
  qk_norm(p, l);
  rope_qk(p, l);  // local layers at base 10,000, global ones at the file's
  p.be.kv_append(p.pool, l, p.k, p.v, p.view);
  p.be.attention(p.pool, l, p.q, p.attn, p.view);  // the layer's window (ModelConfig::layer_window)
  transformed_residual(p, {WeightKind::Wo, l}, p.attn, WeightRef{WeightKind::PostAttnNorm, l},
                       1.0f);
  geglu_hidden(p, l);  // GeGLU MLP
  transformed_residual(p, {WeightKind::Down, l}, p.gate, WeightRef{WeightKind::PostFfnNorm, l},
                       1.0f);
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
    throw UnsupportedError(file.path() + ": logit soft-capping on a gemma3 model is not supported (Gemma 2's "
                           "soft-capped files are architecture gemma2)");
  }
}

/// config.json of a Gemma3ForCausalLM (model_type gemma3_text; transformers' Gemma3TextConfig):
/// sliding_window, the window pattern from layer_types ("sliding_attention" / "full_attention",
/// transformers >= 4.53) or sliding_window_pattern (older exports), rope_local_base_freq,
/// query_pre_attn_scalar (the softmax scale is its inverse square root), GELU-tanh. The things
/// this layer does not compute are refused: soft-capping (Gemma 2's, model_type gemma2), RoPE scaling (4B and larger),
/// another activation, global layers off the every-P-th pattern.
void gemma3_hf_config(const nlohmann::json& j, const std::string& path, ModelConfig& c) {
  if (!j.contains("sliding_window") || !j["sliding_window"].is_number_integer()) {
    throw FormatError(path + ": gemma3_text needs an integer sliding_window");
  }
  c.sliding_window = j["sliding_window"].get<int64_t>();
  c.sliding_window_pattern = 6;
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    const auto& types = j["layer_types"];
    if (static_cast<int64_t>(types.size()) != c.n_layers) {
      throw FormatError(path + ": layer_types has " + std::to_string(types.size()) + " entries for " +
                        std::to_string(c.n_layers) + " layers");
    }
    int64_t first_global = -1;
    for (size_t l = 0; l < types.size() && first_global < 0; ++l)
      if (types[l].get<std::string>() == "full_attention") first_global = static_cast<int64_t>(l);
    // The first global layer fixes the pattern; with none, Gemma's 6 when the model is shorter
    // than one period (nothing contradicts it), else 0: every layer windowed.
    c.sliding_window_pattern = first_global >= 0 ? first_global + 1 : (c.n_layers < 6 ? 6 : 0);
    for (size_t l = 0; l < types.size(); ++l) {
      const std::string t = types[l].get<std::string>();
      const bool global = c.layer_window(static_cast<int64_t>(l)) == 0;  // the pattern as the layers read it
      if ((t != "full_attention" && t != "sliding_attention") || (t == "full_attention") != global) {
        throw UnsupportedError(path + ": layer_types[" + std::to_string(l) + "] = '" + t +
                               "' is off the every-" + std::to_string(c.sliding_window_pattern) +
                               "th-layer-global pattern LIO runs");
      }
    }
  } else if (j.contains("sliding_window_pattern")) {
    c.sliding_window_pattern = j["sliding_window_pattern"].get<int64_t>();
  }
  c.rope_theta_local = j.value("rope_local_base_freq", 10000.0f);
  if (j.contains("query_pre_attn_scalar") && !j["query_pre_attn_scalar"].is_null()) {
    c.attn_scale = 1.0f / std::sqrt(j["query_pre_attn_scalar"].get<float>());
  }
  c.embedding_scale = std::sqrt(static_cast<float>(c.d_model));
  c.ffn_activation = FfnActivation::GeluTanh;
  const std::string act = j.value("hidden_activation", std::string("gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh" && act != "gelu_tanh") {
    throw UnsupportedError(path + ": hidden_activation '" + act + "' (gemma3 runs gelu_pytorch_tanh)");
  }
  for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping"}) {
    if (j.contains(key) && !j[key].is_null()) {
      throw UnsupportedError(path + ": " + key + " (logit soft-capping) on gemma3_text is not supported (Gemma 2's "
                             "model_type is gemma2)");
    }
  }
  c.rms_norm_eps = j.value("rms_norm_eps", 1e-6f);
}

}  // namespace

const Architecture kGemma3{
    .name = "gemma3",
    .summary =
        "pre- and post-norms, QK-norm, MQA/GQA with 5 sliding-window : 1 global layers, GeGLU, "
        "embeddings x sqrt(d_model) (Gemma 3 text)",
    .rope_style = RopeStyle::Neox,
    .tensors = kGemma3Tensors,
    .layer = gemma3_layer,
    .read_config = gemma3_config,
    .hf_model_type = "gemma3_text",
    .read_hf_config = gemma3_hf_config,
    .hf_norm_plus_one = true,
};

}  // namespace lio::arch
