// Chapter 07's CPU kernels: cpu::flash_attention (tiled, online softmax, split-KV) and its naive
// twin cpu::naive_attention against the reference cpu::paged_attention_reference (a third,
// independent loop), over shapes that hit every edge: one query, a query tile minus and plus
// one, 8,192 tokens, head dims 64 and 128, GQA groups 1, 3 and 8, causal and not, scattered
// block tables, f16 and int8 pools; logsumexp; split-KV merged vs one pass (bitwise); batch
// invariance (bitwise). Tolerance: f32 outputs of O(1) values within 2e-5 absolute (the three
// loops sum in different orders, and the flash path's exp is a polynomial within 3e-7).
#include <gtest/gtest.h>
#include "lio/omp_compat.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attention_reference.h"
#include "flash_attention.h"
#include "lio/dtype.h"
#include "lio/error.h"
#include "paged_layout.h"
#include "sanitizer.h"

namespace {

using lio::cpu::AttentionBatch;
using lio::cpu::AttentionShape;
using lio::cpu::KvElement;
using lio::cpu::PagedKvLayer;

constexpr float kTol = 2e-5f;

/// A random batch: sequences of (cached, new) tokens, a pool with scattered (shuffled) blocks.
struct Case {
  AttentionShape shape;
  int64_t block_size = 16;
  std::vector<std::pair<int64_t, int64_t>> seqs;  // (cached tokens, new tokens)
  std::vector<int32_t> qsl, seq_lens, tables;
  int64_t max_blocks = 0, n_tokens = 0, n_slots = 0;
  std::vector<float> q, k, v;

  Case(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, std::vector<std::pair<int64_t, int64_t>> s,
       uint32_t seed = 7, int64_t bs = 16)
      : block_size(bs), seqs(std::move(s)) {
    shape = AttentionShape{n_heads, n_kv_heads, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim))};
    std::vector<lio::testing::SeqSpec> specs;
    for (auto [cached, fresh] : seqs) specs.push_back({static_cast<int32_t>(cached), static_cast<int32_t>(fresh)});
    // Scattered: blocks handed out in a shuffled order, a few spare ones nobody owns.
    const lio::testing::PagedLayout l = lio::testing::scattered_layout(specs, bs, seed);
    qsl = l.query_start_loc, seq_lens = l.seq_lens, tables = l.block_tables;
    max_blocks = l.max_blocks_per_seq, n_tokens = l.n_tokens, n_slots = l.n_slots;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const int64_t kvd = n_kv_heads * head_dim;
    k.resize(static_cast<size_t>(n_slots * kvd));
    v.resize(k.size());
    q.resize(static_cast<size_t>(n_tokens * n_heads * head_dim));
    for (float& x : k) x = u(rng);
    for (float& x : v) x = u(rng);
    for (float& x : q) x = 2.0f * u(rng);
  }
  AttentionBatch batch(bool causal = true) const {
    return AttentionBatch{qsl.data(), seq_lens.data(), tables.data(), static_cast<int64_t>(seqs.size()), max_blocks,
                          block_size, causal};
  }
  PagedKvLayer kv() const { return PagedKvLayer{KvElement::F32, k.data(), v.data(), nullptr, nullptr}; }
  size_t out_size() const { return q.size(); }
};

std::vector<float> run_flash(const Case& c, bool causal = true, std::vector<float>* lse = nullptr, bool split = true) {
  std::vector<float> out(c.out_size(), NAN);
  lio::cpu::FlashWorkspace ws;
  if (lse) lse->assign(static_cast<size_t>(c.n_tokens * c.shape.n_heads), NAN);
  lio::cpu::flash_attention(c.q.data(), c.kv(), out.data(), lse ? lse->data() : nullptr, c.batch(causal), c.shape, ws,
                            lio::cpu::FlashOptions{split});
  return out;
}

std::vector<float> run_naive(const Case& c, bool causal = true, std::vector<float>* lse = nullptr) {
  std::vector<float> out(c.out_size(), NAN), scores;
  if (lse) lse->assign(static_cast<size_t>(c.n_tokens * c.shape.n_heads), NAN);
  lio::cpu::naive_attention(c.q.data(), c.kv(), out.data(), lse ? lse->data() : nullptr, c.batch(causal), c.shape,
                            scores);
  return out;
}

std::vector<float> run_reference(const Case& c) {
  std::vector<float> out(c.out_size(), NAN);
  lio::cpu::paged_attention_reference(c.q.data(), c.k.data(), c.v.data(), out.data(), c.qsl.data(),
                                      c.seq_lens.data(), c.tables.data(), static_cast<int64_t>(c.seqs.size()),
                                      c.max_blocks, c.block_size, c.shape.n_heads, c.shape.n_kv_heads,
                                      c.shape.head_dim, c.shape.scale);
  return out;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    m = std::max(m, std::fabs(a[i] - b[i]));
  }
  return m;
}

