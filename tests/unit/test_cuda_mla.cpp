// test_cuda_mla.cpp — the MLA kernels of kernels/cuda/mla.cu (chapter 02) against the CPU's
// naive MLA head (cpu::mla_naive_attention_head: up-project K and V from each latent, then
// softmax attention), on random pools with shuffled block tables: a decode row and a 3-row
// prefill chunk after a long cached prefix, at DeepSeek-V2's head shape (d_c 512, d_R 64,
// d_nope 128, d_v 128), at a small odd one, and at the kernels' largest latent (1024). The
// absorbed kernel, and the naive path (gather + cuBLAS up-projection + attention), must both
// match. Also mla_latent_append (padding rows skipped) and mla_rope against cpu::rope_freqs.
// GPU tests skip without a usable GPU; the argument checks run everywhere.
//
// Tolerance: outputs are W_UV times a convex combination of latents, weights ~ N(0, 1/d_c):
// 1e-4 absolute (f32 sums of <= 1024 terms in different orders).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cpu_ops.h"
#include "cublas_handle.h"
#include "device_matrix.h"
#include "matmul.h"
#include "mla.h"
#include "cuda_runtime_info.h"
#include "device_buffer.h"
#include "lio/error.h"
#include "random_inputs.h"

namespace {

using lio::cuda::DeviceBuffer;
using lio::cuda::MlaShape;
using lio::testing::random_floats;

struct Seq {
  int32_t cached, query_len;
};

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0.0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
  return d;
}

