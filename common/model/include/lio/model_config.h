// model_config.h — the hyper-parameters of a decoder of one of LIO's families
// (lio/architecture.h), read from GGUF metadata (`<arch>.*` keys) or a Hugging Face config.json.
#pragma once

#include <cstdint>
#include <string>

#include "lio/rope_style.h"

namespace lio {

class GgufFile;

/// The gate activation of the gated MLP: SwiGLU (SiLU; Llama, Qwen) or GeGLU (GELU, tanh form;
/// Gemma). Shazeer 2020, "GLU Variants Improve Transformer", eqs. 5-6.
enum class FfnActivation { SiLU, GeluTanh };

/// Shapes and constants of the model. All counts are plain element/token counts.
struct ModelConfig {
  std::string architecture = "llama";  ///< the family (general.architecture): "llama", "qwen2", "qwen3", "gemma2", "gemma3", "granite"
  std::string name;             ///< general.name or the directory name
  int64_t n_layers = 0;         ///< decoder blocks
  int64_t d_model = 0;          ///< hidden size (embedding length)
  int64_t n_heads = 0;          ///< query heads
  int64_t n_kv_heads = 0;       ///< key/value heads (GQA: n_heads % n_kv_heads == 0)
  int64_t head_dim = 0;         ///< per-head dimension
  int64_t d_ff = 0;             ///< SwiGLU intermediate size
  int64_t vocab_size = 0;       ///< rows of the embedding
  int64_t context_length = 0;   ///< max positions the model was trained for (tokens)
  float rope_theta = 10000.0f;  ///< RoPE base frequency
  float rms_norm_eps = 1e-5f;   ///< RMSNorm epsilon
  RopeStyle rope_style = RopeStyle::Normal;  ///< RoPE pairing of head dimensions
  bool tied_embeddings = false; ///< LM head reuses token_embd

  // ---- per-family options (lio/architecture.h); the defaults are llama's ----
  /// Sliding-window attention (Beltagy et al. 2020; Gemma 3's local layers): a windowed layer's
  /// row at position p sees keys p - sliding_window + 1 .. p. 0 = no layer is windowed.
  int64_t sliding_window = 0;
  /// With a window: global layer l is windowed unless l % pattern == pattern - 1 (gemma3: 6,
  /// five local layers then one global; llama.cpp's set_swa_pattern). 0 = every layer windowed.
  int64_t sliding_window_pattern = 0;
  float rope_theta_local = 0.0f;  ///< RoPE base of windowed layers (gemma3: 10000); 0 = rope_theta
  /// embedding rows are multiplied by this (gemma2/gemma3: sqrt(d_model); granite: embedding_multiplier)
  float embedding_scale = 1.0f;
  FfnActivation ffn_activation = FfnActivation::SiLU;  ///< the MLP's gate activation
  /// Attention logit soft-capping (Gemma Team 2024, "Gemma 2", sec. 2; llama.cpp's
  /// attn_logit_softcapping): each score s = softmax_scale * q.k becomes cap * tanh(s / cap)
  /// before the mask and softmax, in every attention kernel. gemma2: 50. 0 = off.
  float attn_softcap = 0.0f;
  /// Final logit soft-capping (Gemma 2, sec. 2; llama.cpp's final_logit_softcapping): each
  /// logit z becomes cap * tanh(z / cap) after the LM head (and after logit_scale). gemma2: 30.
  /// 0 = off.
  float final_softcap = 0.0f;
  /// Each sub-block's output (W_o's, W_down's) is multiplied by this before the residual add
  /// (granite: residual_multiplier, llama.cpp's granite.residual_scale). 1 = unchanged.
  float residual_scale = 1.0f;
  /// The logits are divided by this after the LM head (granite: logits_scaling, llama.cpp's
  /// granite.logit_scale). 1 = unchanged.
  float logit_scale = 1.0f;
  int64_t first_layer = 0;        ///< global index of this shard's layer 0 (a pipeline stage's first layer)

