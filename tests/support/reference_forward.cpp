// reference_forward.cpp — the Llama equations in double precision (reference_forward.h).
#include "reference_forward.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace lio::testing {

std::vector<double> reference_logits(const TinyModelSpec& s, const std::vector<int32_t>& tokens) {
  const auto t = lio::testing::make_tiny_tensors(s);
  const int64_t n = static_cast<int64_t>(tokens.size()), d = s.d_model, hd = s.head_dim;
  const int64_t V = s.vocab_size();
  auto W = [&](const std::string& name) -> const std::vector<float>& { return t.get(name); };
  auto matvec = [](const std::vector<float>& w, const std::vector<double>& x, int64_t rows) {
    const int64_t cols = static_cast<int64_t>(x.size());
    std::vector<double> y(rows, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) y[r] += double(w[r * cols + c]) * x[c];
    return y;
  };
  auto rmsnorm = [&](const std::vector<double>& x, const std::vector<float>& g) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / double(x.size()) + s.rms_norm_eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * g[i];
    return y;
  };
  auto rope = [&](std::vector<double>& v, int64_t heads, int64_t pos) {
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < hd / 2; ++i) {
        const double ang = pos * std::pow(double(s.rope_theta), -2.0 * i / hd);
        double& a = v[h * hd + i];
        double& b = v[h * hd + i + hd / 2];
        const double a0 = a, b0 = b;
        a = a0 * std::cos(ang) - b0 * std::sin(ang);
        b = a0 * std::sin(ang) + b0 * std::cos(ang);
      }
  };
  std::vector<std::vector<double>> x(n, std::vector<double>(d));
  const auto& emb = W("model.embed_tokens.weight");
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c) x[i][c] = emb[tokens[i] * d + c];
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<std::vector<double>> q(n), k(n), v(n);
    for (int64_t i = 0; i < n; ++i) {
      auto xn = rmsnorm(x[i], W(p + "input_layernorm.weight"));
      q[i] = matvec(W(p + "self_attn.q_proj.weight"), xn, s.n_heads * hd);
      k[i] = matvec(W(p + "self_attn.k_proj.weight"), xn, s.n_kv_heads * hd);
      v[i] = matvec(W(p + "self_attn.v_proj.weight"), xn, s.n_kv_heads * hd);
      rope(q[i], s.n_heads, i);
      rope(k[i], s.n_kv_heads, i);
    }
    for (int64_t i = 0; i < n; ++i) {
      std::vector<double> att(s.n_heads * hd, 0.0);
      for (int64_t h = 0; h < s.n_heads; ++h) {
        const int64_t g = h / (s.n_heads / s.n_kv_heads);
        std::vector<double> sc(i + 1);
        double mx = -1e300, den = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < hd; ++e) dot += q[i][h * hd + e] * k[j][g * hd + e];
          sc[j] = dot / std::sqrt(double(hd));
          mx = std::max(mx, sc[j]);
        }
        for (auto& e : sc) den += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t e = 0; e < hd; ++e) att[h * hd + e] += sc[j] / den * v[j][g * hd + e];
      }
      auto o = matvec(W(p + "self_attn.o_proj.weight"), att, d);
      for (int64_t c = 0; c < d; ++c) x[i][c] += o[c];
      auto xn = rmsnorm(x[i], W(p + "post_attention_layernorm.weight"));
      auto gate = matvec(W(p + "mlp.gate_proj.weight"), xn, s.d_ff);
      auto up = matvec(W(p + "mlp.up_proj.weight"), xn, s.d_ff);
      for (int64_t f = 0; f < s.d_ff; ++f) gate[f] = gate[f] / (1.0 + std::exp(-gate[f])) * up[f];
      auto down = matvec(W(p + "mlp.down_proj.weight"), gate, d);
      for (int64_t c = 0; c < d; ++c) x[i][c] += down[c];
    }
  }
  const auto& head = s.tied_embeddings ? emb : W("lm_head.weight");
  std::vector<double> logits;
  for (int64_t i = 0; i < n; ++i) {
    auto xn = rmsnorm(x[i], W("model.norm.weight"));
    auto row = matvec(head, xn, V);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

}  // namespace lio::testing
