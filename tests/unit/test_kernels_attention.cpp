// The reference CPU attention (attention_reference.h, the oracle of every attention kernel)
// against a direct double-precision implementation of softmax(q k^T * scale) v with the
// causal mask and the head-group mapping.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "attention_reference.h"
#include "lio/error.h"

namespace {

std::vector<double> reference(const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, int64_t n_q, int64_t start, int64_t n_heads,
                              int64_t n_kv, int64_t hd, double scale) {
  std::vector<double> out(static_cast<size_t>(n_q * n_heads * hd), 0.0);
  for (int64_t i = 0; i < n_q; ++i)
    for (int64_t h = 0; h < n_heads; ++h) {
      const int64_t g = h / (n_heads / n_kv);
      const int64_t n_keys = start + i + 1;
      std::vector<double> s(static_cast<size_t>(n_keys));
      double mx = -1e300, den = 0;
      for (int64_t j = 0; j < n_keys; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += double(q[(i * n_heads + h) * hd + d]) * k[(j * n_kv + g) * hd + d];
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      for (auto& e : s) den += (e = std::exp(e - mx));
      for (int64_t j = 0; j < n_keys; ++j)
        for (int64_t d = 0; d < hd; ++d)
          out[(i * n_heads + h) * hd + d] += s[j] / den * v[(j * n_kv + g) * hd + d];
    }
  return out;
}

struct Case {
  int64_t n_q, start, n_heads, n_kv, hd;
};

class AttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionTest, MatchesReference) {
  const Case c = GetParam();
  std::mt19937 rng(99);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t n_ctx = c.start + c.n_q;
  std::vector<float> q(c.n_q * c.n_heads * c.hd), k(n_ctx * c.n_kv * c.hd), v(n_ctx * c.n_kv * c.hd);
  for (auto* vec : {&q, &k, &v})
    for (float& x : *vec) x = 2.0f * dist(rng);  // wide scores exercise the max subtraction
  std::vector<float> out(q.size());
  const float scale = 1.0f / std::sqrt(float(c.hd));
  lio::cpu::attention_reference(q.data(), k.data(), v.data(), out.data(), c.n_q, c.start, c.n_heads,
                                c.n_kv, c.hd, scale);
  std::vector<double> ref = reference(q, k, v, c.n_q, c.start, c.n_heads, c.n_kv, c.hd, scale);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], ref[i], 2e-5) << "at " << i;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(Case{1, 0, 4, 4, 16},     // first decode step, MHA
                                           Case{1, 37, 9, 3, 64},    // decode with a cached prefix, GQA 3:1
                                           Case{12, 0, 4, 2, 16},    // prefill, causal mask
                                           Case{5, 20, 8, 1, 32}));  // chunk after a prefix, MQA

TEST(Attention, FirstPositionCopiesItsValue) {
  // With a single key, softmax is 1 and the output equals that value vector.
  std::vector<float> q = {0.3f, -1.0f}, k = {2.0f, 0.5f}, v = {7.0f, -3.0f}, out(2);
  lio::cpu::attention_reference(q.data(), k.data(), v.data(), out.data(), 1, 0, 1, 1, 2, 1.0f);
  EXPECT_FLOAT_EQ(out[0], 7.0f);
  EXPECT_FLOAT_EQ(out[1], -3.0f);
}

TEST(Attention, RejectsBadHeadGrouping) {
  std::vector<float> buf(64);
  EXPECT_THROW(lio::cpu::attention_reference(buf.data(), buf.data(), buf.data(), buf.data(), 1, 0,
                                             3, 2, 4, 1.0f),
               lio::InvalidArgument);
}

}  // namespace

namespace {

// paged_attention_reference over blocks scattered through a pool equals attention over the same
// keys laid out contiguously (attention_reference), bit for bit (one routine; only where key j
// lives differs), for a batch mixing a prefill chunk with a cached prefix, a whole prompt and a
// decode row; masked rows are left untouched.
TEST(PagedAttention, ScatteredBlocksEqualContiguousAttention) {
  const int64_t n_heads = 6, n_kv = 2, hd = 16, bs = 4, kvd = n_kv * hd, n_blocks = 40;
  std::mt19937 rng(17);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  // Sequences: (cached tokens, new rows): a chunk after 9 cached, a fresh 6-token prompt, a decode.
  const std::vector<std::pair<int64_t, int64_t>> seqs = {{9, 5}, {0, 6}, {22, 1}};
  std::vector<int32_t> perm(n_blocks);
  for (int32_t b = 0; b < n_blocks; ++b) perm[b] = b;
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<float> k_pool(n_blocks * bs * kvd), v_pool(k_pool.size());
  for (float& x : k_pool) x = dist(rng);
  for (float& x : v_pool) x = dist(rng);
  const int64_t max_blocks = 6;
  std::vector<int32_t> qsl = {0}, seq_lens, tables;
  int64_t next_block = 0;
  for (auto [cached, rows] : seqs) {
    qsl.push_back(qsl.back() + static_cast<int32_t>(rows));
    seq_lens.push_back(static_cast<int32_t>(cached + rows));
    for (int64_t b = 0; b < max_blocks; ++b) tables.push_back(perm[next_block++]);
  }
  const int64_t n_tokens = qsl.back();
  std::vector<float> q(n_tokens * n_heads * hd), out(q.size(), -7.0f);
  for (float& x : q) x = dist(rng);
  std::vector<uint8_t> mask(n_tokens, 1);
  mask[2] = 0;  // row 2 is someone else's (chapter 01's decode_attention, say)
  lio::cpu::paged_attention_reference(q.data(), k_pool.data(), v_pool.data(), out.data(),
                                      qsl.data(), seq_lens.data(), tables.data(), 3, max_blocks, bs,
                                      n_heads, n_kv, hd, 0.25f, mask.data());
  for (size_t s = 0; s < seqs.size(); ++s) {
    // Gather the sequence's keys contiguously and run the contiguous kernel on its rows.
    const int64_t len = seq_lens[s], rows = seqs[s].second, start = len - rows;
    std::vector<float> k(len * kvd), v(len * kvd);
    for (int64_t j = 0; j < len; ++j) {
      const int64_t slot = tables[s * max_blocks + j / bs] * bs + j % bs;
      std::copy_n(k_pool.begin() + slot * kvd, kvd, k.begin() + j * kvd);
      std::copy_n(v_pool.begin() + slot * kvd, kvd, v.begin() + j * kvd);
    }
    std::vector<float> want(rows * n_heads * hd);
    lio::cpu::attention_reference(q.data() + qsl[s] * n_heads * hd, k.data(), v.data(), want.data(),
                                  rows, start, n_heads, n_kv, hd, 0.25f);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t e = 0; e < n_heads * hd; ++e) {
        const float got = out[(qsl[s] + i) * n_heads * hd + e];
        if (qsl[s] + i == 2) {
          ASSERT_EQ(got, -7.0f) << "a masked row was written";
        } else {
          ASSERT_EQ(got, want[i * n_heads * hd + e]) << "sequence " << s << " row " << i;
        }
      }
  }
}

}  // namespace
