// Tree verification on the CUDA backend (issue 63, item 4): the CUDA twin of test_tree_verify.cpp.
// Every node of a draft tree run in ONE pass on the GPU gets the logits of its root-to-node path
// run as a plain chain after the same prefix (fresh GPU pool), for each CUDA attention backend
// (flash, naive, paged), the f16 pool (chapter 04's quantized kernel) and gemma3's windowed
// layers. Then the kernels alone against the CPU's naive kernel with the same trees (itself held
// to the chain definition by test_kernels_flash_tree): flash (split-KV and not), naive, chapter
// 04's paged kernel, its literal twin and the f16 pool's paged kernel, on mixed batches at
// prefixes across a key tile and a split, with and without a window, and on decode-sized trees
// (Flash-Decoding's split path). Skips without a GPU: written for the device checks, never run
// on the machine it was written on.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "cuda_runtime_info.h"
#include "device_buffer.h"
#include "flash_attention.h"
#include "flash_attention_cuda.h"
#include "lio/dtype.h"
#include "paged_attention.h"
#include "paged_layout.h"
#include "quantized_kv.h"
#include "tree_pass.h"

namespace {

class CudaTreeTest : public ::testing::Test {
 protected:
  std::string dir_ = lio::testing::make_temp_dir("lio_test_cuda_tree");
};

// Flash, naive and paged on an f32 pool and the f16 pool; the third tree of 3 nodes.
TEST_F(CudaTreeTest, EachNodeGetsItsPathsLogitsOnEveryCudaAttentionBackend) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const lio::LoadedModel m = lio::testing::load_tiny_tree_model(dir_, lio::testing::TinyModelSpec{}, "llama");
  lio::testing::expect_tree_pass_on_every_backend(m, lio::Device::Cuda, {lio::KvCacheDType::F32, lio::KvCacheDType::F16},
                                                  {3, 60, 100}, {-1, 0, 0}, "llama");
}

TEST_F(CudaTreeTest, SlidingWindowLayersMeasureTheWindowFromTheNodesDepth) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  lio::testing::TinyModelSpec spec;
  spec.architecture = "gemma3";
  spec.sliding_window = 3;
  const lio::LoadedModel m = lio::testing::load_tiny_tree_model(dir_, spec, "gemma3");
  lio::testing::expect_tree_pass_on_every_backend(m, lio::Device::Cuda, {lio::KvCacheDType::F32, lio::KvCacheDType::F16},
                                                  {3, 60, 100}, {-1, 0, 0}, "gemma3 window 3");
}

// ---- the kernels alone ----------------------------------------------------------------------

using lio::cuda::DeviceBuffer;

/// A sequence: `cached` keys, `plain` ordinary rows, then a tree of `parents` (maybe empty).
struct Seq {
  int32_t cached, plain;
  std::vector<int> parents;
};

/// The batch on the host, its trees, and the CPU's answer.
struct TreeBatch {
  int64_t n_heads = 6, n_kv_heads = 2, head_dim = 64, block_size = 16, window = 0;
  float scale = 0.125f;
  lio::testing::PagedLayout l;
  std::vector<int32_t> tree_lens;
  std::vector<uint64_t> tree_masks;
  std::vector<float> q, k, v;
  int64_t max_query_len = 0;

