// mla.cpp — CPU pieces of multi-head latent attention (DeepSeek-V2 sec. 2.1): RoPE with
// explicit frequencies, and the naive (up-projecting) attention of one head.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cpu_ops.h"
#include "lio/error.h"

namespace lio::cpu {
float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {};  // 8 partial sums: one SIMD register, no serial dependency
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

void rope_freqs(float* x, int64_t pos, int64_t n_vecs, int64_t stride, int64_t dim, const float* inv_freq) {
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double angle = static_cast<double>(pos) * static_cast<double>(inv_freq[i]);
    const auto c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
    for (int64_t v = 0; v < n_vecs; ++v) {
      float* p = x + v * stride + 2 * i;
      const float a = p[0], b = p[1];
      p[0] = a * c - b * s;
      p[1] = a * s + b * c;
    }
  }
}

void mla_attention_head_expanded(const float* q_nope, const float* q_pe, const float* k_nope, int64_t k_stride,
                                 const float* kpe, int64_t kpe_stride, const float* v, int64_t v_stride,
                                 int64_t n_ctx, int64_t d_nope, int64_t d_rope, int64_t d_v, float scale, float* out) {
  if (n_ctx < 1) throw InvalidArgument("mla_attention_head_expanded: n_ctx must be >= 1, got " + std::to_string(n_ctx));
  std::vector<float> s(static_cast<size_t>(n_ctx));
  float mx = -INFINITY;
  for (int64_t j = 0; j < n_ctx; ++j) {
    s[static_cast<size_t>(j)] = scale * (dot(q_nope, k_nope + j * k_stride, d_nope) + dot(q_pe, kpe + j * kpe_stride, d_rope));
    mx = std::max(mx, s[static_cast<size_t>(j)]);
  }
  float sum = 0.0f;
  for (float& e : s) sum += (e = std::exp(e - mx));
  std::fill_n(out, d_v, 0.0f);
  for (int64_t j = 0; j < n_ctx; ++j) {
    const float p = s[static_cast<size_t>(j)] / sum;
    const float* vj = v + j * v_stride;
    for (int64_t d = 0; d < d_v; ++d) out[d] += p * vj[d];
  }
}

void mla_naive_attention_head(const float* q_nope, const float* q_pe, const float* w_uk, const float* w_uv,
                              const float* latents, int64_t n_ctx, int64_t d_nope, int64_t d_rope, int64_t d_c,
                              int64_t d_v, float scale, float* out) {
  if (n_ctx < 1 || d_nope < 1 || d_c < 1 || d_v < 1 || d_rope < 0) {
    throw InvalidArgument("mla_naive_attention_head: need n_ctx, d_nope, d_c, d_v >= 1 and d_rope >= 0");
  }
  const int64_t row = d_c + d_rope;
  std::vector<float> k(static_cast<size_t>(n_ctx * d_nope)), v(static_cast<size_t>(n_ctx * d_v));
  for (int64_t j = 0; j < n_ctx; ++j) {
    const float* c = latents + j * row;
    for (int64_t i = 0; i < d_nope; ++i) {  // k_j = W_UK c_j
      float acc = 0.0f;
      for (int64_t t = 0; t < d_c; ++t) acc += w_uk[i * d_c + t] * c[t];
      k[static_cast<size_t>(j * d_nope + i)] = acc;
    }
    for (int64_t i = 0; i < d_v; ++i) {  // v_j = W_UV c_j
      float acc = 0.0f;
      for (int64_t t = 0; t < d_c; ++t) acc += w_uv[i * d_c + t] * c[t];
      v[static_cast<size_t>(j * d_v + i)] = acc;
    }
  }
  mla_attention_head_expanded(q_nope, q_pe, k.data(), d_nope, latents + d_c, row, v.data(), d_v, n_ctx, d_nope,
                              d_rope, d_v, scale, out);
}

}  // namespace lio::cpu
