// Chapter 02, Task 4: MLA's absorbed attention step (exercises/02_gqa_mla/mla.cpp), graded
// against the naive path (cpu::mla_naive_attention_head: K and V up-projected from every
// latent) on random weights.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu_ops.h"
#include "lio/error.h"
#include "lio/mla.h"

namespace {
using namespace lio;

std::vector<float> rnd(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Absorbed (yours) against naive on one random head; returns the max |difference| relative to
// the output's max |value|.
double compare(const MlaHeadShape& sh, int64_t n_ctx, uint32_t seed) {
  const auto dn = static_cast<size_t>(sh.qk_nope_head_dim), dr = static_cast<size_t>(sh.qk_rope_head_dim);
  const auto dc = static_cast<size_t>(sh.kv_lora_rank), dv = static_cast<size_t>(sh.v_head_dim);
  const std::vector<float> q_nope = rnd(dn, seed), q_pe = rnd(dr, seed + 1);
  const std::vector<float> w_uk = rnd(dn * dc, seed + 2, 1.0f / std::sqrt(static_cast<float>(dc)));
  const std::vector<float> w_uv = rnd(dv * dc, seed + 3, 1.0f / std::sqrt(static_cast<float>(dc)));
  const std::vector<float> lat = rnd(static_cast<size_t>(n_ctx) * (dc + dr), seed + 4);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dn + dr));
  std::vector<float> want(dv), got(dv, NAN);
  cpu::mla_naive_attention_head(q_nope.data(), q_pe.data(), w_uk.data(), w_uv.data(), lat.data(), n_ctx,
                                sh.qk_nope_head_dim, sh.qk_rope_head_dim, sh.kv_lora_rank, sh.v_head_dim, scale,
                                want.data());
  mla_absorbed_attention_head(q_nope, q_pe, w_uk, w_uv, lat, n_ctx, sh, scale, got);
  double err = 0.0, mag = 0.0;
  for (size_t i = 0; i < dv; ++i) {
    err = std::max(err, static_cast<double>(std::fabs(got[i] - want[i])));
    mag = std::max(mag, static_cast<double>(std::fabs(want[i])));
  }
  return std::isfinite(err) ? err / mag : INFINITY;
}

TEST(Ch02Task4, DeepSeekV2LiteHeadMatchesTheNaivePath) {
  // DeepSeek-V2-Lite: qk_nope 128, qk_rope 64, kv_lora_rank 512, v_head_dim 128.
  EXPECT_LT(compare({128, 64, 512, 128}, 37, 1), 1e-4);
}

TEST(Ch02Task4, SmallShapesAndContexts) {
  EXPECT_LT(compare({8, 4, 16, 8}, 1, 10), 1e-5);  // one cached token: out = W_UV c_0
  EXPECT_LT(compare({16, 8, 32, 24}, 100, 20), 1e-4);
  EXPECT_LT(compare({32, 0, 48, 16}, 9, 30), 1e-4);  // no RoPE key at all
}

TEST(Ch02Task4, ValueAndKeyWidthsDiffer) {
  EXPECT_LT(compare({24, 16, 40, 56}, 17, 40), 1e-4);
}

TEST(Ch02Task4, SharpSoftmaxDoesNotOverflow) {
  // Large latents give scores in the hundreds: exp without the max subtracted overflows.
  const MlaHeadShape sh{4, 2, 8, 4};
  std::vector<float> q_nope(4, 10.0f), q_pe(2, 10.0f), w_uk(32, 1.0f), w_uv(32, 0.5f);
  std::vector<float> lat = rnd(3 * 10, 7, 10.0f);
  std::vector<float> want(4), got(4, NAN);
  cpu::mla_naive_attention_head(q_nope.data(), q_pe.data(), w_uk.data(), w_uv.data(), lat.data(), 3, 4, 2, 8, 4,
                                1.0f, want.data());
  mla_absorbed_attention_head(q_nope, q_pe, w_uk, w_uv, lat, 3, sh, 1.0f, got);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(got[i], want[i], 1e-3f * std::fabs(want[i]) + 1e-3f) << i;
}

TEST(Ch02Task4, RejectsSpansThatDisagreeWithTheShape) {
  const MlaHeadShape sh{8, 4, 16, 8};
  std::vector<float> q_nope(8), q_pe(4), w_uk(8 * 16), w_uv(8 * 16), lat(5 * 20), out(8);
  EXPECT_THROW(mla_absorbed_attention_head(q_nope, q_pe, w_uk, w_uv, lat, 6, sh, 1.0f, out), InvalidArgument);
  EXPECT_THROW(mla_absorbed_attention_head(q_nope, q_pe, w_uk, w_uv, lat, 0, sh, 1.0f, out), InvalidArgument);
  std::vector<float> short_uk(8 * 15);
  EXPECT_THROW(mla_absorbed_attention_head(q_nope, q_pe, short_uk, w_uv, lat, 5, sh, 1.0f, out), InvalidArgument);
}

}  // namespace