  // ---- multi-head latent attention (DeepSeek-AI 2024, DeepSeek-V2 sec. 2.1; chapter 02) ----
  // All 0 for a GQA model. An MLA model's layers carry Wq (n_heads * (qk_nope_head_dim +
  // qk_rope_head_dim), d_model), WkvA (kv_lora_rank + qk_rope_head_dim, d_model), WkB
  // (n_heads * qk_nope_head_dim, kv_lora_rank), WvB (n_heads * v_head_dim, kv_lora_rank) and Wo
  // (d_model, n_heads * v_head_dim). What one token leaves in an MLA layer's cache is chapter
  // 02's Task 2 (docs/02_gqa_mla.md, section 5; the pool's layout: lio/kv_pool.h).
  int64_t kv_lora_rank = 0;      ///< d_c: width of the cached latent c_kv
  int64_t qk_nope_head_dim = 0;  ///< per-head query/key width without RoPE
  int64_t qk_rope_head_dim = 0;  ///< d_h^R: width of the shared RoPE key and each head's RoPE query
  int64_t v_head_dim = 0;        ///< per-head value width
  /// softmax scale; 0 = 1 / sqrt(head_dim) (MLA: qk_nope_head_dim + qk_rope_head_dim). Set by gemma2 /
  /// gemma3 (query_pre_attn_scalar) and granite (attention_multiplier), MLA or not.
  float attn_scale = 0.0f;
  bool mla_absorbed = true;      ///< compute path (a run-time choice): absorbed, or naive up-projection

  /// True for an MLA model (kv_lora_rank > 0).
  bool is_mla() const { return kv_lora_rank > 0; }
  /// Width of the concatenated query heads: n_heads * head_dim (MLA: n_heads * (nope + rope)).
  int64_t q_dim() const { return is_mla() ? n_heads * (qk_nope_head_dim + qk_rope_head_dim) : n_heads * head_dim; }
  /// Width of the attention output fed to Wo: n_heads * head_dim (MLA: n_heads * v_head_dim).
  int64_t attn_out_dim() const { return is_mla() ? n_heads * v_head_dim : n_heads * head_dim; }
  /// Floats one KV-pool slot holds per layer in each of its two arrays (K and V):
  /// n_kv_heads * head_dim. An MLA model stores the latent row a token leaves in a layer
  /// (chapter 02, section 5) split in two, its first half in the K array and its second half
  /// in the V array. Inline: lio_kv (the contiguous cache) uses it without linking lio_model.
  int64_t kv_dim() const { return is_mla() ? (kv_lora_rank + qk_rope_head_dim) / 2 : n_kv_heads * head_dim; }
  /// KV-pool bytes one token takes across all layers, K and V arrays both, at bytes_per_elem
  /// bytes per element (4, 2 or 1; any for MLA), scales not counted (`lio info` prints it for
  /// f32). Computed by the chapters' answers: chapter 01's kv_cache_bytes (Task 1) for one
  /// token, chapter 02's mla_latent_bytes_per_token (Task 2) for an MLA model, so it runs on the
  /// learner's code where they are switched. Throws InvalidArgument for another bytes_per_elem,
  /// when called from inside those answers, and as they throw.
  int64_t kv_bytes_per_token(int64_t bytes_per_elem) const;
  /// The softmax scale: attn_scale when set, else 1/sqrt of the query-key width.
  float softmax_scale() const;
  /// The window of this shard's layer `layer` (global layer first_layer + layer): sliding_window
  /// for a windowed layer, 0 for a global one (every layer of a model without a window).
  int64_t layer_window(int64_t layer) const;
  /// The RoPE base of this shard's layer `layer`: rope_theta_local on a windowed layer when set,
  /// else rope_theta.
  float layer_rope_theta(int64_t layer) const;

  /// Throws FormatError naming `source` when a value is missing, non-positive or
  /// inconsistent (n_heads not a multiple of n_kv_heads, odd head_dim, ...).
  void validate(const std::string& source) const;
};

/// Reads a config from GGUF metadata. Throws UnsupportedError("<file>: architecture 'x' is
/// not supported (supported: llama, qwen2, qwen3, gemma2, gemma3, granite)") for other architectures; FormatError for
/// missing keys.
ModelConfig config_from_gguf(const GgufFile& file);

/// Reads a Hugging Face config.json (model_type "llama", "qwen2", "qwen3", "gemma2",
/// "gemma3_text" or "granite", or architectures LlamaForCausalLM).
/// Throws InvalidArgument if missing, FormatError on bad JSON or missing fields,
/// UnsupportedError for other model types.
ModelConfig config_from_hf_json(const std::string& config_json_path);

}  // namespace lio