struct ShapeParam {
  int64_t n_heads, n_kv_heads, head_dim;
};

class FlashVsReference : public ::testing::TestWithParam<ShapeParam> {};

TEST_P(FlashVsReference, EdgeQueryLengthsMatchTheReferenceAndTheNaiveTwin) {
  const ShapeParam p = GetParam();
  const int64_t br = lio::cpu::kFlashQueryTile, bc = lio::cpu::kFlashKeyTile;
  // Prefill from empty, chunks after a cache, decode rows, tile edges and a split edge.
  const Case c(p.n_heads, p.n_kv_heads, p.head_dim,
               {{0, 1}, {0, br - 1}, {0, br + 1}, {5, br}, {bc - 1, 1}, {bc, 1}, {lio::cpu::kFlashKvSplit, 1},
                {lio::cpu::kFlashKvSplit - 3, 2 * br + 5}, {700, 1}, {0, 130}});
  const std::vector<float> ref = run_reference(c);
  EXPECT_LT(max_abs_diff(run_flash(c), ref), kTol);
  EXPECT_LT(max_abs_diff(run_flash(c, true, nullptr, false), ref), kTol);
  EXPECT_LT(max_abs_diff(run_naive(c), ref), kTol);
}

TEST_P(FlashVsReference, NotCausalMatchesTheNaiveTwinAndLogsumexpMatches) {
  const ShapeParam p = GetParam();
  const Case c(p.n_heads, p.n_kv_heads, p.head_dim, {{0, 17}, {40, 3}, {0, 1}, {600, 9}}, 11);
  std::vector<float> lse_f, lse_n;
  EXPECT_LT(max_abs_diff(run_flash(c, false, &lse_f), run_naive(c, false, &lse_n)), kTol);
  EXPECT_LT(max_abs_diff(lse_f, lse_n), 1e-5f);
  // Causal logsumexp against a direct sum for one row: the last row of sequence 1, head 0.
  std::vector<float> lse_c;
  run_flash(c, true, &lse_c);
  const int64_t row = c.qsl[2] - 1, n_keys = c.seq_lens[1], d = p.head_dim, kvd = p.n_kv_heads * d;
  double m = -INFINITY, sum = 0.0;
  std::vector<double> s(static_cast<size_t>(n_keys));
  for (int64_t j = 0; j < n_keys; ++j) {
    const int64_t slot = c.tables[1 * c.max_blocks + j / c.block_size] * c.block_size + j % c.block_size;
    double dot = 0.0;
    for (int64_t e = 0; e < d; ++e) dot += double(c.q[(row * p.n_heads) * d + e]) * c.k[slot * kvd + e];
    s[j] = dot * c.shape.scale;
    m = std::max(m, s[j]);
  }
  for (double x : s) sum += std::exp(x - m);
  EXPECT_NEAR(lse_c[row * p.n_heads], m + std::log(sum), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(HeadDimsAndGroups, FlashVsReference,
                         ::testing::Values(ShapeParam{3, 3, 64}, ShapeParam{9, 3, 64}, ShapeParam{8, 1, 64},
                                           ShapeParam{4, 4, 128}, ShapeParam{6, 2, 128}, ShapeParam{16, 2, 128}),
                         [](const auto& info) {
                           return "h" + std::to_string(info.param.n_heads) + "kv" + std::to_string(info.param.n_kv_heads) +
                                  "d" + std::to_string(info.param.head_dim);
                         });

/// Windowed causal attention written directly from its definition (Longformer sec. 3.1): row i
/// of sequence s at position p attends to keys max(0, p - window + 1) .. p, each score soft-capped
/// to softcap * tanh(s / softcap) when softcap > 0 (Gemma 2, sec. 2). Shares no code with the
/// kernels; in double.
std::vector<float> windowed_reference(const Case& c, int64_t window, double softcap = 0.0) {
  const AttentionShape& sh = c.shape;
  const int64_t d = sh.head_dim, group = sh.n_heads / sh.n_kv_heads, kvd = sh.n_kv_heads * d;
  std::vector<float> out(c.out_size(), 0.0f);
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const int64_t q0 = c.qsl[s], qlen = c.qsl[s + 1] - q0, first_pos = c.seq_lens[s] - qlen;
    for (int64_t i = 0; i < qlen; ++i) {
      const int64_t p = first_pos + i, lo = std::max<int64_t>(0, p - window + 1);
      for (int64_t h = 0; h < sh.n_heads; ++h) {
        const float* qv = c.q.data() + ((q0 + i) * sh.n_heads + h) * d;
        std::vector<double> w;
        double mx = -INFINITY;
        for (int64_t j = lo; j <= p; ++j) {
          const int64_t slot = int64_t{c.tables[s * c.max_blocks + j / c.block_size]} * c.block_size + j % c.block_size;
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += double(qv[e]) * c.k[slot * kvd + (h / group) * d + e];
          w.push_back(softcap > 0 ? softcap * std::tanh(dot * sh.scale / softcap) : dot * sh.scale);
          mx = std::max(mx, w.back());
        }
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - mx));
        float* o = out.data() + ((q0 + i) * sh.n_heads + h) * d;
        for (int64_t j = lo; j <= p; ++j) {
          const int64_t slot = int64_t{c.tables[s * c.max_blocks + j / c.block_size]} * c.block_size + j % c.block_size;
          for (int64_t e = 0; e < d; ++e) o[e] += float(w[j - lo] / sum * c.v[slot * kvd + (h / group) * d + e]);
        }
      }
    }
  }
  return out;
}

