// granite.cpp — the IBM Granite dense decoder layer (transformers' GraniteForCausalLM, model_type
// "granite"; llama.cpp's llm_build_granite, whose semantics are taken here): the Llama layer with
// four scalars from the model's muP-style training (Granite 3.0 report, sec. 3: "µP ... allowed
// for hyperparameter transfer"): embeddings times embedding_multiplier, the softmax scale set to
// attention_multiplier (not 1/sqrt(head_dim)), each sub-block's output (W_o's, W_down's) times
// residual_multiplier before its residual add, and the logits divided by logits_scaling. Why this
// family: llama.cpp runs it (LLM_ARCH_GRANITE) and IBM ships it small under Apache 2.0 - the
// Granite 3.3 collection is granite-3.3-2b-base / -instruct and -8b
// (https://huggingface.co/collections/ibm-granite/granite-33-language-models). RoPE pairs adjacent
// dimensions, as llama's (convert_hf_to_gguf.py's GraniteModel is a LlamaModel: Q/K permuted).
//   h = x + s_r * W_o Attn_{s_a}(RoPE(W_q n), RoPE(W_k n), W_v n),   n = RMSNorm(s_e * embedding ...)
//   y = h + s_r * W_down (silu(W_gate m) * W_up m),                   m = RMSNorm(h)
//   logits = (W_out RMSNorm(y)) / s_l
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

void granite_layer(LayerPass& p, int64_t l) {
  const float s_r = p.config.residual_scale;
  qkv_projection(p, l);
  rope_qk(p, l);
  p.be.kv_append(p.pool, l, p.k, p.v, p.view);
  p.be.attention(p.pool, l, p.q, p.attn, p.view);  // softmax scale: attention_multiplier
  transformed_residual(p, {WeightKind::Wo, l}, p.attn, std::nullopt, s_r);
  p.be.rmsnorm_swiglu(p.x, {WeightKind::FfnNorm, l}, p.xn, {WeightKind::Gate, l}, {WeightKind::Up, l}, p.gate, p.up,
                      p.n_tokens);
  transformed_residual(p, {WeightKind::Down, l}, p.gate, std::nullopt, s_r);
}

/// granite.embedding_scale, granite.residual_scale, granite.attention.scale and
/// granite.logit_scale (each required, as llama.cpp's LLM_ARCH_GRANITE hparams read them).
/// Refused: granite.rope.scaling.finetuned = false (llama.cpp's switch for a model without
/// RoPE) and projection biases (llama.cpp loads blk.N.attn_q.bias etc. when present; LIO's
/// granite layer has none).
void granite_config(const GgufFile& file, ModelConfig& c) {
  const auto need = [&](const std::string& key) {
    if (!file.has(key)) throw FormatError(file.path() + ": " + key + " is missing");
    return static_cast<float>(file.get_float(key));
  };
  c.embedding_scale = need("granite.embedding_scale");
  c.residual_scale = need("granite.residual_scale");
  c.attn_scale = need("granite.attention.scale");
  c.logit_scale = need("granite.logit_scale");
  if (file.has("granite.rope.scaling.finetuned") && !file.get_bool("granite.rope.scaling.finetuned")) {
    throw UnsupportedError(file.path() + ": a granite model without RoPE (rope.scaling.finetuned = false)");
  }
  for (const char* bias : {"blk.0.attn_q.bias", "blk.0.attn_output.bias", "blk.0.ffn_up.bias"}) {
    if (file.find_tensor(bias) != nullptr) {
      throw UnsupportedError(file.path() + ": " + bias + ": granite with projection biases is not supported");
    }
  }
}

/// config.json of a GraniteForCausalLM (transformers' GraniteConfig): embedding_multiplier,
/// residual_multiplier, attention_multiplier and logits_scaling (transformers' defaults 1, 1,
/// 1 and 1 when absent; convert_hf_to_gguf.py writes them as the four GGUF keys above).
/// attention_bias / mlp_bias true and a hidden_act other than silu are refused.
void granite_hf_config(const nlohmann::json& j, const std::string& path, ModelConfig& c) {
  c.embedding_scale = j.value("embedding_multiplier", 1.0f);
  c.residual_scale = j.value("residual_multiplier", 1.0f);
  c.attn_scale = j.value("attention_multiplier", 1.0f);
  c.logit_scale = j.value("logits_scaling", 1.0f);
  if (j.value("attention_bias", false) || j.value("mlp_bias", false)) {
    throw UnsupportedError(path + ": granite with attention_bias / mlp_bias is not supported");
  }
  const std::string act = j.value("hidden_act", std::string("silu"));
  if (act != "silu") throw UnsupportedError(path + ": hidden_act '" + act + "' (granite runs silu)");
}

}  // namespace

const Architecture kGranite{
    .name = "granite",
    .summary =
        "llama x four scalars: embedding, attention softmax, residual-branch and logit scales "
        "(IBM Granite 3.x dense)",
    .rope_style = RopeStyle::Normal,
    .tensors = kLlamaTensors,
    .layer = granite_layer,
    .read_config = granite_config,
    .read_hf_config = granite_hf_config,
};

}  // namespace lio::arch
