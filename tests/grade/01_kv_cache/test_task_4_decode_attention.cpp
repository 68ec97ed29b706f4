// Chapter 01, Task 4: one query over the cached prefix, GQA-aware
// (exercises/01_kv_cache/decode_attention.cpp), against a double-precision reference.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "attention_reference.h"
#include "cpu_ops.h"
#include "lio/error.h"

namespace {

struct Shape {
  int64_t n_ctx, n_heads, n_kv_heads, head_dim;
};

std::vector<double> reference(const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, Shape s, double scale) {
  std::vector<double> out(s.n_heads * s.head_dim, 0.0);
  for (int64_t h = 0; h < s.n_heads; ++h) {
    const int64_t g = h / (s.n_heads / s.n_kv_heads);
    std::vector<double> w(s.n_ctx);
    double mx = -1e300, den = 0;
    for (int64_t j = 0; j < s.n_ctx; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < s.head_dim; ++d)
        dot += double(q[h * s.head_dim + d]) * k[(j * s.n_kv_heads + g) * s.head_dim + d];
      w[j] = dot * scale;
      mx = std::max(mx, w[j]);
    }
    for (double& x : w) den += (x = std::exp(x - mx));
    for (int64_t j = 0; j < s.n_ctx; ++j)
      for (int64_t d = 0; d < s.head_dim; ++d)
        out[h * s.head_dim + d] += w[j] / den * v[(j * s.n_kv_heads + g) * s.head_dim + d];
  }
  return out;
}

class Ch01Task4 : public ::testing::TestWithParam<Shape> {};

TEST_P(Ch01Task4, MatchesReference) {
  const Shape s = GetParam();
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.5f);
  std::vector<float> q(s.n_heads * s.head_dim), k(s.n_ctx * s.n_kv_heads * s.head_dim), v(k.size());
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = dist(rng);
  std::vector<float> out(q.size(), 0.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  lio::cpu::decode_attention(q.data(), k.data(), v.data(), out.data(), s.n_ctx, s.n_heads,
                             s.n_kv_heads, s.head_dim, scale);
  const auto ref = reference(q, k, v, s, scale);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-5) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(Shapes, Ch01Task4,
                         ::testing::Values(Shape{1, 4, 4, 16},      // first token: MHA
                                           Shape{57, 9, 3, 64},     // SmolLM2's GQA 3:1
                                           Shape{200, 8, 1, 32},    // MQA
                                           Shape{33, 32, 8, 128})); // Llama-3-style 4:1

TEST(Ch01Task4Contract, AgreesWithPrefillAttentionOnTheLastPosition) {
  // The decode step must give what the reference causal attention (attention_reference.h, the
  // oracle every attention kernel is tested against) gives for the newest token.
  const int64_t n_ctx = 24, n_heads = 6, n_kv = 2, hd = 16;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(n_heads * hd), k(n_ctx * n_kv * hd), v(k.size()), a(q.size()), b(q.size());
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = dist(rng);
  lio::cpu::decode_attention(q.data(), k.data(), v.data(), a.data(), n_ctx, n_heads, n_kv, hd, 0.25f);
  lio::cpu::attention_reference(q.data(), k.data(), v.data(), b.data(), 1, n_ctx - 1, n_heads, n_kv,
                                hd, 0.25f);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5);
}

TEST(Ch01Task4Contract, ScoresTooLargeForExpStayFinite) {
  // Scores near 1,000: exp overflows f32 past 88.7, so a softmax that does not shift them
  // returns inf / inf = NaN. The answer is still an ordinary weighted mean of the values.
  const Shape s{40, 4, 2, 16};
  std::mt19937 rng(23);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(s.n_heads * s.head_dim), k(s.n_ctx * s.n_kv_heads * s.head_dim), v(k.size());
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = dist(rng);
  for (float& e : q) e *= 250.0f;
  std::vector<float> out(q.size(), 0.0f);
  lio::cpu::decode_attention(q.data(), k.data(), v.data(), out.data(), s.n_ctx, s.n_heads, s.n_kv_heads,
                             s.head_dim, 0.25f);
  const auto ref = reference(q, k, v, s, 0.25);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(std::isfinite(out[i])) << "element " << i << " is " << out[i];
    ASSERT_NEAR(out[i], ref[i], 1e-4) << "element " << i;
  }
}

TEST(Ch01Task4Contract, RejectsBadShapes) {
  std::vector<float> buf(256, 1.0f);
  EXPECT_THROW(lio::cpu::decode_attention(buf.data(), buf.data(), buf.data(), buf.data(), 0, 4, 2, 8, 1.0f),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cpu::decode_attention(buf.data(), buf.data(), buf.data(), buf.data(), 4, 6, 4, 8, 1.0f),
               lio::InvalidArgument);
}

}  // namespace
