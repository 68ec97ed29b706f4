// Chapter 01, Task 1: KV-cache size and tokens per GiB (exercises/01_kv_cache/kv_sizing.cpp).
#include <gtest/gtest.h>

#include "configs.h"
#include "lio/error.h"
#include "lio/kv_sizing.h"

namespace {
using namespace lio;
using namespace lio::grade;

TEST(Ch01Task1, Llama7bOneSequenceIs2GiB) {
  // 2 x 32 layers x 32 KV heads x 128 x 4096 tokens x 2 bytes = 2^31 bytes.
  EXPECT_EQ(kv_cache_bytes(llama_7b(), 4096, 1, KvDtype::F16), int64_t{2147483648});
}

TEST(Ch01Task1, Llama7bBatch16Is32GiB) {
  EXPECT_EQ(kv_cache_bytes(llama_7b(), 4096, 16, KvDtype::F16), gib(32));
}

TEST(Ch01Task1, Llama2_70bUsesItsEightKvHeads) {
  // GQA: 8 KV heads, not 64 query heads -> 1.25 GiB at 4096 tokens (MHA would be 10 GiB).
  EXPECT_EQ(kv_cache_bytes(llama2_70b(), 4096, 1, KvDtype::F16), gib(1.25));
}

TEST(Ch01Task1, Llama31_8bIsAnEighthGiBAt1k) {
  // 0.125 GiB with its 8 KV heads; a formula using n_heads (32) would say 0.5 GiB.
  const int64_t bytes = kv_cache_bytes(llama31_8b(), 1024, 1, KvDtype::F16);
  EXPECT_EQ(bytes, gib(0.125));
  EXPECT_NE(bytes, gib(0.5));
}

TEST(Ch01Task1, ScalesWithDtypeAndBatch) {
  const ModelConfig c = smollm2_135m();
  EXPECT_EQ(kv_cache_bytes(c, 1, 1, KvDtype::F32), 46080);  // what `lio info` reports
  EXPECT_EQ(kv_cache_bytes(c, 100, 3, KvDtype::F16), 3 * 100 * 23040);
  EXPECT_EQ(kv_cache_bytes(c, 100, 3, KvDtype::INT8), 3 * 100 * 11520);
  EXPECT_EQ(kv_cache_bytes(c, 0, 8, KvDtype::F16), 0);
}

TEST(Ch01Task1, TokensPerGiB) {
  EXPECT_DOUBLE_EQ(kv_tokens_per_gib(llama_7b(), KvDtype::F16), 2048.0);
  EXPECT_DOUBLE_EQ(kv_tokens_per_gib(llama31_8b(), KvDtype::F16), 8192.0);
  EXPECT_NEAR(kv_tokens_per_gib(smollm2_135m(), KvDtype::F32), 1073741824.0 / 46080.0, 1e-9);
}

TEST(Ch01Task1, RejectsNegativeSizes) {
  EXPECT_THROW(kv_cache_bytes(llama_7b(), -1, 1, KvDtype::F16), InvalidArgument);
  EXPECT_THROW(kv_cache_bytes(llama_7b(), 16, -2, KvDtype::F16), InvalidArgument);
}

}  // namespace
