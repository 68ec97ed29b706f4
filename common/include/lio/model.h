// model.h — the Llama-family decoder forward pass on the CPU.
//
// Per block (Touvron et al. 2023, "LLaMA", sec. 2.2):
//   h = x + W_o . Attn(RoPE(W_q . RMSNorm(x)), RoPE(W_k . RMSNorm(x)), W_v . RMSNorm(x))
//   y = h + W_down . (silu(W_gate . RMSNorm(h)) * (W_up . RMSNorm(h)))
// then logits = W_out . RMSNorm(y). Attention is grouped-query (Ainslie et al. 2023).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lio/kv_cache.h"
#include "lio/model_config.h"
#include "lio/model_loader.h"

namespace lio {

/// Runs the forward pass. Holds references to the config and weights (which must outlive
/// it) and its own scratch buffers, so one Model serves one sequence at a time.
class Model {
 public:
  /// Keeps references to `config` and `weights` (not copied; they must outlive the Model).
  Model(const ModelConfig& config, const Weights& weights);

  /// Processes `tokens` at positions cache.n_tokens() .. cache.n_tokens() + n - 1, appends
  /// their K/V to `cache`, advances cache.n_tokens() by n, and returns the logits:
  /// (n, vocab_size) row-major when all_logits, else (1, vocab_size) for the last token.
  /// The whole chunk goes through the matmuls as one (n, d_model) matrix (prefill as GEMM).
  /// Throws InvalidArgument if tokens is empty, a token id is outside [0, vocab_size), or
  /// the chunk does not fit in the cache.
  std::span<const float> forward(std::span<const int32_t> tokens, KvCache& cache,
                                 bool all_logits = false);

  /// The config this model was built with.
  const ModelConfig& config() const { return config_; }

 private:
  const ModelConfig& config_;
  const Weights& weights_;
  // Scratch, resized to the chunk length n on demand. Shapes with n rows:
  std::vector<float> x_;       ///< (n, d_model) residual stream
  std::vector<float> xn_;      ///< (n, d_model) normalized
  std::vector<float> q_;       ///< (n, n_heads * head_dim)
  std::vector<float> k_;       ///< (n, n_kv_heads * head_dim)
  std::vector<float> v_;       ///< (n, n_kv_heads * head_dim)
  std::vector<float> attn_;    ///< (n, n_heads * head_dim)
  std::vector<float> proj_;    ///< (n, d_model)
  std::vector<float> gate_;    ///< (n, d_ff)
  std::vector<float> up_;      ///< (n, d_ff)
  std::vector<float> logits_;  ///< (n_out, vocab_size)
  std::vector<int32_t> positions_;
};

}  // namespace lio
