// Chapter 01, Task 5 — reference solution: one Llama decoder layer over the paged KV cache
// (contract: common/model/include/lio/decoder_layer.h).
#include "lio/decoder_layer.h"

#include "lio/backend.h"
#include "lio/model_config.h"

namespace lio {

void llama_decoder_layer(LayerPass& p, int64_t l) {
  Backend& be = p.be;
  const int64_t n = p.n_tokens;
  const ModelConfig& c = p.config;
  // Attention half: h = x + W_o Attn(RoPE(q), RoPE(k), v), (q, k, v) from RMSNorm(x).
  const MatmulOut qkv[] = {{{WeightKind::Wq, l}, p.q}, {{WeightKind::Wk, l}, p.k}, {{WeightKind::Wv, l}, p.v}};
  be.rmsnorm_matmul_many(p.x, {WeightKind::AttnNorm, l}, p.xn, qkv, n);
  be.rope_qk(p.q, p.k, p.view.positions, n, c.n_heads, c.n_kv_heads, c.layer_rope_theta(l));
  be.kv_append(p.pool, l, p.k, p.v, p.view);  // this step's keys and values join the cache first
  be.attention(p.pool, l, p.q, p.attn, p.view);
  be.matmul({WeightKind::Wo, l}, p.attn, p.x, n, /*accumulate=*/true);
  // MLP half: y = h + W_down (silu(W_gate RMSNorm(h)) * W_up RMSNorm(h)).
  be.rmsnorm_swiglu(p.x, {WeightKind::FfnNorm, l}, p.xn, {WeightKind::Gate, l}, {WeightKind::Up, l}, p.gate, p.up,
                    n);
  be.matmul({WeightKind::Down, l}, p.gate, p.x, n, /*accumulate=*/true);
}

}  // namespace lio
