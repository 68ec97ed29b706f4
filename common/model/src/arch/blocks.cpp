// blocks.cpp — the shared decoder sub-blocks (blocks.h), written once over Backend operators.
#include "blocks.h"

#include "lio/backend.h"
#include "lio/model_config.h"

namespace lio::arch {

void qkv_projection(LayerPass& p, int64_t l) {
  p.be.rmsnorm(p.x, {WeightKind::AttnNorm, l}, p.xn, p.n_tokens);
  const MatmulOut qkv[] = {{{WeightKind::Wq, l}, p.q}, {{WeightKind::Wk, l}, p.k}, {{WeightKind::Wv, l}, p.v}};
  p.be.matmul_many(qkv, p.xn, p.n_tokens);
}

void add_qkv_bias(LayerPass& p, int64_t l) {
  p.be.add_bias(p.q, {WeightKind::BiasQ, l}, p.n_tokens);
  p.be.add_bias(p.k, {WeightKind::BiasK, l}, p.n_tokens);
  p.be.add_bias(p.v, {WeightKind::BiasV, l}, p.n_tokens);
}

void qk_norm(LayerPass& p, int64_t l) {
  p.be.rmsnorm(p.q, {WeightKind::QNorm, l}, p.q, p.n_tokens * p.config.n_heads);
  p.be.rmsnorm(p.k, {WeightKind::KNorm, l}, p.k, p.n_tokens * p.config.n_kv_heads);
}

void rope_qk(LayerPass& p, int64_t l) {
  const float theta = p.config.layer_rope_theta(l);
  p.be.rope(p.q, p.view.positions, p.n_tokens, p.config.n_heads, theta);
  p.be.rope(p.k, p.view.positions, p.n_tokens, p.config.n_kv_heads, theta);
}

void gqa_attend(LayerPass& p, int64_t l) {
  p.be.kv_append(p.pool, l, p.k, p.v, p.view);
  p.be.attention(p.pool, l, p.q, p.attn, p.view);
  p.be.matmul({WeightKind::Wo, l}, p.attn, p.x, p.n_tokens, p.accumulate);  // x += W_o attn (row-parallel)
  if (p.all_reduce) p.all_reduce(p.x, p.n_tokens * p.config.d_model);        // all-reduce 1 of 2
}

void swiglu_mlp(LayerPass& p, int64_t l) {
  const int64_t n = p.n_tokens;
  p.be.rmsnorm(p.x, {WeightKind::FfnNorm, l}, p.xn, n);
  const MatmulOut gate_up[] = {{{WeightKind::Gate, l}, p.gate}, {{WeightKind::Up, l}, p.up}};
  p.be.matmul_many(gate_up, p.xn, n);  // column-parallel: this rank's features
  p.be.swiglu(p.gate, p.up, p.gate, n * p.config.d_ff);
  p.be.matmul({WeightKind::Down, l}, p.gate, p.x, n, p.accumulate);  // x += W_down h (row-parallel)
  if (p.all_reduce) p.all_reduce(p.x, n * p.config.d_model);         // all-reduce 2 of 2
}

}  // namespace lio::arch
