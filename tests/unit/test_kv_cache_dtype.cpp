// The KV cache in f16 and int8 (--kv-cache-dtype, chapter 03): pool sizes, the dequantizing
// attention kernels against f32 attention on the same values, block copies and swap. The
// engine on f16 / int8 caches: test_engine.cpp (KvCacheDType*).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "flash_attention.h"
#include "cpu_ops.h"
#include "lio/cli_parse.h"
#include "lio/error.h"
#include "lio/kv_pool.h"
#include "lio/quantization.h"
#include "random_inputs.h"

namespace {
using lio::KvCacheDType;

lio::ModelConfig smollm2_shape() {
  lio::ModelConfig c;
  c.n_layers = 30;
  c.d_model = 576;
  c.n_heads = 9;
  c.n_kv_heads = 3;
  c.head_dim = 64;
  c.d_ff = 1536;
  c.context_length = 8192;
  return c;
}

TEST(KvCacheDType, BytesPerTokenAndBlock) {
  const lio::ModelConfig c = smollm2_shape();  // kv_dim 192
  EXPECT_EQ(lio::kv_slot_bytes(c, KvCacheDType::F32), 768);
  EXPECT_EQ(lio::kv_slot_bytes(c, KvCacheDType::F16), 384);
  EXPECT_EQ(lio::kv_slot_bytes(c, KvCacheDType::Int8), 192 + 3 * 4);  // codes + one f32 scale per KV head
  EXPECT_EQ(lio::kv_block_bytes(c, 16, KvCacheDType::F32), 2 * 30 * 16 * 768);
  EXPECT_EQ(lio::kv_block_bytes(c, 16), lio::kv_block_bytes(c, 16, KvCacheDType::F32));
  EXPECT_EQ(lio::kv_blocks_for_budget(c, 16, 100 << 20, KvCacheDType::Int8),
            (int64_t{100} << 20) / (2 * 30 * 16 * 204));
  const lio::HostKvPool pool(c, lio::KvPoolConfig{16, 4, KvCacheDType::Int8});
  EXPECT_EQ(pool.slot_bytes(), 204);
  EXPECT_EQ(pool.block_bytes(), 2 * 30 * 16 * 204);
  EXPECT_EQ(pool.size_bytes(), 4 * pool.block_bytes());
  EXPECT_EQ(pool.block_floats(), (pool.block_bytes() + 3) / 4);
  EXPECT_EQ(lio::parse_kv_cache_dtype("int8"), KvCacheDType::Int8);
  EXPECT_STREQ(lio::kv_cache_dtype_name(KvCacheDType::F16), "f16");
  EXPECT_THROW(lio::parse_kv_cache_dtype("int4"), lio::InvalidArgument);
}

TEST(KvCacheDType, QuantizedPoolsHaveNoF32View) {
  lio::HostKvPool pool(smollm2_shape(), lio::KvPoolConfig{16, 2, KvCacheDType::F16});
  EXPECT_THROW(pool.keys(0), lio::InternalError);
  EXPECT_EQ(pool.key_scales(0), nullptr);
  EXPECT_NE(pool.key_data(0), nullptr);
}

/// A pool layer of random K/V (n_slots, n_kv_heads, head_dim), its f16 and int8 encodings, and
/// the f32 values each encoding decodes to.
struct PoolLayer {
  int64_t n_slots, n_kv, hd;
  std::vector<float> k, v;                        // original
  std::vector<uint16_t> k16, v16;                 // f16 bits
  std::vector<float> k16f, v16f;                  // what they decode to
  std::vector<int8_t> k8, v8;                     // int8 codes
  std::vector<float> ks, vs;                      // (n_slots, n_kv) scales
  std::vector<float> k8f, v8f;                    // scale * code
};

PoolLayer make_pool_layer(int64_t n_slots, int64_t n_kv, int64_t hd, uint32_t seed) {
  PoolLayer p{n_slots, n_kv, hd};
  const auto n = static_cast<size_t>(n_slots * n_kv * hd);
  p.k = lio::testing::random_floats(n, -2.0f, 2.0f, seed);
  p.v = lio::testing::random_floats(n, -1.0f, 1.0f, seed + 1);
  for (size_t i = 0; i < n; i += 37) p.k[i] *= 8.0f;  // some outliers
  p.k16.resize(n);
  p.v16.resize(n);
  p.k16f.resize(n);
  p.v16f.resize(n);
  p.k8.resize(n);
  p.v8.resize(n);
  p.k8f.resize(n);
  p.v8f.resize(n);
  for (size_t i = 0; i < n; ++i) {
    p.k16[i] = lio::f32_to_f16(p.k[i]);
    p.v16[i] = lio::f32_to_f16(p.v[i]);
    p.k16f[i] = lio::f16_to_f32(p.k16[i]);
    p.v16f[i] = lio::f16_to_f32(p.v16[i]);
  }
  for (int64_t h = 0; h < n_slots * n_kv; ++h) {
    const auto at = static_cast<size_t>(h * hd);
    const auto len = static_cast<size_t>(hd);
    p.ks.push_back(lio::quantize_row_int8(std::span<const float>(p.k).subspan(at, len), std::span<int8_t>(p.k8).subspan(at, len)));
    p.vs.push_back(lio::quantize_row_int8(std::span<const float>(p.v).subspan(at, len), std::span<int8_t>(p.v8).subspan(at, len)));
    for (size_t d = at; d < at + len; ++d) {
      p.k8f[d] = p.ks.back() * p.k8[d];
      p.v8f[d] = p.vs.back() * p.v8[d];
    }
  }
  return p;
}

TEST(KvCacheDType, QuantizedAttentionIsF32AttentionOnTheDecodedValues) {
  // One decode row at position 22 (23 keys) through the engine's CPU kernel (chapter 07's
  // cpu::flash_attention), which dequantizes f16 / int8 tiles as it gathers them.
  const int64_t bs = 4, n_kv = 2, hd = 32, n_ctx = 23;
  const PoolLayer p = make_pool_layer(12 * bs, n_kv, hd, 5);
  const std::vector<int32_t> table = {7, 2, 11, 0, 5, 9};  // 6 blocks of 4 >= 23 positions
  const std::vector<int32_t> qsl = {0, 1}, seq_lens = {static_cast<int32_t>(n_ctx)};
  const std::vector<float> q = lio::testing::random_floats(static_cast<size_t>(n_kv * hd), -1.0f, 1.0f, 9);
  const lio::cpu::AttentionShape shape{n_kv, n_kv, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
  const lio::cpu::AttentionBatch batch{qsl.data(), seq_lens.data(), table.data(), 1, 6, bs, true};
  lio::cpu::FlashWorkspace ws;
  const auto attend = [&](const lio::cpu::PagedKvLayer& kv) {
    std::vector<float> out(static_cast<size_t>(n_kv * hd));
    lio::cpu::flash_attention(q.data(), kv, out.data(), nullptr, batch, shape, ws);
    return out;
  };
  using lio::cpu::KvElement;
  const std::vector<float> ref16 = attend({KvElement::F32, p.k16f.data(), p.v16f.data(), nullptr, nullptr});
  const std::vector<float> ref8 = attend({KvElement::F32, p.k8f.data(), p.v8f.data(), nullptr, nullptr});
  const std::vector<float> ref = attend({KvElement::F32, p.k.data(), p.v.data(), nullptr, nullptr});
  const std::vector<float> got16 = attend({KvElement::F16, p.k16.data(), p.v16.data(), nullptr, nullptr});
  const std::vector<float> got8 = attend({KvElement::Int8, p.k8.data(), p.v8.data(), p.ks.data(), p.vs.data()});
  double worst16 = 0, worst8 = 0;
  for (size_t d = 0; d < ref.size(); ++d) {
    // Same values as the f32 pool holds, widened the same way: the same bits.
    ASSERT_EQ(got16[d], ref16[d]) << "f16, element " << d;
    ASSERT_EQ(got8[d], ref8[d]) << "int8, element " << d;
    worst16 = std::max(worst16, static_cast<double>(std::fabs(got16[d] - ref[d])));
    worst8 = std::max(worst8, static_cast<double>(std::fabs(got8[d] - ref[d])));
  }
  // Against the unrounded cache: f16 is far closer than int8, and int8 is close.
  EXPECT_LT(worst16, 1e-3);
  EXPECT_LT(worst8, 2e-2);
  EXPECT_GT(worst8, worst16);
  std::vector<float> out(static_cast<size_t>(n_kv * hd));
  lio::cpu::AttentionBatch short_table = batch;
  short_table.max_blocks_per_seq = 2;  // a table too short for 23 positions
  EXPECT_THROW(lio::cpu::flash_attention(q.data(), {KvElement::Int8, p.k8.data(), p.v8.data(), p.ks.data(), p.vs.data()},
                                         out.data(), nullptr, short_table, shape, ws),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cpu::flash_attention(q.data(), {KvElement::Int8, p.k8.data(), p.v8.data(), nullptr, nullptr},
                                         out.data(), nullptr, batch, shape, ws),
               lio::InvalidArgument);  // int8 without its scales
}

TEST(KvCacheDType, BlockCopyAndSwapRoundTripEveryByte) {
  for (KvCacheDType dt : {KvCacheDType::F32, KvCacheDType::F16, KvCacheDType::Int8}) {
    lio::ModelConfig c = smollm2_shape();
    c.n_layers = 2;
    lio::HostKvPool pool(c, lio::KvPoolConfig{4, 3, dt});
    for (int64_t l = 0; l < 2; ++l) {  // fill block 1 with a pattern
      const int64_t bytes = 4 * c.kv_dim() * (dt == KvCacheDType::F32 ? 4 : dt == KvCacheDType::F16 ? 2 : 1);
      auto* k = static_cast<std::byte*>(pool.key_data(l)) + bytes;
      auto* v = static_cast<std::byte*>(pool.value_data(l)) + bytes;
      for (int64_t i = 0; i < bytes; ++i) {
        k[i] = static_cast<std::byte>((i * 7 + l) & 0x7f);
        v[i] = static_cast<std::byte>((i * 3 + l + 1) & 0x7f);
      }
      if (dt == KvCacheDType::Int8)
        for (int64_t i = 0; i < 4 * c.n_kv_heads; ++i) {
          pool.key_scales(l)[4 * c.n_kv_heads + i] = 0.5f + static_cast<float>(i);
          pool.value_scales(l)[4 * c.n_kv_heads + i] = 1.5f + static_cast<float>(i + l);
        }
    }
    std::vector<float> host(static_cast<size_t>(pool.block_floats())), again(host.size());
    pool.copy_block_to_host(1, host.data());
    pool.copy_block(1, 2);
    pool.copy_block_to_host(2, again.data());
    EXPECT_EQ(std::memcmp(host.data(), again.data(), static_cast<size_t>(pool.block_bytes())), 0) << kv_cache_dtype_name(dt);
    pool.copy_block_from_host(host.data(), 0);
    pool.copy_block_to_host(0, again.data());
    EXPECT_EQ(std::memcmp(host.data(), again.data(), static_cast<size_t>(pool.block_bytes())), 0) << kv_cache_dtype_name(dt);
    EXPECT_THROW(pool.copy_block(0, 3), lio::InvalidArgument);
  }
}

}  // namespace
