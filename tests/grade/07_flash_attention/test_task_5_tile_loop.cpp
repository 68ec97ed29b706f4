// Chapter 07, Task 5: one query tile's loop over its key tiles, and the final normalization
// (exercises/07_flash_attention/flash_attention.cpp, flash_tile_loop and finish_partial).
// First through a scripted FlashTileSource (which tiles were loaded, what each row folded),
// then through the engine's kernel, cpu::flash_attention, which runs on your loop: against
// plain softmax attention in double precision at tile edges, long contexts, GQA groups, causal
// and not, sliding windows, and with scratch that does not grow with the context.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "flash_attention.h"
#include "lio/error.h"

namespace {
using lio::cpu::AttentionPartial;
using lio::cpu::FlashTileSource;
using lio::cpu::kFlashKeyTile;

/// Query vectors and keys of one query tile, scores computed plainly; records each load.
class ScriptedTiles final : public FlashTileSource {
 public:
  ScriptedTiles(int64_t rows, int64_t grp, int64_t d, int64_t first_pos, int64_t n_keys, bool is_causal,
                int64_t win, uint32_t seed)
      : n_keys_(n_keys) {
    n_rows = rows, group = grp, head_dim = d, pos0 = first_pos, causal = is_causal, window = win;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    q.resize(static_cast<size_t>(rows * grp * d));
    k.resize(static_cast<size_t>(n_keys * d));
    v.resize(k.size());
    for (float& x : q) x = 2.0f * u(rng);
    for (float& x : k) x = u(rng);
    for (float& x : v) x = u(rng);
    s_.resize(static_cast<size_t>(rows * grp * kFlashKeyTile));
  }
  float* load_tile(int64_t k0, int64_t nk, const float** values) override {
    EXPECT_GE(nk, 1);
    EXPECT_LE(nk, kFlashKeyTile);
    EXPECT_GE(k0, 0);
    EXPECT_LE(k0 + nk, n_keys_);
    loaded.push_back(k0);
    std::fill(s_.begin(), s_.end(), NAN);  // what lies past nk must never be folded
    for (int64_t i = 0; i < n_rows * group; ++i)
      for (int64_t j = 0; j < nk; ++j) s_[static_cast<size_t>(i * kFlashKeyTile + j)] = score(i, k0 + j);
    *values = v.data() + k0 * head_dim;
    return s_.data();
  }
  void window_skipped() override { ++skipped; }
  float score(int64_t i, int64_t key) const {
    float acc = 0.0f;
    for (int64_t e = 0; e < head_dim; ++e) acc += q[static_cast<size_t>(i * head_dim + e)] * k[static_cast<size_t>(key * head_dim + e)];
    return acc / std::sqrt(static_cast<float>(head_dim));
  }
  /// Softmax-weighted values of vector i over keys [lo, hi) (the exact answer, in double).
  std::vector<double> expected(int64_t i, int64_t lo, int64_t hi) const {
    double m = -INFINITY, l = 0.0;
    for (int64_t j = lo; j < hi; ++j) m = std::max(m, static_cast<double>(score(i, j)));
    std::vector<double> o(static_cast<size_t>(head_dim), 0.0);
    for (int64_t j = lo; j < hi; ++j) {
      const double p = std::exp(score(i, j) - m);
      l += p;
      for (int64_t e = 0; e < head_dim; ++e) o[static_cast<size_t>(e)] += p * v[static_cast<size_t>(j * head_dim + e)];
    }
    for (double& x : o) x /= l;
    return o;
  }
  std::vector<float> q, k, v;
  std::vector<int64_t> loaded;
  int skipped = 0;

