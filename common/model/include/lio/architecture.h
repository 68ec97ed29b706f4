// architecture.h — the decoder families LIO runs, one source file each under
// common/model/src/arch/ (as llama.cpp has one llm_build_<arch> per family and vLLM one
// models/<arch>.py), chosen by the GGUF key general.architecture.
//
// A family supplies its decoder layer; the frame around it is the same for every family and
// lives in Model::forward_device (lio/model.h): embedding, the pipeline-parallel exchange of the
// residual stream, the final norm, the LM head and its logits rows. The layer gets the frame's
// buffers and this rank's tensor-parallel group in a LayerPass. Adding a family: a file in arch/
// that defines an Architecture (its RoPE pairing, its tensor table, its layer function, its own
// GGUF and config.json keys) and one line in arch/registry.cpp. The table drives everything
// that handles weights: both loaders (GGUF and Hugging Face names), the shape checks, the
// tensor-parallel split (from each tensor's dimensions) and `lio info`; the backends look
// weights up by WeightKind. A tensor kind no family had before is also one line in
// lio/weight_kind.h.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "lio/rope_style.h"
#include "lio/tensor_parallel.h"
#include "lio/weight_kind.h"

namespace lio {

class Backend;
class GgufFile;
class KvPool;
struct BatchView;
struct ModelConfig;

/// What one decoder layer works on: the frame's activation buffers (backend memory, each with
/// room for n_tokens rows) and this rank's share of the model.
struct LayerPass {
  Backend& be;                   ///< the operators
  const ModelConfig& config;     ///< this rank's shard of the model (the whole model on one rank)
  KvPool& pool;                  ///< the paged KV cache every layer writes and reads
  const BatchView& view;         ///< the batch's index arrays on the device
  int64_t n_tokens = 0;          ///< rows of the batch
  float* x = nullptr;            ///< (n_tokens, d_model) residual stream, updated in place
  float* xn = nullptr;           ///< (n_tokens, d_model) normalized input of a sub-block
  float* q = nullptr;            ///< (n_tokens, q_dim) queries
  float* k = nullptr;            ///< (n_tokens, kv_dim) keys (MLA: (n_tokens, d_c + d_R) latents)
  float* v = nullptr;            ///< (n_tokens, kv_dim) values
  float* attn = nullptr;         ///< (n_tokens, attn_out_dim) attention output
  float* gate = nullptr;         ///< (n_tokens, d_ff) MLP gate / hidden
  float* up = nullptr;           ///< (n_tokens, d_ff) MLP up projection
  /// This rank's tensor-parallel group (chapter 08; size 1 on one rank). The shared blocks'
  /// row-parallel projections go through arch::row_parallel_out, which runs chapter 08's Task 5a
  /// (lio/tensor_parallel.h row_parallel_linear) when the group has more than one rank; a llama
  /// rank's whole layer is chapter 08's Task 6 (lio/tp_decoder_layer.h).
  TpGroup tp;
};

/// One decoder layer of a family: reads and updates p.x for layer `layer` (this rank's index),
/// writing the layer's K/V into p.pool. Throws as the backend's operators.
using LayerFn = void (*)(LayerPass& p, int64_t layer);

/// A dimension of a layer tensor's shape, read from the model's ModelConfig (dim_size). Which
/// dimension a tensor has also says how tensor parallelism splits it (lio/parallel.h
/// shard_model): a tensor with a Heads, KvHeads or DFf dimension is cut along it, each rank
/// keeping its heads' or features' slice; every other tensor is whole on every rank.
enum class Dim {
  None,       ///< no second dimension: the tensor is a vector
  DModel,     ///< d_model
  HeadDim,    ///< head_dim (QK-norm weights: one row per head)
  Heads,      ///< n_heads * head_dim: the query heads (W_q's rows, W_o's columns, b_q)
  KvHeads,    ///< n_kv_heads * head_dim: the key/value heads (W_k's and W_v's rows, b_k, b_v)
  DFf,        ///< d_ff: the MLP's hidden features
  MlaQ,       ///< MLA: n_heads * (qk_nope_head_dim + qk_rope_head_dim)
  MlaKvA,     ///< MLA: kv_lora_rank + qk_rope_head_dim (the cached latent and the shared RoPE key)
  MlaKB,      ///< MLA: n_heads * qk_nope_head_dim
  MlaVB,      ///< MLA: n_heads * v_head_dim (also W_o's columns)
  KvLoraRank, ///< MLA: kv_lora_rank
};

/// The size of `dim` for `config` (0 for Dim::None).
int64_t dim_size(Dim dim, const ModelConfig& config);

/// One tensor of a family's decoder layer: one row of its table. GGUF names follow llama.cpp's
/// (gguf-py's MODEL_TENSOR names, under blk.N.), Hugging Face names transformers' (under
/// model.layers.N.). A matrix is (rows, cols) = (out_features, in_features), row-major; a
/// vector has cols == Dim::None and `rows` floats.
struct TensorSpec {
  WeightKind kind = WeightKind::AttnNorm;  ///< where LayerWeights keeps it and operators ask for it
  std::string_view gguf;                   ///< GGUF name after "blk.N.": "attn_q.weight"
  std::string_view hf;                     ///< Hugging Face name after "model.layers.N.": "self_attn.q_proj.weight"
  Dim rows = Dim::DModel;                  ///< first dimension (a vector's length)
  Dim cols = Dim::None;                    ///< second dimension, None for a vector
  /// The loader leaves the tensor empty when a file lacks it, and the layer must not read it
  /// then; a required tensor that is missing is a FormatError naming it.
  bool optional = false;
};

/// A decoder family: what the loader needs to bind its tensors and the frame to run its layers.
struct Architecture {
  std::string_view name;          ///< general.architecture ("llama", "qwen2", ...)
  std::string_view summary;       ///< one line for `lio info`: the layer's ingredients and a model
  /// RoPE pairing llama.cpp uses for the family's GGUF files (llama_model_rope_type): Normal
  /// (adjacent pairs; convert_hf_to_gguf.py permutes llama's Q/K rows for it) or Neox (halves).
  RopeStyle rope_style = RopeStyle::Normal;
  /// The tensors of each decoder layer, in the order `lio info` lists them (the model-level
  /// token_embd, output_norm and output are the same for every family and not listed).
  std::span<const TensorSpec> tensors;
  LayerFn layer = nullptr;        ///< the decoder layer
  /// Reads the family's own keys (sliding window, embedding scale, ...) into a config whose
  /// common keys, those prefixed with the architecture's name, are read; null when there are
  /// none. Throws FormatError / UnsupportedError naming the file.
  void (*read_config)(const GgufFile& file, ModelConfig& config) = nullptr;

