// model_loader.h — turns a GGUF file or a Hugging Face directory into one ModelConfig,
// one set of Weights and one Tokenizer, validated against each other.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lio/model_config.h"
#include "lio/tensor.h"
#include "lio/tokenizer.h"

namespace lio {

/// Weights of one decoder block. Matrices are (out_features, in_features), row-major.
struct LayerWeights {
  std::vector<float> attn_norm;  ///< (d_model) RMSNorm weight before attention
  WeightMatrix wq;               ///< (n_heads * head_dim, d_model)
  WeightMatrix wk;               ///< (n_kv_heads * head_dim, d_model)
  WeightMatrix wv;               ///< (n_kv_heads * head_dim, d_model)
  WeightMatrix wo;               ///< (d_model, n_heads * head_dim)
  std::vector<float> ffn_norm;   ///< (d_model) RMSNorm weight before the MLP
  WeightMatrix w_gate;           ///< (d_ff, d_model)
  WeightMatrix w_up;             ///< (d_ff, d_model)
  WeightMatrix w_down;           ///< (d_model, d_ff)
  // MLA layers only (ModelConfig::is_mla(); chapter 02), f32; wk and wv are then empty and
  // wq is (n_heads * (qk_nope_head_dim + qk_rope_head_dim), d_model), each head's no-RoPE
  // part first, wo (d_model, n_heads * v_head_dim).
  WeightMatrix wkv_a;            ///< (kv_lora_rank + qk_rope_head_dim, d_model): c_kv, then k_pe
  WeightMatrix wk_b;             ///< (n_heads * qk_nope_head_dim, kv_lora_rank): W_UK, head by head
  WeightMatrix wv_b;             ///< (n_heads * v_head_dim, kv_lora_rank): W_UV, head by head
  // Per-family extras (lio/architecture.h), empty where the family has none.
  std::vector<float> bq;         ///< qwen2: (n_heads * head_dim) bias of W_q (blk.N.attn_q.bias)
  std::vector<float> bk;         ///< qwen2: (n_kv_heads * head_dim) bias of W_k
  std::vector<float> bv;         ///< qwen2: (n_kv_heads * head_dim) bias of W_v
  std::vector<float> q_norm;     ///< qwen3: (head_dim) QK-norm weight of the queries (blk.N.attn_q_norm)
  std::vector<float> k_norm;     ///< qwen3: (head_dim) QK-norm weight of the keys
  std::vector<float> post_attn_norm;  ///< gemma3: (d_model) blk.N.post_attention_norm, on the attention output
  std::vector<float> post_ffn_norm;   ///< gemma3: (d_model) blk.N.post_ffw_norm, on the MLP output

  /// Floats in the layer's vectors (norms and biases).
  int64_t vector_floats() const {
    return static_cast<int64_t>(attn_norm.size() + ffn_norm.size() + bq.size() + bk.size() + bv.size() +
                                q_norm.size() + k_norm.size() + post_attn_norm.size() + post_ffn_norm.size());
  }
};

/// All weights of a Llama-family decoder. Matrix data points into the file mapping
/// (as-stored mode) or into owned converted buffers (F32/F16/BF16 modes); `storage` keeps
/// either alive.
struct Weights {
  WeightMatrix token_embd;         ///< (vocab_size, d_model)
  std::vector<LayerWeights> layers;  ///< (n_layers) decoder blocks, in order
  std::vector<float> output_norm;  ///< (d_model)
  WeightMatrix output;             ///< (vocab_size, d_model); same data as token_embd when tied
  /// MLA only: RoPE inverse frequency of each interleaved pair of the shared RoPE key and the
  /// heads' RoPE queries, (qk_rope_head_dim / 2); a pair at position p turns by p * freq radians.
  std::vector<float> mla_rope_inv_freq;
  /// Owners of the bytes the matrices point into (file mapping or f32 buffers).
  std::vector<std::shared_ptr<const void>> storage;

  /// Bytes of weight data one forward pass reads (matrices + norms; the tied head once).
  int64_t size_bytes() const;
  /// Number of parameters (tied head counted once).
  int64_t n_params() const;
};

/// How matrices are kept in memory.
enum class WeightMode {
  AsStored,  ///< quantized blocks stay quantized; dequantized inside the matmul kernels
  F32,       ///< every matrix dequantized to f32 once at load (4 bytes/weight)
  F16,       ///< every matrix converted to IEEE f16 once at load (2 bytes/weight)
  BF16,      ///< every matrix converted to bfloat16 once at load (2 bytes/weight)
};

/// A loaded model: config, weights and tokenizer from one source.
struct LoadedModel {
  std::string path;     ///< the .gguf file or the HF directory
  std::string format;   ///< "gguf" | "hf"
  ModelConfig config;                      ///< validated hyper-parameters
  Weights weights;                         ///< shapes checked against `config`
  std::unique_ptr<Tokenizer> tokenizer;    ///< the model's tokenizer
  WeightMode mode = WeightMode::AsStored;  ///< how `weights` keeps its matrices
};

/// Loads `path`: a `.gguf` file, or a directory with config.json + safetensors (+ tokenizer.json).
/// Throws InvalidArgument (missing path), FormatError (malformed file, missing tensor, shape
/// that disagrees with the config — the message names file, tensor, expected and actual
/// shape), UnsupportedError (architecture, tensor type).
LoadedModel load_model(const std::string& path, WeightMode mode);

/// Loads only the tokenizer of `path` (a .gguf file, a HF directory, or a tokenizer.json).
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

/// The default model path: $LIO_MODEL if set, else
/// `<source dir>/models/SmolLM2-135M-Instruct.Q4_1.gguf`.
std::string default_model_path();

}  // namespace lio