 private:
  int64_t n_keys_;
  std::vector<float> s_;
};

/// Empty partials for every query vector of `src`, over `acc` (n_vectors * head_dim floats).
std::vector<AttentionPartial> empty_partials(const FlashTileSource& src, std::vector<float>& acc) {
  const int64_t nv = src.n_rows * src.group;
  acc.assign(static_cast<size_t>(nv * src.head_dim), 0.0f);
  std::vector<AttentionPartial> p(static_cast<size_t>(nv));
  for (int64_t i = 0; i < nv; ++i) p[static_cast<size_t>(i)].acc = std::span<float>(acc.data() + i * src.head_dim, static_cast<size_t>(src.head_dim));
  return p;
}

/// Every vector's acc / l against the exact answer over the keys its row sees.
void expect_rows(const ScriptedTiles& t, const std::vector<AttentionPartial>& p, int64_t n_keys) {
  for (int64_t r = 0; r < t.n_rows; ++r) {
    const int64_t pos = t.pos0 + r;
    const int64_t hi = t.causal ? std::min(n_keys, pos + 1) : n_keys;
    const int64_t lo = t.causal && t.window > 0 ? std::max<int64_t>(0, pos - t.window + 1) : 0;
    for (int64_t hh = 0; hh < t.group; ++hh) {
      const int64_t i = r * t.group + hh;
      const AttentionPartial& a = p[static_cast<size_t>(i)];
      ASSERT_GT(a.l, 0.0f) << "row " << r << " head " << hh << " folded no key";
      const std::vector<double> want = t.expected(i, lo, hi);
      for (int64_t e = 0; e < t.head_dim; ++e)
        ASSERT_NEAR(a.acc[static_cast<size_t>(e)] / a.l, want[static_cast<size_t>(e)], 2e-5)
            << "row " << r << " head " << hh << " element " << e;
    }
  }
}

TEST(Ch07Task5, ADiagonalTileFoldsEachRowUpToItsOwnPosition) {
  // 16 rows at positions 100..115 over keys 0..115: tile 0 (0..63) full, tile 1 (64..115) on
  // the diagonal, and GQA: two query heads read this KV head.
  ScriptedTiles t(16, 2, 32, 100, 116, true, 0, 1);
  std::vector<float> acc;
  auto p = empty_partials(t, acc);
  lio::cpu::flash_tile_loop(t, 0, 116, p, true);
  EXPECT_EQ(t.loaded, (std::vector<int64_t>{0, 64})) << "each key tile is loaded once, in order";
  expect_rows(t, p, 116);
}

TEST(Ch07Task5, TilesAboveTheDiagonalAreNeverLoaded) {
  // The first query tile of a 512-token prompt (positions 0..15) over the whole range: only the
  // first key tile holds keys it may see.
  ScriptedTiles t(16, 1, 16, 0, 512, true, 0, 2);
  std::vector<float> acc;
  auto p = empty_partials(t, acc);
  lio::cpu::flash_tile_loop(t, 0, 512, p, true);
  EXPECT_EQ(t.loaded, (std::vector<int64_t>{0}));
  expect_rows(t, p, 16);
}

TEST(Ch07Task5, ASlidingWindowSkipsWholeTilesAndMasksItsEdge) {
  // Window 20, rows at 200..203 (they see keys 181..200 .. 184..203): tiles 0..63 and 64..127
  // lie before every row's window and are skipped; 128..191 holds the window's start.
  ScriptedTiles t(4, 3, 16, 200, 204, true, 20, 3);
  std::vector<float> acc;
  auto p = empty_partials(t, acc);
  lio::cpu::flash_tile_loop(t, 0, 204, p, true);
  EXPECT_EQ(t.loaded, (std::vector<int64_t>{128, 192}));
  EXPECT_EQ(t.skipped, 2);
  expect_rows(t, p, 204);
  // Not skipping: the same answer, every tile loaded and masked.
  ScriptedTiles u(4, 3, 16, 200, 204, true, 20, 3);
  auto pu = empty_partials(u, acc);
  lio::cpu::flash_tile_loop(u, 0, 204, pu, false);
  EXPECT_EQ(u.loaded, (std::vector<int64_t>{0, 64, 128, 192}));
  EXPECT_EQ(u.skipped, 0);
  expect_rows(u, pu, 204);
}

TEST(Ch07Task5, NonCausalRowsSeeEveryKeyAndRangesChain) {
  ScriptedTiles t(3, 1, 8, 0, 130, false, 0, 4);
  std::vector<float> acc;
  auto p = empty_partials(t, acc);
  lio::cpu::flash_tile_loop(t, 0, 128, p, true);  // one split ...
  lio::cpu::flash_tile_loop(t, 128, 130, p, true);  // ... continued by the next range
  EXPECT_EQ(t.loaded, (std::vector<int64_t>{0, 64, 128}));
  expect_rows(t, p, 130);
}

TEST(Ch07Task5, BadArgumentsAreRefused) {
  ScriptedTiles t(2, 2, 8, 10, 12, true, 0, 5);
  std::vector<float> acc;
  auto p = empty_partials(t, acc);
  p.pop_back();
  EXPECT_THROW(lio::cpu::flash_tile_loop(t, 0, 12, p, true), lio::InvalidArgument);
  auto q = empty_partials(t, acc);
  EXPECT_THROW(lio::cpu::flash_tile_loop(t, 12, 0, q, true), lio::InvalidArgument);
}

TEST(Ch07Task5, FinishDividesByTheSumAndGivesTheLogSumExp) {
  std::vector<float> acc = {2.0f, -4.0f, 1.0f};
  const AttentionPartial p{0.5f, 4.0f, std::span<float>(acc)};
  std::vector<float> out(3);
  float lse = 0.0f;
  lio::cpu::finish_partial(p, out, &lse);
  EXPECT_FLOAT_EQ(out[0], 0.5f);
  EXPECT_FLOAT_EQ(out[1], -1.0f);
  EXPECT_FLOAT_EQ(out[2], 0.25f);
  EXPECT_FLOAT_EQ(lse, 0.5f + std::log(4.0f));
  lio::cpu::finish_partial(p, out, nullptr);  // no logsumexp wanted
  std::vector<float> short_out(2);
  EXPECT_THROW(lio::cpu::finish_partial(p, short_out, &lse), lio::InvalidArgument);
  std::vector<float> zeros(3, 0.0f);
  EXPECT_THROW(lio::cpu::finish_partial(AttentionPartial{-INFINITY, 0.0f, std::span<float>(zeros)}, out, &lse),
               lio::InvalidArgument);
}

// ---- through the engine's kernel --------------------------------------------------------------

/// One sequence of `cached` + `fresh` tokens in a pool of scattered blocks of 16.
struct Batch {
  int64_t n_heads, n_kv, d, cached, fresh, window;
  std::vector<int32_t> qsl, seq_lens, table;
  std::vector<float> q, k, v;
  Batch(int64_t h, int64_t kvh, int64_t dim, int64_t c, int64_t f, int64_t w = 0)
      : n_heads(h), n_kv(kvh), d(dim), cached(c), fresh(f), window(w) {
    const int64_t n = c + f, n_blocks = (n + 15) / 16;
    qsl = {0, static_cast<int32_t>(f)};
    seq_lens = {static_cast<int32_t>(n)};
    table.resize(static_cast<size_t>(n_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::shuffle(table.begin(), table.end(), rng);  // blocks anywhere in the pool
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    q.resize(static_cast<size_t>(f * h * dim));
    k.resize(static_cast<size_t>(n_blocks * 16 * kvh * dim));
    v.resize(k.size());
    for (float& x : q) x = 2.0f * u(rng);
    for (float& x : k) x = u(rng);
    for (float& x : v) x = u(rng);
  }
  lio::cpu::AttentionBatch batch() const {
    return {qsl.data(), seq_lens.data(), table.data(), 1, static_cast<int64_t>(table.size()), 16, true};
  }
  lio::cpu::AttentionShape shape() const {
    return {n_heads, n_kv, d, 1.0f / std::sqrt(static_cast<float>(d)), window};
  }
};

/// Plain softmax attention in double: row i (position cached + i), query head h reads KV head
/// h / (n_heads / n_kv), keys max(0, p - window + 1) .. p through the block table.
std::vector<double> reference(const Batch& c) {
  const int64_t group = c.n_heads / c.n_kv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  std::vector<double> out(c.q.size(), 0.0);
  const auto at = [&](const std::vector<float>& pool, int64_t j, int64_t g, int64_t e) {
    const int64_t slot = c.table[static_cast<size_t>(j / 16)] * 16 + j % 16;
    return static_cast<double>(pool[static_cast<size_t>((slot * c.n_kv + g) * c.d + e)]);
  };
  for (int64_t i = 0; i < c.fresh; ++i) {
    const int64_t p = c.cached + i, lo = c.window > 0 ? std::max<int64_t>(0, p - c.window + 1) : 0;
    for (int64_t h = 0; h < c.n_heads; ++h) {
      const int64_t g = h / group;
      const float* q = c.q.data() + (i * c.n_heads + h) * c.d;
      std::vector<double> s(static_cast<size_t>(p + 1 - lo));
      double m = -INFINITY, l = 0.0;
      for (int64_t j = lo; j <= p; ++j) {
        double dot = 0.0;
        for (int64_t e = 0; e < c.d; ++e) dot += static_cast<double>(q[e]) * at(c.k, j, g, e);
        s[static_cast<size_t>(j - lo)] = dot * scale;
        m = std::max(m, dot * scale);
      }
      double* o = out.data() + (i * c.n_heads + h) * c.d;
      for (int64_t j = lo; j <= p; ++j) {
        const double w = std::exp(s[static_cast<size_t>(j - lo)] - m);
        l += w;
        for (int64_t e = 0; e < c.d; ++e) o[e] += w * at(c.v, j, g, e);
      }
      for (int64_t e = 0; e < c.d; ++e) o[e] /= l;
    }
  }
  return out;
}

void expect_flash_equals_reference(const Batch& c, int64_t* scratch_bytes = nullptr) {
  const lio::cpu::PagedKvLayer kv{lio::cpu::KvElement::F32, c.k.data(), c.v.data(), nullptr, nullptr};
  std::vector<float> out(c.q.size(), NAN);
  lio::cpu::FlashWorkspace ws;
  const lio::cpu::AttentionStats st = lio::cpu::flash_attention(c.q.data(), kv, out.data(), nullptr, c.batch(), c.shape(), ws);
  if (scratch_bytes) *scratch_bytes = st.scratch_bytes;
  const std::vector<double> want = reference(c);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], 2e-5) << "element " << i;
}

TEST(Ch07Task5, TheEngineKernelMatchesTheReferenceAtTileEdges) {
  for (const int64_t n : {1, 15, 16, 17, 63, 64, 65, 511, 512, 513}) {
    SCOPED_TRACE("prefill of " + std::to_string(n));
    expect_flash_equals_reference(Batch(4, 2, 32, 0, n));
  }
}

TEST(Ch07Task5, TheEngineKernelMatchesTheReferenceForDecodeGqaAndWindows) {
  expect_flash_equals_reference(Batch(9, 3, 64, 4000, 1));       // a decode row, SmolLM2's GQA
  expect_flash_equals_reference(Batch(8, 1, 64, 1500, 40));      // MQA, a chunk after a long prefix
  expect_flash_equals_reference(Batch(4, 1, 32, 700, 70, 512));  // Gemma-like window past its start
  expect_flash_equals_reference(Batch(4, 2, 16, 0, 300, 20));    // a small window inside a prefill
}

TEST(Ch07Task5, ScratchDoesNotGrowWithTheContext) {
  int64_t at_1k = 0, at_4k = 0;
  expect_flash_equals_reference(Batch(4, 2, 32, 0, 1024), &at_1k);
  expect_flash_equals_reference(Batch(4, 2, 32, 0, 4096), &at_4k);
  EXPECT_GT(at_1k, 0);
  EXPECT_EQ(at_4k, at_1k) << "FlashAttention's scratch is tiles, not N x N scores";
}

}  // namespace