// Sliding-window attention (Gemma 3's local layers): flash (split and one pass) and the naive twin
// against the definition, for windows around the key tile (64) and smaller than a query tile
// (16), on prefills, a chunk after a cached prefix and decode rows; the flash kernel gathers no key
// tile wholly before a row tile's window.
TEST(FlashAttention, SlidingWindowMatchesItsDefinitionAndSkipsTiles) {
  for (const int64_t window : {1, 5, 16, 63, 64, 65, 512}) {
    Case c(6, 2, 64, {{0, 300}, {700, 1}, {500, 40}, {1200, 1}}, 11);
    c.shape.window = window;
    const std::vector<float> want = windowed_reference(c, window);
    EXPECT_LT(max_abs_diff(run_flash(c, true, nullptr, true), want), kTol) << "window " << window;
    EXPECT_LT(max_abs_diff(run_flash(c, true, nullptr, false), want), kTol) << "window " << window << " one pass";
    EXPECT_LT(max_abs_diff(run_naive(c), want), kTol) << "window " << window << " naive";
    lio::cpu::FlashWorkspace ws;
    std::vector<float> out(c.out_size());
    const auto windowed = lio::cpu::flash_attention(c.q.data(), c.kv(), out.data(), nullptr, c.batch(), c.shape, ws);
    c.shape.window = 0;
    const auto full = lio::cpu::flash_attention(c.q.data(), c.kv(), out.data(), nullptr, c.batch(), c.shape, ws);
    EXPECT_EQ(full.window_skipped_tiles, 0);
    EXPECT_GT(windowed.window_skipped_tiles, 0) << "window " << window;
    EXPECT_EQ(windowed.key_tiles + windowed.window_skipped_tiles, full.key_tiles) << "window " << window;
  }
}

// Gemma 2's attention logit soft-capping: flash (split and one pass) and the naive twin against
// the definition, with and without a window, at caps that bend the scores (1, 3: q is drawn
// from U(-2, 2), so scale * q.k reaches ~5) and one that barely does (50, as the real models);
// a cap of 1 changes the output well past the tolerance, so a kernel that ignored it would fail.
TEST(FlashAttention, SoftCapMatchesItsDefinitionInBothKernels) {
  for (const float cap : {1.0f, 3.0f, 50.0f}) {
    for (const int64_t window : {0, 16}) {
      Case c(6, 2, 64, {{0, 300}, {700, 1}, {500, 40}, {90, 1}}, 13);
      c.shape.window = window;
      c.shape.softcap = cap;
      const std::vector<float> want = windowed_reference(c, window == 0 ? int64_t{1} << 40 : window, cap);
      const std::string at = "cap " + std::to_string(cap) + " window " + std::to_string(window);
      EXPECT_LT(max_abs_diff(run_flash(c, true, nullptr, true), want), kTol) << at;
      EXPECT_LT(max_abs_diff(run_flash(c, true, nullptr, false), want), kTol) << at << " one pass";
      EXPECT_LT(max_abs_diff(run_naive(c), want), kTol) << at << " naive";
      if (cap == 1.0f) {
        c.shape.softcap = 0.0f;
        EXPECT_GT(max_abs_diff(run_flash(c), want), 100 * kTol) << at << ": the cap made no difference";
      }
    }
  }
  Case bad(4, 2, 32, {{0, 4}});
  bad.shape.softcap = -1.0f;
  EXPECT_THROW(run_flash(bad), lio::InvalidArgument);
  EXPECT_THROW(run_naive(bad), lio::InvalidArgument);
}