  TreeBatch(const std::vector<Seq>& seqs, int64_t w, uint32_t seed) : window(w) {
    std::vector<lio::testing::SeqSpec> specs;
    for (const Seq& s : seqs) specs.push_back({s.cached, s.plain + static_cast<int32_t>(s.parents.size())});
    l = lio::testing::scattered_layout(specs, block_size, seed);
    tree_masks.assign(static_cast<size_t>(l.n_tokens), 0);
    for (size_t s = 0; s < seqs.size(); ++s) {
      const std::vector<int>& p = seqs[s].parents;
      tree_lens.push_back(static_cast<int32_t>(p.size()));
      const int64_t row0 = l.query_start_loc[s + 1] - static_cast<int64_t>(p.size());
      for (size_t i = 0; i < p.size(); ++i)
        tree_masks[static_cast<size_t>(row0) + i] =
            (uint64_t{1} << i) | (p[i] < 0 ? 0 : tree_masks[static_cast<size_t>(row0 + p[i])]);
      max_query_len = std::max<int64_t>(max_query_len, l.query_start_loc[s + 1] - l.query_start_loc[s]);
    }
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    k.resize(static_cast<size_t>(l.n_slots * n_kv_heads * head_dim));
    v.resize(k.size());
    q.resize(static_cast<size_t>(l.n_tokens * n_heads * head_dim));
    for (float& x : k) x = u(rng);
    for (float& x : v) x = u(rng);
    for (float& x : q) x = 2.0f * u(rng);
  }
  /// cpu::naive_attention with the trees over K/V `kk`, `vv` (f32).
  std::vector<float> cpu(const std::vector<float>& kk, const std::vector<float>& vv) const {
    std::vector<float> out(q.size()), scores;
    const lio::cpu::AttentionBatch b{l.query_start_loc.data(), l.seq_lens.data(), l.block_tables.data(), l.n_seqs,
                                     l.max_blocks_per_seq, block_size, true, tree_lens.data(), tree_masks.data()};
    lio::cpu::AttentionShape sh{n_heads, n_kv_heads, head_dim, scale};
    sh.window = window;
    lio::cpu::naive_attention(q.data(), lio::cpu::PagedKvLayer{lio::cpu::KvElement::F32, kk.data(), vv.data()},
                              out.data(), nullptr, b, sh, scores);
    return out;
  }
};

/// The batch's arrays on the device.
struct OnDevice {
  DeviceBuffer<float> q, k, v, out;
  DeviceBuffer<int32_t> qsl, lens, tables, tree_lens;
  DeviceBuffer<uint64_t> tree_masks;
  explicit OnDevice(const TreeBatch& b)
      : q(DeviceBuffer<float>::from_host(b.q)),
        k(DeviceBuffer<float>::from_host(b.k)),
        v(DeviceBuffer<float>::from_host(b.v)),
        out(static_cast<int64_t>(b.q.size())),
        qsl(DeviceBuffer<int32_t>::from_host(b.l.query_start_loc)),
        lens(DeviceBuffer<int32_t>::from_host(b.l.seq_lens)),
        tables(DeviceBuffer<int32_t>::from_host(b.l.block_tables)),
        tree_lens(DeviceBuffer<int32_t>::from_host(b.tree_lens)),
        tree_masks(DeviceBuffer<uint64_t>::from_host(b.tree_masks)) {}
  lio::cuda::DraftTrees trees() { return {tree_lens.data(), tree_masks.data()}; }
};

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) m = std::isfinite(a[i]) ? std::max(m, std::fabs(a[i] - b[i])) : INFINITY;
  return m;
}

