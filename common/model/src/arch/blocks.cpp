// blocks.cpp — the shared decoder sub-blocks (blocks.h), written once over Backend operators.
#include "blocks.h"

#include "lio/backend.h"
#include "lio/model_config.h"
#include "lio/tensor_parallel.h"

namespace lio::arch {

void row_parallel_out(LayerPass& p, WeightRef w, const float* in, float* out, bool add_to_out) {
  if (p.tp.size == 1) {
    p.be.matmul(w, in, out, p.n_tokens, add_to_out);
    return;
  }
  const auto partial = [&](float* y, bool accumulate) { p.be.matmul(w, in, y, p.n_tokens, accumulate); };
  row_parallel_linear(partial, out, p.n_tokens * p.config.d_model, add_to_out, p.tp);  // chapter 08, Task 5a
}

void qkv_projection(LayerPass& p, int64_t l) {
  // One launch where the backend fuses them (issue 45); xn is not read afterwards.
  const MatmulOut qkv[] = {{{WeightKind::Wq, l}, p.q}, {{WeightKind::Wk, l}, p.k}, {{WeightKind::Wv, l}, p.v}};
  p.be.rmsnorm_matmul_many(p.x, {WeightKind::AttnNorm, l}, p.xn, qkv, p.n_tokens);
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
  p.be.rope_qk(p.q, p.k, p.view.positions, p.n_tokens, p.config.n_heads, p.config.n_kv_heads, theta);
}

void gqa_attend(LayerPass& p, int64_t l) {
  p.be.kv_append(p.pool, l, p.k, p.v, p.view);
  p.be.attention(p.pool, l, p.q, p.attn, p.view);
  row_parallel_out(p, {WeightKind::Wo, l}, p.attn, p.x, /*add_to_out=*/true);  // x += W_o attn: all-reduce 1 of 2
}

void swiglu_mlp(LayerPass& p, int64_t l) {
  // RMSNorm, gate and up (column-parallel: this rank's features), SwiGLU: one launch where fused.
  p.be.rmsnorm_swiglu(p.x, {WeightKind::FfnNorm, l}, p.xn, {WeightKind::Gate, l}, {WeightKind::Up, l}, p.gate, p.up,
                      p.n_tokens);
  row_parallel_out(p, {WeightKind::Down, l}, p.gate, p.x, /*add_to_out=*/true);  // x += W_down h: all-reduce 2 of 2
}

void transformed_residual(LayerPass& p, WeightRef w, const float* in, std::optional<WeightRef> post_norm, float scale) {
  const int64_t n = p.n_tokens, d = p.config.d_model;
  row_parallel_out(p, w, in, p.xn, /*add_to_out=*/false);
  if (post_norm) p.be.rmsnorm(p.xn, *post_norm, p.xn, n);
  if (scale != 1.0f) p.be.scale(p.xn, scale, n * d);
  p.be.add(p.x, p.xn, n * d);
}

void geglu_hidden(LayerPass& p, int64_t l) {
  p.be.rmsnorm(p.x, {WeightKind::FfnNorm, l}, p.xn, p.n_tokens);
  const MatmulOut gate_up[] = {{{WeightKind::Gate, l}, p.gate}, {{WeightKind::Up, l}, p.up}};
  p.be.matmul_many(gate_up, p.xn, p.n_tokens);
  p.be.geglu(p.gate, p.up, p.gate, p.n_tokens * p.config.d_ff);
}

}  // namespace lio::arch
