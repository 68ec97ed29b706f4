// Chapter 08, Task 6 — reference solution: one Llama decoder layer on one rank of a tensor-
// parallel group (contract: common/model/include/lio/tp_decoder_layer.h).
#include "lio/tp_decoder_layer.h"

#include "lio/backend.h"
#include "lio/model_config.h"

namespace lio {

void tp_decoder_layer(LayerPass& p, int64_t l) {
  Backend& be = p.be;
  const int64_t n = p.n_tokens;
  const ModelConfig& c = p.config;  // this rank's shard: its heads, KV heads and d_ff features
  const int64_t width = n * c.d_model;
  // Every rank holds the same x. Only rank 0 keeps it under its partial product; the others
  // overwrite x with theirs. The group's sum is then x + p_0 + ... + p_{N-1}: x counted once.
  const bool keep_residual = p.tp.rank == 0;
  // Attention half, column-parallel up to W_o: this rank's heads, no communication.
  const MatmulOut qkv[] = {{{WeightKind::Wq, l}, p.q}, {{WeightKind::Wk, l}, p.k}, {{WeightKind::Wv, l}, p.v}};
  be.rmsnorm_matmul_many(p.x, {WeightKind::AttnNorm, l}, p.xn, qkv, n);
  be.rope_qk(p.q, p.k, p.view.positions, n, c.n_heads, c.n_kv_heads, c.layer_rope_theta(l));
  be.kv_append(p.pool, l, p.k, p.v, p.view);
  be.attention(p.pool, l, p.q, p.attn, p.view);
  be.matmul({WeightKind::Wo, l}, p.attn, p.x, n, /*accumulate=*/keep_residual);  // row-parallel W_o
  p.tp.all_reduce(p.x, width);  // all-reduce 1 of 2: h = x + attn W_o^T on every rank
  // MLP half: gate and up column-parallel (this rank's d_ff features), Down row-parallel.
  be.rmsnorm_swiglu(p.x, {WeightKind::FfnNorm, l}, p.xn, {WeightKind::Gate, l}, {WeightKind::Up, l}, p.gate, p.up,
                    n);
  be.matmul({WeightKind::Down, l}, p.gate, p.x, n, /*accumulate=*/keep_residual);
  p.tp.all_reduce(p.x, width);  // all-reduce 2 of 2: y = h + MLP(h) on every rank
}

}  // namespace lio