/// Builds a batch of `seqs` over a random pool, runs the absorbed and the naive GPU paths and
/// the CPU reference, and compares.
void check_case(const MlaShape& m, int64_t block_size, const std::vector<Seq>& seqs, uint32_t seed) {
  const int64_t row = m.d_c + m.d_rope, half = row / 2, n_seqs = static_cast<int64_t>(seqs.size());
  int64_t max_blocks = 0, n_tokens = 0, n_ctx_total = 0;
  for (const Seq& s : seqs) {
    max_blocks = std::max(max_blocks, (s.cached + s.query_len + block_size - 1) / block_size);
    n_tokens += s.query_len;
    n_ctx_total += s.cached + s.query_len;
  }
  const int64_t n_blocks = n_seqs * max_blocks + 3;  // a few unused blocks
  std::vector<int32_t> order(static_cast<size_t>(n_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  std::vector<int32_t> tables(static_cast<size_t>(n_seqs * max_blocks)), qsl{0}, lens, ctx_first{0};
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = order[i];
  for (const Seq& s : seqs) {
    qsl.push_back(qsl.back() + s.query_len);
    lens.push_back(s.cached + s.query_len);
    ctx_first.push_back(ctx_first.back() + lens.back());
  }
  const std::vector<float> k_pool = random_floats(static_cast<size_t>(n_blocks * block_size * half), -1, 1, seed + 1);
  const std::vector<float> v_pool = random_floats(k_pool.size(), -1, 1, seed + 2);
  const std::vector<float> q =
      random_floats(static_cast<size_t>(n_tokens * m.n_heads * (m.d_nope + m.d_rope)), -1, 1, seed + 3);
  const float w_scale = 1.0f / std::sqrt(static_cast<float>(m.d_c));
  const std::vector<float> w_uk = random_floats(static_cast<size_t>(m.n_heads * m.d_nope * m.d_c), -w_scale, w_scale, seed + 4);
  const std::vector<float> w_uv = random_floats(static_cast<size_t>(m.n_heads * m.d_v * m.d_c), -w_scale, w_scale, seed + 5);
  const float scale = 1.0f / std::sqrt(static_cast<float>(m.d_nope + m.d_rope));

  // CPU reference: each sequence's latent rows gathered through its table, one head at a time.
  std::vector<float> want(static_cast<size_t>(n_tokens * m.n_heads * m.d_v));
  for (int64_t s = 0; s < n_seqs; ++s) {
    std::vector<float> lat(static_cast<size_t>(lens[s] * row));
    for (int64_t j = 0; j < lens[s]; ++j) {
      const int64_t slot = static_cast<int64_t>(tables[s * max_blocks + j / block_size]) * block_size + j % block_size;
      std::copy_n(k_pool.begin() + slot * half, half, lat.begin() + j * row);
      std::copy_n(v_pool.begin() + slot * half, half, lat.begin() + j * row + half);
    }
    for (int64_t i = qsl[s]; i < qsl[s + 1]; ++i) {
      const int64_t n_ctx = lens[s] - (qsl[s + 1] - i) + 1;
      for (int64_t h = 0; h < m.n_heads; ++h) {
        const float* qh = q.data() + (i * m.n_heads + h) * (m.d_nope + m.d_rope);
        lio::cpu::mla_naive_attention_head(qh, qh + m.d_nope, w_uk.data() + h * m.d_nope * m.d_c,
                                           w_uv.data() + h * m.d_v * m.d_c, lat.data(), n_ctx, m.d_nope, m.d_rope,
                                           m.d_c, m.d_v, scale, want.data() + (i * m.n_heads + h) * m.d_v);
      }
    }
  }

  auto d_k = DeviceBuffer<float>::from_host(k_pool), d_v = DeviceBuffer<float>::from_host(v_pool);
  auto d_q = DeviceBuffer<float>::from_host(q), d_wuk = DeviceBuffer<float>::from_host(w_uk);
  auto d_wuv = DeviceBuffer<float>::from_host(w_uv);
  auto d_qsl = DeviceBuffer<int32_t>::from_host(qsl), d_lens = DeviceBuffer<int32_t>::from_host(lens);
  auto d_tables = DeviceBuffer<int32_t>::from_host(tables), d_first = DeviceBuffer<int32_t>::from_host(ctx_first);
  const std::vector<float> poison(want.size(), NAN);
  auto d_out = DeviceBuffer<float>::from_host(poison);
  lio::cuda::mla_absorbed_attention(d_q.data(), d_k.data(), d_v.data(), d_wuk.data(), d_wuv.data(), d_out.data(),
                                    d_qsl.data(), d_lens.data(), d_tables.data(), n_tokens, n_seqs, max_blocks,
                                    block_size, m, scale, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_LT(max_abs_diff(d_out.to_host(), want), 1e-4) << "absorbed";

  DeviceBuffer<float> d_c(n_ctx_total * m.d_c), d_kpe(std::max<int64_t>(n_ctx_total * m.d_rope, 1));
  DeviceBuffer<float> d_knope(n_ctx_total * m.n_heads * m.d_nope), d_vexp(n_ctx_total * m.n_heads * m.d_v);
  lio::cuda::mla_gather_latents(d_k.data(), d_v.data(), d_first.data(), d_tables.data(), n_ctx_total, n_seqs,
                                max_blocks, block_size, m, d_c.data(), d_kpe.data(), nullptr);
  lio::cuda::CublasHandle cublas;
  const lio::cuda::DeviceMatrix wk{lio::DType::F32, m.n_heads * m.d_nope, m.d_c, m.d_c * 4,
                                   reinterpret_cast<const std::byte*>(d_wuk.data())};
  const lio::cuda::DeviceMatrix wv{lio::DType::F32, m.n_heads * m.d_v, m.d_c, m.d_c * 4,
                                   reinterpret_cast<const std::byte*>(d_wuv.data())};
  lio::cuda::matmul(cublas, wk, d_c.data(), d_knope.data(), n_ctx_total, false, nullptr, 0, nullptr);
  lio::cuda::matmul(cublas, wv, d_c.data(), d_vexp.data(), n_ctx_total, false, nullptr, 0, nullptr);
  d_out.copy_from_host(poison.data(), static_cast<int64_t>(poison.size()));
  lio::cuda::mla_naive_attention(d_q.data(), d_knope.data(), d_kpe.data(), d_vexp.data(), d_out.data(), d_qsl.data(),
                                 d_lens.data(), d_first.data(), n_tokens, n_seqs, m, scale, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_LT(max_abs_diff(d_out.to_host(), want), 1e-4) << "naive";
}

TEST(CudaMla, AttentionMatchesCpuAtDeepSeekV2Shape) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_case({4, 128, 64, 512, 128}, 16, {{36, 1}, {297, 3}}, 1);
}

TEST(CudaMla, AttentionMatchesCpuAtSmallOddShapes) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_case({3, 16, 8, 24, 20}, 4, {{0, 5}, {9, 1}, {130, 2}}, 2);
  check_case({2, 8, 0, 30, 12}, 1, {{7, 1}}, 3);  // no RoPE key at all
}

TEST(CudaMla, AttentionMatchesCpuAtTheLargestLatent) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_case({2, 64, 256, lio::cuda::kMlaMaxLatentDim, lio::cuda::kMlaMaxLatentDim}, 16, {{70, 2}}, 4);
}

TEST(CudaMla, LatentAppendWritesHalvesAndSkipsPadding) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t half = 18, n_slots = 10;
  const std::vector<float> latent = random_floats(3 * 2 * half, -1, 1, 5);
  const std::vector<int32_t> slots = {7, -1, 2};
  std::vector<float> k(n_slots * half, 0.5f), v(n_slots * half, 0.25f);
  auto d_lat = DeviceBuffer<float>::from_host(latent);
  auto d_slots = DeviceBuffer<int32_t>::from_host(slots);
  auto d_k = DeviceBuffer<float>::from_host(k), d_v = DeviceBuffer<float>::from_host(v);
  lio::cuda::mla_latent_append(d_lat.data(), d_slots.data(), 3, half, d_k.data(), d_v.data(), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  for (int t : {0, 2}) {
    std::copy_n(latent.begin() + t * 2 * half, half, k.begin() + slots[t] * half);
    std::copy_n(latent.begin() + t * 2 * half + half, half, v.begin() + slots[t] * half);
  }
  EXPECT_EQ(d_k.to_host(), k);
  EXPECT_EQ(d_v.to_host(), v);
}

TEST(CudaMla, RopeMatchesCpuRopeFreqs) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const MlaShape m{3, 6, 8, 10, 4};
  const int64_t n = 4, qd = m.n_heads * (m.d_nope + m.d_rope), row = m.d_c + m.d_rope;
  std::vector<float> q = random_floats(n * qd, -1, 1, 6), lat = random_floats(n * row, -1, 1, 7);
  const std::vector<int32_t> pos = {0, 1, 517, 100000};
  const std::vector<float> freq = {1.0f, 0.1f, 0.01f, 1e-4f};
  auto d_q = DeviceBuffer<float>::from_host(q), d_lat = DeviceBuffer<float>::from_host(lat);
  auto d_pos = DeviceBuffer<int32_t>::from_host(pos);
  auto d_freq = DeviceBuffer<float>::from_host(freq);
  lio::cuda::mla_rope(d_q.data(), d_lat.data(), d_pos.data(), d_freq.data(), n, m, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  for (int64_t t = 0; t < n; ++t) {
    lio::cpu::rope_freqs(q.data() + t * qd + m.d_nope, pos[t], m.n_heads, m.d_nope + m.d_rope, m.d_rope, freq.data());
    lio::cpu::rope_freqs(lat.data() + t * row + m.d_c, pos[t], 1, row, m.d_rope, freq.data());
  }
  EXPECT_LT(max_abs_diff(d_q.to_host(), q), 1e-6);
  EXPECT_LT(max_abs_diff(d_lat.to_host(), lat), 1e-6);
}

// Argument checks run on the host before any launch: no GPU needed.
TEST(CudaMla, LaunchersRejectBadShapes) {
  float* p = reinterpret_cast<float*>(16);
  const int32_t* ip = reinterpret_cast<const int32_t*>(16);
  const MlaShape too_wide{2, 8, 8, lio::cuda::kMlaMaxLatentDim + 2, 8};
  const MlaShape odd_rope{2, 8, 7, 9, 8};
  for (const MlaShape& bad : {too_wide, odd_rope, MlaShape{0, 8, 8, 8, 8}}) {
    EXPECT_THROW(lio::cuda::mla_absorbed_attention(p, p, p, p, p, p, ip, ip, ip, 1, 1, 1, 16, bad, 1.0f, nullptr),
                 lio::InvalidArgument);
    EXPECT_THROW(lio::cuda::mla_naive_attention(p, p, p, p, p, ip, ip, ip, 1, 1, bad, 1.0f, nullptr),
                 lio::InvalidArgument);
    EXPECT_THROW(lio::cuda::mla_rope(p, p, ip, p, 1, bad, nullptr), lio::InvalidArgument);
  }
  const MlaShape ok{2, 8, 8, 8, 8};
  EXPECT_THROW(lio::cuda::mla_absorbed_attention(p, p, p, p, p, p, ip, ip, ip, 1, 0, 1, 16, ok, 1.0f, nullptr),
               lio::InvalidArgument);  // rows but no sequence
  EXPECT_THROW(lio::cuda::mla_absorbed_attention(p, p, p, p, p, p, ip, ip, ip, 1, 1, 1, 16, ok, NAN, nullptr),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::mla_absorbed_attention(nullptr, p, p, p, p, p, ip, ip, ip, 1, 1, 1, 16, ok, 1.0f, nullptr),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::mla_latent_append(p, ip, 1, 0, p, p, nullptr), lio::InvalidArgument);
}

}  // namespace
