// model_loader.h — turns a GGUF file or a Hugging Face directory into one ModelConfig,
// one set of Weights and one Tokenizer, validated against each other.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lio/model_config.h"
#include "lio/tensor.h"
#include "lio/tokenizer.h"
#include "lio/weight_kind.h"

namespace lio {

/// Weights of one decoder block, indexed by WeightKind (lio/weight_kind.h): the matrices a
/// matmul reads and the vectors (norm weights, biases). Which kinds a layer holds is its
/// family's tensor table (lio/architecture.h); a kind the family lacks is an empty matrix
/// (data == nullptr) or an empty vector. Matrices are (out_features, in_features), row-major,
/// with the shapes the table gives; for an MLA layer (ModelConfig::is_mla(); chapter 02), Wk
/// and Wv are empty and Wq, WkvA, WkB, WvB and Wo have the MLA shapes of lio/model_config.h.
struct LayerWeights {
  std::array<WeightMatrix, kWeightKindCount> matrices;  ///< by index_of(kind); empty where absent
  std::array<std::vector<float>, kWeightKindCount>
      vectors;  ///< by index_of(kind); empty where absent

  /// The matrix of `kind` (empty if this layer has none).
  WeightMatrix& matrix(WeightKind kind) { return matrices[index_of(kind)]; }
  /// The matrix of `kind` (empty if this layer has none).
  const WeightMatrix& matrix(WeightKind kind) const { return matrices[index_of(kind)]; }
  /// The vector of `kind`: a norm weight or a bias (empty if this layer has none).
  std::vector<float>& vec(WeightKind kind) { return vectors[index_of(kind)]; }
  /// The vector of `kind` (empty if this layer has none).
  const std::vector<float>& vec(WeightKind kind) const { return vectors[index_of(kind)]; }

  /// Floats in the layer's vectors (norms and biases).
  int64_t vector_floats() const {
    int64_t n = 0;
    for (const auto& v : vectors) n += static_cast<int64_t>(v.size());
    return n;
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

  /// The matrix `w` names: token_embd, output, or a layer's (empty if the layer has none).
  /// Throws InvalidArgument for a vector kind or a layer outside [0, layers.size()).
  const WeightMatrix& matrix(WeightRef w) const;
  /// The vector `w` names: output_norm or a layer's norm weight or bias. Throws
  /// InvalidArgument for a matrix kind, a layer outside the model, or a vector the layer lacks
  /// (its family's table does not have it, or it was optional and absent).
  const std::vector<float>& vector(WeightRef w) const;

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
