// Chapter 02, Task 2: the bytes one token leaves in an MLA model's KV cache
// (exercises/02_gqa_mla/mla.cpp). Shapes from DeepSeek-AI 2024, "DeepSeek-V2", sec. 2.1.4 and
// Table 1, and its DeepSeek-V2-Lite config; the engine's KV pool sizes an MLA block with it.
#include <gtest/gtest.h>

#include "lio/error.h"
#include "lio/kv_pool.h"
#include "lio/mla.h"
#include "lio/model_config.h"

namespace {
using namespace lio;

// DeepSeek-V2: 60 layers, 128 heads, d_h = 128, d_c = 512, d_h^R = 64. n_kv_heads and head_dim
// are what an MHA model of the same heads would cache: a GQA formula applied here is wrong.
ModelConfig deepseek_v2() {
  ModelConfig c;
  c.n_layers = 60;
  c.d_model = 5120;
  c.n_heads = 128;
  c.n_kv_heads = 128;
  c.head_dim = 128;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  return c;
}

// MHA with DeepSeek-V2's heads: K and V of 128 heads of 128, 60 layers, 2 bytes.
constexpr double kDeepSeekV2MhaBytesF16 = 2.0 * 128 * 128 * 60 * 2;  // 3,932,160

TEST(Ch02Task2, DeepSeekV2AtF16) {
  // (512 + 64) x 60 layers x 2 bytes.
  EXPECT_EQ(mla_latent_bytes_per_token(deepseek_v2(), 2), 69120);
}

TEST(Ch02Task2, DeepSeekV2EqualsGqaWithTwoAndAQuarterGroups) {
  // Table 1: (d_c + d_h^R) l = (9/2) d_h l, the cache of GQA with 2.25 groups of d_h = 128.
  const double gqa_group_bytes = 2.0 * 128 * 60 * 2;  // one K/V head pair, every layer, f16
  EXPECT_DOUBLE_EQ(static_cast<double>(mla_latent_bytes_per_token(deepseek_v2(), 2)) / gqa_group_bytes, 2.25);
}

TEST(Ch02Task2, DeepSeekV2AgainstMhaOfTheSameHeads) {
  // 2 x 128 x 128 = 32,768 values per layer against 576: 512/9 = 56.9 times fewer.
  EXPECT_DOUBLE_EQ(kDeepSeekV2MhaBytesF16 / static_cast<double>(mla_latent_bytes_per_token(deepseek_v2(), 2)),
                   512.0 / 9.0);
}

TEST(Ch02Task2, DeepSeekV2LiteInTheEnginesF32Pool) {
  // DeepSeek-V2-Lite: 27 layers, 16 heads, the same d_c = 512 and d_h^R = 64: 27 x 576 x 4.
  ModelConfig c = deepseek_v2();
  c.n_layers = 27;
  c.n_heads = c.n_kv_heads = 16;
  EXPECT_EQ(mla_latent_bytes_per_token(c, 4), 62208);
}

TEST(Ch02Task2, IndependentOfTheHeads) {
  // Nothing MLA caches is per head: the latent is shared, and so is the one RoPE key.
  ModelConfig c = deepseek_v2();
  c.n_heads = c.n_kv_heads = 16;
  c.head_dim = 192;
  c.qk_nope_head_dim = 192;
  c.v_head_dim = 256;
  EXPECT_EQ(mla_latent_bytes_per_token(c, 2), 69120);
}

TEST(Ch02Task2, LatentAndRopeKeyEachCountedOnce) {
  // 2 layers, 4 heads, d_c 32, d_h^R 4, f32: 2 x 36 x 4 = 288. A factor 2 for K and V gives 576,
  // a RoPE key per head 384, no RoPE key 256.
  ModelConfig c;
  c.n_layers = 2;
  c.n_heads = c.n_kv_heads = 4;
  c.head_dim = 16;
  c.kv_lora_rank = 32;
  c.qk_nope_head_dim = 16;
  c.qk_rope_head_dim = 4;
  c.v_head_dim = 16;
  EXPECT_EQ(mla_latent_bytes_per_token(c, 4), 288);
}

TEST(Ch02Task2, WithoutRopeKey) {
  ModelConfig c = deepseek_v2();
  c.n_layers = 3;
  c.kv_lora_rank = 96;
  c.qk_rope_head_dim = 0;
  EXPECT_EQ(mla_latent_bytes_per_token(c, 2), 576);  // 3 x 96 x 2
}

TEST(Ch02Task2, ThePoolSizesMlaBlocksWithIt) {
  // The engine's f32 pool: a 16-token block of DeepSeek-V2 latents, 16 x 60 x 576 x 4 bytes.
  EXPECT_EQ(kv_block_bytes(deepseek_v2(), 16, KvCacheDType::F32), 2211840);
}

TEST(Ch02Task2, RejectsAGqaConfig) {
  ModelConfig c = deepseek_v2();
  c.kv_lora_rank = 0;
  c.qk_rope_head_dim = 0;
  EXPECT_THROW(mla_latent_bytes_per_token(c, 2), InvalidArgument);
}

TEST(Ch02Task2, RejectsBadCounts) {
  EXPECT_THROW(mla_latent_bytes_per_token(deepseek_v2(), 0), InvalidArgument);
  ModelConfig c = deepseek_v2();
  c.qk_rope_head_dim = -64;
  EXPECT_THROW(mla_latent_bytes_per_token(c, 2), InvalidArgument);
  c = deepseek_v2();
  c.n_layers = 0;
  EXPECT_THROW(mla_latent_bytes_per_token(c, 2), InvalidArgument);
}

}  // namespace
