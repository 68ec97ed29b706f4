// weight_kind.h — the names of a decoder's tensors: which weight an operator reads (WeightRef)
// and the index a model's weights are kept under (LayerWeights, lio/model_loader.h; a
// family's tensor table, lio/architecture.h). Adding a tensor kind is one line here; a family
// that carries it declares it in its table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace lio {

/// Which weight of the model an operator reads. Matrices are (out_features, in_features); a
/// family's table (lio/architecture.h) gives each kind's GGUF and Hugging Face names and shape.
enum class WeightKind {
  TokenEmbd,     ///< (vocab_size, d_model), only gathered from
  AttnNorm,      ///< (d_model) per layer
  Wq,            ///< (n_heads * head_dim, d_model) per layer
  Wk,            ///< (n_kv_heads * head_dim, d_model) per layer
  Wv,            ///< (n_kv_heads * head_dim, d_model) per layer
  Wo,            ///< (d_model, n_heads * head_dim) per layer
  FfnNorm,       ///< (d_model) per layer
  Gate,          ///< (d_ff, d_model) per layer
  Up,            ///< (d_ff, d_model) per layer
  Down,          ///< (d_model, d_ff) per layer
  OutputNorm,    ///< (d_model)
  Output,        ///< (vocab_size, d_model): the LM head (token_embd's data when tied)
  WkvA,          ///< MLA: (kv_lora_rank + qk_rope_head_dim, d_model) per layer
  WkB,           ///< MLA: (n_heads * qk_nope_head_dim, kv_lora_rank) per layer
  WvB,           ///< MLA: (n_heads * v_head_dim, kv_lora_rank) per layer
  BiasQ,         ///< qwen2: (n_heads * head_dim) per layer, added to W_q x (Backend::add_bias)
  BiasK,         ///< qwen2: (n_kv_heads * head_dim) per layer
  BiasV,         ///< qwen2: (n_kv_heads * head_dim) per layer
  QNorm,         ///< qwen3 (QK-norm): (head_dim) per layer, RMSNorm of each query head
  KNorm,         ///< qwen3 (QK-norm): (head_dim) per layer, RMSNorm of each key head
  PostAttnNorm,  ///< gemma: (d_model) per layer, RMSNorm of the attention output before the
                 ///< residual add
  PostFfnNorm,   ///< gemma: (d_model) per layer, RMSNorm of the MLP output before the residual add
};

/// Number of WeightKind values: the size of an array indexed by kind.
inline constexpr size_t kWeightKindCount = static_cast<size_t>(WeightKind::PostFfnNorm) + 1;

/// The array index of `kind`.
constexpr size_t index_of(WeightKind kind) { return static_cast<size_t>(kind); }

/// True for the kinds a matmul reads (matrices), false for the vectors (norm weights and biases).
constexpr bool is_matrix(WeightKind kind) {
  switch (kind) {
    case WeightKind::TokenEmbd:
    case WeightKind::Wq:
    case WeightKind::Wk:
    case WeightKind::Wv:
    case WeightKind::Wo:
    case WeightKind::Gate:
    case WeightKind::Up:
    case WeightKind::Down:
    case WeightKind::Output:
    case WeightKind::WkvA:
    case WeightKind::WkB:
    case WeightKind::WvB: return true;
    default: return false;
  }
}

/// True for the RMSNorm weights (a family whose checkpoint stores w for x_hat * (1 + w) gets 1
/// added to exactly these; lio/architecture.h hf_norm_plus_one).
constexpr bool is_norm(WeightKind kind) {
  switch (kind) {
    case WeightKind::AttnNorm:
    case WeightKind::FfnNorm:
    case WeightKind::OutputNorm:
    case WeightKind::QNorm:
    case WeightKind::KNorm:
    case WeightKind::PostAttnNorm:
    case WeightKind::PostFfnNorm: return true;
    default: return false;
  }
}

/// The kind's name for messages ("Wq", "PostAttnNorm", ...).
std::string_view weight_kind_name(WeightKind kind);

/// A weight: its kind and its layer (-1 for TokenEmbd, OutputNorm, Output).
struct WeightRef {
  WeightKind kind;     ///< which tensor
  int64_t layer = -1;  ///< decoder layer, or -1 for the model-level tensors
};

}  // namespace lio
