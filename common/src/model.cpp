#include "lio/model.h"

#include <cmath>
#include <string>

#include "cpu_ops.h"
#include "lio/error.h"

namespace lio {

Model::Model(const ModelConfig& config, const Weights& weights) : config_(config), weights_(weights) {}

std::span<const float> Model::forward(std::span<const int32_t> tokens, KvCache& cache,
                                      bool all_logits) {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t start = cache.n_tokens();
  if (n == 0) throw InvalidArgument("forward: no tokens");
  if (start + n > cache.capacity_tokens()) {
    throw InvalidArgument("forward: " + std::to_string(start + n) + " tokens do not fit in a KV cache of " +
                          std::to_string(cache.capacity_tokens()) + " tokens");
  }
  const int64_t d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim();
  auto size = [n](std::vector<float>& v, int64_t cols) { v.resize(static_cast<size_t>(n * cols)); };
  size(x_, d);
  size(xn_, d);
  size(q_, qd);
  size(k_, kvd);
  size(v_, kvd);
  size(attn_, qd);
  size(proj_, d);
  size(gate_, c.d_ff);
  size(up_, c.d_ff);
  positions_.resize(static_cast<size_t>(n));

  for (int64_t i = 0; i < n; ++i) {
    cpu::embedding_row(weights_.token_embd, tokens[static_cast<size_t>(i)], x_.data() + i * d);
    positions_[static_cast<size_t>(i)] = static_cast<int32_t>(start + i);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = weights_.layers[static_cast<size_t>(l)];
    // ---- attention ----
    cpu::rmsnorm(x_.data(), L.attn_norm.data(), xn_.data(), n, d, c.rms_norm_eps);
    cpu::matmul(L.wq, xn_.data(), q_.data(), n);
    cpu::matmul(L.wk, xn_.data(), k_.data(), n);
    cpu::matmul(L.wv, xn_.data(), v_.data(), n);
    cpu::rope(q_.data(), positions_.data(), n, c.n_heads, c.head_dim, c.rope_theta, c.rope_style);
    cpu::rope(k_.data(), positions_.data(), n, c.n_kv_heads, c.head_dim, c.rope_theta, c.rope_style);
    for (int64_t i = 0; i < n; ++i)
      cache.write(l, start + i, k_.data() + i * kvd, v_.data() + i * kvd);
    if (n == 1) {  // decode: one query over the cached prefix (chapter 01, Tasks 3 and 4)
      cpu::decode_attention(q_.data(), cache.key_prefix(l, start + 1).data(),
                            cache.value_prefix(l, start + 1).data(), attn_.data(), start + 1,
                            c.n_heads, c.n_kv_heads, c.head_dim, scale);
    } else {  // prefill: a causal block of queries
      cpu::attention(q_.data(), cache.keys(l), cache.values(l), attn_.data(), n, start, c.n_heads,
                     c.n_kv_heads, c.head_dim, scale);
    }
    cpu::matmul(L.wo, attn_.data(), proj_.data(), n);
    for (int64_t i = 0; i < n * d; ++i) x_[static_cast<size_t>(i)] += proj_[static_cast<size_t>(i)];
    // ---- SwiGLU MLP ----
    cpu::rmsnorm(x_.data(), L.ffn_norm.data(), xn_.data(), n, d, c.rms_norm_eps);
    cpu::matmul(L.w_gate, xn_.data(), gate_.data(), n);
    cpu::matmul(L.w_up, xn_.data(), up_.data(), n);
    cpu::swiglu(gate_.data(), up_.data(), gate_.data(), n * c.d_ff);
    cpu::matmul(L.w_down, gate_.data(), proj_.data(), n);
    for (int64_t i = 0; i < n * d; ++i) x_[static_cast<size_t>(i)] += proj_[static_cast<size_t>(i)];
  }
  cache.set_n_tokens(start + n);

  // Only the rows whose logits are wanted go through the (vocab x d_model) head.
  const int64_t n_out = all_logits ? n : 1;
  const float* rows = x_.data() + (n - n_out) * d;
  cpu::rmsnorm(rows, weights_.output_norm.data(), xn_.data(), n_out, d, c.rms_norm_eps);
  logits_.resize(static_cast<size_t>(n_out * c.vocab_size));
  cpu::matmul(weights_.output, xn_.data(), logits_.data(), n_out);
  return {logits_.data(), logits_.size()};
}

}  // namespace lio
