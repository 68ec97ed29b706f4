// architecture.h — the decoder families LIO runs, one source file each under
// common/model/src/arch/ (as llama.cpp has one llm_build_<arch> per family and vLLM one
// models/<arch>.py), chosen by the GGUF key general.architecture.
//
// A family supplies its decoder layer; the frame around it is the same for every family and
// lives in Model::forward_device (lio/model.h): embedding, the pipeline-parallel exchange of the
// residual stream, the final norm, the LM head and its logits rows. The layer gets the frame's
// buffers and this rank's tensor-parallel group in a LayerPass. Adding a family: a file in arch/
// that defines an Architecture (its RoPE pairing, which optional tensors its layers carry, its
// layer function, its own GGUF and config.json keys, its Hugging Face tensor names where they
// differ from llama's), one line in arch/registry.cpp, and its extra tensors in the loader.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "lio/rope_style.h"
#include "lio/tensor_parallel.h"

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

/// A decoder family: what the loader needs to bind its tensors and the frame to run its layers.
struct Architecture {
  std::string_view name;          ///< general.architecture ("llama", "qwen2", ...)
  std::string_view summary;       ///< one line for `lio info`: the layer's ingredients and a model
  /// RoPE pairing llama.cpp uses for the family's GGUF files (llama_model_rope_type): Normal
  /// (adjacent pairs; convert_hf_to_gguf.py permutes llama's Q/K rows for it) or Neox (halves).
  RopeStyle rope_style = RopeStyle::Normal;
  bool qkv_bias = false;          ///< layers carry blk.N.attn_{q,k,v}.bias (LayerWeights::bq, bk, bv)
  bool qk_norm = false;           ///< layers carry blk.N.attn_{q,k}_norm.weight (LayerWeights::q_norm, k_norm)
  /// layers carry blk.N.post_attention_norm.weight and blk.N.post_ffw_norm.weight (gemma3)
  bool post_norms = false;
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
  /// The tensor name under model.layers.N. of a llama.cpp role ("ffn_norm", "post_ffw_norm", ...)
  /// where the family's HF name differs from llama's (Gemma's post_attention_layernorm is the
  /// attention block's post-norm, not the FFN's pre-norm); an empty view for llama's name. Null:
  /// llama's names throughout.
  std::string_view (*hf_layer_role)(std::string_view role) = nullptr;
  /// The HF checkpoint stores each RMSNorm weight as w and its layer computes x_hat * (1 + w)
  /// (Gemma's Gemma3RMSNorm); GGUF stores 1 + w (convert_hf_to_gguf.py adds the 1), which is
  /// what the backends multiply by: the loader adds 1 to every norm vector of the HF form.
  bool hf_norm_plus_one = false;
};

/// Every family LIO runs, in registry order (llama first).
std::span<const Architecture* const> architectures();

/// The names of architectures(), comma-separated: "llama, qwen2, qwen3, gemma3".
std::string architecture_names();

/// The family named `name` (general.architecture). Throws UnsupportedError("<source>:
/// architecture 'x' is not supported (supported: llama, qwen2, qwen3, gemma3)") for any other name.
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