  // ---- the Hugging Face form (a directory: config.json, *.safetensors) ----
  /// config.json's model_type for the family when it is not `name` (gemma3's text model says
  /// "gemma3_text"); empty: `name` itself.
  std::string_view hf_model_type = {};
  /// Reads the family's own config.json keys (after the common ones); null when there are none.
  /// Throws FormatError / UnsupportedError naming `path`.
  void (*read_hf_config)(const nlohmann::json& config, const std::string& path, ModelConfig& c) = nullptr;
  /// The HF checkpoint stores each RMSNorm weight as w and its layer computes x_hat * (1 + w)
  /// (Gemma's Gemma3RMSNorm); GGUF stores 1 + w (convert_hf_to_gguf.py adds the 1), which is
  /// what the backends multiply by: the loader adds 1 to every norm vector of the HF form.
  bool hf_norm_plus_one = false;
};

/// Every family LIO runs, in registry order (llama first).
std::span<const Architecture* const> architectures();

/// The names of architectures(), comma-separated: "llama, qwen2, qwen3, gemma2, gemma3, granite".
std::string architecture_names();

/// The family named `name` (general.architecture). Throws UnsupportedError("<source>:
/// architecture 'x' is not supported (supported: llama, qwen2, qwen3, gemma2, gemma3, granite)") for any other name.
const Architecture& find_architecture(std::string_view name, const std::string& source);

/// The Architecture whose layers run `config` (Model's frame): find_architecture of its family,
/// or, for a model chapter 02 converted to MLA (config.is_mla()), that family's MLA variant
/// (arch/mla.cpp: MLA self-attention in place of GQA; DeepSeek-V2 sec. 2.1), so no family's layer
/// branches on MLA. Throws as find_architecture, or UnsupportedError for an MLA model of a
/// family other than llama.
const Architecture& layer_architecture(const ModelConfig& config);

/// The family whose name or hf_model_type is config.json's `model_type`. Throws as
/// find_architecture() (the message lists the families' names).
const Architecture& find_hf_architecture(std::string_view model_type, const std::string& source);

}  // namespace lio