TEST(FlashAttention, EightThousandTokenPrefillMatchesTheNaiveTwin) {
  if (lio::test::kAddressSanitizer)
    GTEST_SKIP() << "the 8,192-token case runs in the default build (minutes under ASan)";
  const Case c(1, 1, 64, {{0, 8192}}, 3, 16);
  std::vector<float> lse_f, lse_n;
  const std::vector<float> naive = run_naive(c, true, &lse_n);
  EXPECT_LT(max_abs_diff(run_flash(c, true, &lse_f), naive), kTol);
  EXPECT_LT(max_abs_diff(lse_f, lse_n), 1e-5f);
}

TEST(FlashAttention, DecodeAtEightThousandTokensSplitEqualsOnePassBitwise) {
  const Case c(9, 3, 64, {{8191, 1}, {3000, 1}}, 5);
  const std::vector<float> split = run_flash(c, true, nullptr, true), one = run_flash(c, true, nullptr, false);
  EXPECT_EQ(0, std::memcmp(split.data(), one.data(), split.size() * sizeof(float)));
  EXPECT_LT(max_abs_diff(split, run_reference(c)), kTol);
}

TEST(FlashAttention, ARowsResultDoesNotDependOnItsBatch) {
  // Sequence A alone, then A beside two others: A's rows are bitwise equal. And a prefill's
  // last row equals the same position computed as a decode row.
  const Case alone(9, 3, 64, {{37, 20}}, 21);
  Case mixed(9, 3, 64, {{500, 3}, {37, 20}, {0, 64}}, 22);
  // Copy alone's K/V and queries into mixed's sequence 1.
  const int64_t kvd = 3 * 64, qd = 9 * 64;
  for (int64_t j = 0; j < 57; ++j) {
    const int64_t sa = alone.tables[j / 16] * 16 + j % 16, sm = mixed.tables[1 * mixed.max_blocks + j / 16] * 16 + j % 16;
    std::copy_n(alone.k.begin() + sa * kvd, kvd, mixed.k.begin() + sm * kvd);
    std::copy_n(alone.v.begin() + sa * kvd, kvd, mixed.v.begin() + sm * kvd);
  }
  std::copy_n(alone.q.begin(), 20 * qd, mixed.q.begin() + 3 * qd);
  const std::vector<float> a = run_flash(alone), m = run_flash(mixed);
  EXPECT_EQ(0, std::memcmp(a.data(), m.data() + 3 * qd, 20 * qd * sizeof(float)));
  // The last row of `alone` as a decode row over 56 cached tokens.
  Case decode(9, 3, 64, {{56, 1}}, 21);
  decode.k = alone.k, decode.v = alone.v, decode.tables = alone.tables, decode.max_blocks = alone.max_blocks;
  std::copy_n(alone.q.begin() + 19 * qd, qd, decode.q.begin());
  const std::vector<float> d = run_flash(decode);
  EXPECT_EQ(0, std::memcmp(d.data(), a.data() + 19 * qd, qd * sizeof(float)));
}

TEST(FlashAttention, ThreadCountDoesNotChangeTheBits) {
  const Case c(9, 3, 64, {{100, 40}, {900, 1}}, 9);
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> one = run_flash(c);
  omp_set_num_threads(std::max(2, before));
  const std::vector<float> many = run_flash(c);
  omp_set_num_threads(before);
  EXPECT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * sizeof(float)));
}

