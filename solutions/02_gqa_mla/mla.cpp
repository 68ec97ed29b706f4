// Chapter 02, Tasks 2 and 4 — reference solution. Declarations: common/model/include/lio/mla.h.
#include "lio/mla.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cpu_ops.h"
#include "lio/error.h"

namespace lio {
// ---- Task 2 -----------------------------------------------------------------------------------

int64_t mla_latent_bytes_per_token(const ModelConfig& config, int64_t bytes_per_elem) {
  if (!config.is_mla() || config.n_layers < 1 || config.qk_rope_head_dim < 0 || bytes_per_elem < 1) {
    throw InvalidArgument("mla_latent_bytes_per_token: need an MLA config (kv_lora_rank >= 1), n_layers >= 1, "
                          "qk_rope_head_dim >= 0 and bytes_per_elem >= 1, got kv_lora_rank " +
                          std::to_string(config.kv_lora_rank) + ", n_layers " + std::to_string(config.n_layers) +
                          ", qk_rope_head_dim " + std::to_string(config.qk_rope_head_dim) + ", bytes_per_elem " +
                          std::to_string(bytes_per_elem));
  }
  // One latent per layer serves as every head's K and V (no factor 2, no head count), plus the
  // one RoPE key all heads share (RoPE cannot be absorbed, so it stays outside the latent):
  // n_layers * (d_c + d_h^R) * bytes_per_elem.
  return config.n_layers * (config.kv_lora_rank + config.qk_rope_head_dim) * bytes_per_elem;
}

// ---- Task 4 -----------------------------------------------------------------------------------

void mla_absorbed_attention_head(std::span<const float> q_nope, std::span<const float> q_pe,
                                 std::span<const float> w_uk, std::span<const float> w_uv,
                                 std::span<const float> latents, int64_t n_ctx, const MlaHeadShape& sh,
                                 float scale, std::span<float> out) {
  const int64_t dn = sh.qk_nope_head_dim, dr = sh.qk_rope_head_dim, dc = sh.kv_lora_rank, dv = sh.v_head_dim;
  const int64_t row = dc + dr;
  auto size = [](auto s) { return static_cast<int64_t>(s.size()); };
  if (n_ctx < 1 || dn < 1 || dc < 1 || dv < 1 || dr < 0 || size(q_nope) != dn || size(q_pe) != dr ||
      size(w_uk) != dn * dc || size(w_uv) != dv * dc || size(latents) < n_ctx * row || size(out) != dv) {
    throw InvalidArgument("mla_absorbed_attention_head: spans disagree with the shape (d_nope " + std::to_string(dn) +
                          ", d_R " + std::to_string(dr) + ", d_c " + std::to_string(dc) + ", d_v " +
                          std::to_string(dv) + ", n_ctx " + std::to_string(n_ctx) + ")");
  }
  // q_lat = W_UK^T q_nope: the key up-projection moved onto the query, once per head.
  std::vector<float> q_lat(static_cast<size_t>(dc), 0.0f);
  for (int64_t i = 0; i < dn; ++i)
    for (int64_t t = 0; t < dc; ++t) q_lat[static_cast<size_t>(t)] += q_nope[static_cast<size_t>(i)] * w_uk[static_cast<size_t>(i * dc + t)];
  // Scores straight against the cached latents and the shared RoPE key.
  std::vector<float> s(static_cast<size_t>(n_ctx));
  float mx = -INFINITY;
  for (int64_t j = 0; j < n_ctx; ++j) {
    const float* c = latents.data() + j * row;
    s[static_cast<size_t>(j)] = scale * (cpu::dot(q_lat.data(), c, dc) + cpu::dot(q_pe.data(), c + dc, dr));
    mx = std::max(mx, s[static_cast<size_t>(j)]);
  }
  float sum = 0.0f;
  for (float& e : s) sum += (e = std::exp(e - mx));
  // o_lat = sum_j p_j c_j, then the value up-projection once: out = W_UV o_lat.
  std::vector<float> o_lat(static_cast<size_t>(dc), 0.0f);
  for (int64_t j = 0; j < n_ctx; ++j) {
    const float p = s[static_cast<size_t>(j)] / sum;
    const float* c = latents.data() + j * row;
    for (int64_t t = 0; t < dc; ++t) o_lat[static_cast<size_t>(t)] += p * c[t];
  }
  for (int64_t i = 0; i < dv; ++i) out[static_cast<size_t>(i)] = cpu::dot(w_uv.data() + i * dc, o_lat.data(), dc);
}

}  // namespace lio