/// Every CUDA kernel on `b` within 1e-4 of the CPU (f16 pool: of the CPU over the f16 values).
void expect_kernels_match(const TreeBatch& b, const std::string& what) {
  const std::vector<float> want = b.cpu(b.k, b.v);
  OnDevice d(b);
  const auto& l = b.l;
  lio::cuda::FlashWorkspace ws;
  for (const bool split : {true, false}) {
    lio::cuda::flash_attention(d.q.data(), d.k.data(), d.v.data(), d.out.data(), nullptr, d.qsl.data(), d.lens.data(),
                               d.tables.data(), l.n_tokens, l.n_seqs, l.max_blocks_per_seq, b.block_size, b.n_heads,
                               b.n_kv_heads, b.head_dim, b.scale, true, b.max_query_len, ws, nullptr, split, b.window,
                               d.trees());
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_LT(max_abs_diff(d.out.to_host(), want), 1e-4f) << what << (split ? " flash split" : " flash");
  }
  DeviceBuffer<float> scores(0);
  lio::cuda::naive_attention(d.q.data(), d.k.data(), d.v.data(), d.out.data(), nullptr, d.qsl.data(), d.lens.data(),
                             d.tables.data(), l.n_tokens, l.n_seqs, l.max_blocks_per_seq, b.block_size, b.n_heads,
                             b.n_kv_heads, b.head_dim, b.scale, true, b.max_query_len, scores, nullptr, 0, b.window,
                             d.trees());
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_LT(max_abs_diff(d.out.to_host(), want), 1e-4f) << what << " naive";
  for (const bool literal : {false, true}) {
    (literal ? lio::cuda::paged_attention_naive : lio::cuda::paged_attention)(
        d.q.data(), d.k.data(), d.v.data(), d.out.data(), d.qsl.data(), d.lens.data(), d.tables.data(), l.n_tokens,
        l.n_seqs, l.max_blocks_per_seq, b.block_size, b.n_heads, b.n_kv_heads, b.head_dim, b.scale, nullptr, b.window,
        d.trees());
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_LT(max_abs_diff(d.out.to_host(), want), 1e-4f) << what << (literal ? " paged naive" : " paged");
  }
  std::vector<uint16_t> k16(b.k.size()), v16(b.v.size());
  std::vector<float> k16f(b.k.size()), v16f(b.v.size());
  for (size_t i = 0; i < b.k.size(); ++i) {
    k16[i] = lio::f32_to_f16(b.k[i]), v16[i] = lio::f32_to_f16(b.v[i]);
    k16f[i] = lio::f16_to_f32(k16[i]), v16f[i] = lio::f16_to_f32(v16[i]);
  }
  DeviceBuffer<uint16_t> dk16 = DeviceBuffer<uint16_t>::from_host(k16), dv16 = DeviceBuffer<uint16_t>::from_host(v16);
  const lio::cuda::QuantizedKvLayer f16{lio::cuda::KvQuant::F16, dk16.data(), dv16.data(), nullptr, nullptr};
  lio::cuda::paged_attention_quantized(d.q.data(), f16, d.out.data(), d.qsl.data(), d.lens.data(), d.tables.data(),
                                       l.n_tokens, l.n_seqs, l.max_blocks_per_seq, b.block_size, b.n_heads,
                                       b.n_kv_heads, b.head_dim, b.scale, nullptr, b.window, d.trees());
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_LT(max_abs_diff(d.out.to_host(), b.cpu(k16f, v16f)), 1e-4f) << what << " paged f16";
}

const std::vector<int> kChain = {-1, 0, 1, 2, 3};
const std::vector<int> kBranching = {-1, 0, 0, 1, 1, 2, 5};

TEST(CudaTreeAttention, EveryKernelMatchesTheCpuOnMixedBatches) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const int32_t prefix : {0, 30, 62, 509, 1000}) {
    for (const int64_t window : {0, 3, 20}) {
      const TreeBatch b({{0, 37, {}}, {prefix + 3, 1, {}}, {prefix, 2, kChain}, {prefix + 2, 0, kBranching}}, window,
                        static_cast<uint32_t>(prefix + window));
      expect_kernels_match(b, "prefix " + std::to_string(prefix) + " window " + std::to_string(window));
    }
  }
}

// Trees of at most 4 nodes beside decode rows: max_query_len <= kFlashDecodeMaxQueryLen, so the
// flash kernel takes Flash-Decoding's split path with the trees.
TEST(CudaTreeAttention, DecodeSizedTreesTakeTheSplitPath) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const int64_t window : {0, 2}) {
    const TreeBatch b({{700, 1, {}}, {900, 0, {-1, 0, 0, 1}}, {2000, 1, {-1, 0, 1}}}, window, 5);
    ASSERT_LE(b.max_query_len, lio::cuda::kFlashDecodeMaxQueryLen);
    expect_kernels_match(b, "decode-sized, window " + std::to_string(window));
  }
}

}  // namespace
