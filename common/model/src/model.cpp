#include "lio/model.h"

#include <string>

#include "lio/error.h"

namespace lio {

float* Model::forward_device(const ForwardBatch& batch, KvPool& pool) {
  Backend& be = backend_;
  const ModelConfig& c = be.config();
  batch.validate(c.vocab_size, c.context_length, pool.n_blocks());
  if (batch.block_size != pool.block_size()) {
    throw InvalidArgument("forward: the batch uses blocks of " + std::to_string(batch.block_size) +
                          " tokens, the pool " + std::to_string(pool.block_size()));
  }
  if (batch.n_layers < 0 || batch.n_layers > c.n_layers) {
    throw InvalidArgument("forward: the batch asks for " + std::to_string(batch.n_layers) + " layers; the model has " +
                          std::to_string(c.n_layers) + " (0 = all)");
  }
  const int64_t n_run = batch.n_layers == 0 ? c.n_layers : batch.n_layers;  // early exit: fewer
  const int64_t n = batch.n_tokens();
  const int64_t n_out = batch.n_logits();
  const int64_t d = c.d_model;
  const BatchView view = be.upload(batch);
  float* x = be.scratch(Scratch::X, n * d);           // (n, d_model) residual stream
  float* xn = be.scratch(Scratch::Xn, n * d);         // (n, d_model) normalized
  float* q = be.scratch(Scratch::Q, n * c.q_dim());   // (n, n_heads * head_dim)
  // (n, n_kv_heads * head_dim); MLA: (n, kv_lora_rank + qk_rope_head_dim), the latent rows
  float* k = be.scratch(Scratch::K, n * (c.is_mla() ? 2 * c.kv_dim() : c.kv_dim()));
  float* v = be.scratch(Scratch::V, n * c.kv_dim());
  float* attn = be.scratch(Scratch::Attn, n * c.attn_out_dim());
  float* gate = be.scratch(Scratch::Gate, n * c.d_ff);  // (n, d_ff)
  float* up = be.scratch(Scratch::Up, n * c.d_ff);

  be.embedding(view.token_ids, n, x);
  for (int64_t l = 0; l < n_run; ++l) {
    // ---- attention: K/V of every row into the pool, then each row over its sequence
    be.rmsnorm(x, {WeightKind::AttnNorm, l}, xn, n);
    if (c.is_mla()) {
      // ---- MLA (chapter 02; DeepSeek-V2 sec. 2.1): cache the latent c_kv and the shared
      // RoPE key k_pe, one row per token; every head's K and V come from it.
      be.matmul({WeightKind::Wq, l}, xn, q, n, false);
      be.matmul({WeightKind::WkvA, l}, xn, k, n, false);  // (n, d_c + d_R)
      be.mla_rope(q, k, view.positions, n);
      be.mla_attention(pool, l, q, k, attn, view);
      be.matmul({WeightKind::Wo, l}, attn, x, n, /*accumulate=*/true);
    } else {
      be.matmul({WeightKind::Wq, l}, xn, q, n, false);
      be.matmul({WeightKind::Wk, l}, xn, k, n, false);
      be.matmul({WeightKind::Wv, l}, xn, v, n, false);
      be.rope(q, view.positions, n, c.n_heads);
      be.rope(k, view.positions, n, c.n_kv_heads);
      be.kv_append(pool, l, k, v, view);
      be.attention(pool, l, q, attn, view);
      be.matmul({WeightKind::Wo, l}, attn, x, n, /*accumulate=*/true);  // x += W_o attn
    }
    // ---- SwiGLU MLP
    be.rmsnorm(x, {WeightKind::FfnNorm, l}, xn, n);
    be.matmul({WeightKind::Gate, l}, xn, gate, n, false);
    be.matmul({WeightKind::Up, l}, xn, up, n, false);
    be.swiglu(gate, up, gate, n * c.d_ff);
    be.matmul({WeightKind::Down, l}, gate, x, n, /*accumulate=*/true);  // x += W_down h
  }
  // Only the rows whose logits are wanted go through the (vocab x d_model) head.
  float* logits = be.scratch(Scratch::Logits, n_out * c.vocab_size);
  if (n_out == 0) return logits;
  float* rows = be.scratch(Scratch::Rows, n_out * d);
  be.gather_rows(x, view.logits_rows, n_out, d, rows);
  be.rmsnorm(rows, {WeightKind::OutputNorm}, rows, n_out);
  be.matmul({WeightKind::Output}, rows, logits, n_out, false);
  return logits;
}

void Model::forward(const ForwardBatch& batch, KvPool& pool, std::span<float> logits) {
  const int64_t n_floats = batch.n_logits() * config().vocab_size;
  if (static_cast<int64_t>(logits.size()) != n_floats) {
    throw InvalidArgument("forward: logits buffer holds " + std::to_string(logits.size()) + " floats, " +
                          std::to_string(n_floats) + " needed");
  }
  const float* device_logits = forward_device(batch, pool);
  backend_.to_host(device_logits, n_floats, logits.data());
}

}  // namespace lio