TEST(FlashAttention, F16AndInt8PoolsEqualF32PoolsOfTheirValues) {
  Case c(6, 2, 64, {{90, 1}, {0, 33}}, 13);
  const int64_t kvd = 2 * 64;
  std::vector<uint16_t> k16(c.k.size()), v16(c.v.size());
  std::vector<int8_t> k8(c.k.size()), v8(c.v.size());
  std::vector<float> ks(static_cast<size_t>(c.n_slots * 2)), vs(ks.size());
  Case as16 = c, as8 = c;
  for (size_t i = 0; i < c.k.size(); ++i) {
    k16[i] = lio::f32_to_f16(c.k[i]), v16[i] = lio::f32_to_f16(c.v[i]);
    as16.k[i] = lio::f16_to_f32(k16[i]), as16.v[i] = lio::f16_to_f32(v16[i]);
  }
  for (int64_t slot = 0; slot < c.n_slots; ++slot) {
    for (int64_t g = 0; g < 2; ++g) {
      const size_t at = static_cast<size_t>(slot * kvd + g * 64), si = static_cast<size_t>(slot * 2 + g);
      ks[si] = 1.0f / 127, vs[si] = 1.0f / 127;
      for (size_t e = 0; e < 64; ++e) {
        k8[at + e] = static_cast<int8_t>(std::lround(c.k[at + e] * 127)), v8[at + e] = static_cast<int8_t>(std::lround(c.v[at + e] * 127));
        as8.k[at + e] = ks[si] * static_cast<float>(k8[at + e]), as8.v[at + e] = vs[si] * static_cast<float>(v8[at + e]);
      }
    }
  }
  lio::cpu::FlashWorkspace ws;
  std::vector<float> out(c.out_size());
  lio::cpu::flash_attention(c.q.data(), PagedKvLayer{KvElement::F16, k16.data(), v16.data(), nullptr, nullptr},
                            out.data(), nullptr, c.batch(), c.shape, ws);
  EXPECT_EQ(0.0f, max_abs_diff(out, run_flash(as16)));
  lio::cpu::flash_attention(c.q.data(), PagedKvLayer{KvElement::Int8, k8.data(), v8.data(), ks.data(), vs.data()},
                            out.data(), nullptr, c.batch(), c.shape, ws);
  EXPECT_EQ(0.0f, max_abs_diff(out, run_flash(as8)));
  std::vector<float> scores;
  lio::cpu::naive_attention(c.q.data(), PagedKvLayer{KvElement::Int8, k8.data(), v8.data(), ks.data(), vs.data()},
                            out.data(), nullptr, c.batch(), c.shape, scores);
  EXPECT_LT(max_abs_diff(out, run_flash(as8)), kTol);
}

TEST(FlashAttention, ScratchIsLinearForFlashAndQuadraticForNaive) {
  std::vector<int64_t> flash, naive;
  for (int64_t n : {256, 512, 1024}) {
    const Case c(9, 3, 64, {{0, n}}, 1);
    lio::cpu::FlashWorkspace ws;
    std::vector<float> out(c.out_size()), scores;
    flash.push_back(lio::cpu::flash_attention(c.q.data(), c.kv(), out.data(), nullptr, c.batch(), c.shape, ws).scratch_bytes);
    naive.push_back(lio::cpu::naive_attention(c.q.data(), c.kv(), out.data(), nullptr, c.batch(), c.shape, scores).scratch_bytes);
    EXPECT_GE(naive.back(), lio::cpu::attention_score_bytes(1, 9, n, n, 4));
  }
  EXPECT_EQ(flash[0], flash[2]);  // prefill tiles: independent of N
  EXPECT_GT(naive[2], 12 * naive[0]);  // 4x the tokens: 16x the scores (plus the gathered K/V, 4x)
}

TEST(FlashAttention, RejectsBadShapes) {
  const Case c(9, 3, 64, {{0, 4}});
  lio::cpu::FlashWorkspace ws;
  std::vector<float> out(c.out_size()), scores;
  AttentionShape bad = c.shape;
  bad.n_kv_heads = 2;
  EXPECT_THROW(lio::cpu::flash_attention(c.q.data(), c.kv(), out.data(), nullptr, c.batch(), bad, ws), lio::InvalidArgument);
  EXPECT_THROW(lio::cpu::naive_attention(c.q.data(), c.kv(), out.data(), nullptr, c.batch(), bad, scores), lio::InvalidArgument);
  AttentionBatch short_table = c.batch();
  short_table.block_size = 1;  // 4 tokens need 4 blocks of 1; the table has 1 column
  EXPECT_THROW(lio::cpu::flash_attention(c.q.data(), c.kv(), out.data(), nullptr, short_table, c.shape, ws),
               lio::InvalidArgument);
  PagedKvLayer int8_without_scales{KvElement::Int8, c.k.data(), c.v.data(), nullptr, nullptr};
  EXPECT_THROW(lio::cpu::flash_attention(c.q.data(), int8_without_scales, out.data(), nullptr, c.batch(), c.shape, ws),
               lio::InvalidArgument);
}

TEST(ExpShifted, MatchesStdExpToAFewUlpsAndUnderflowsToZero) {
  std::vector<float> x;
  for (float t = -90.0f; t <= 10.0f; t += 0.0137f) x.push_back(t);
  std::vector<float> y = x;
  lio::cpu::exp_shifted(y, 0.5f);
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(double(x[i] - 0.5f));  // the argument as the kernel rounds it
    if (x[i] - 0.5f < -87.34f) {
      EXPECT_EQ(y[i], 0.0f) << x[i];
    } else if (want > 1e-37) {
      EXPECT_NEAR(y[i] / want, 1.0, 3e-7) << x[i];
    }
  }
}

}  // namespace
