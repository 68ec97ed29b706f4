// Chapter 01, Task 2: largest batch under a memory budget (exercises/01_kv_cache/kv_sizing.cpp).
#include <gtest/gtest.h>

#include "configs.h"
#include "lio/error.h"
#include "lio/kv_sizing.h"

namespace {
using namespace lio;
using namespace lio::grade;

TEST(Ch01Task2, Llama7bIn40GiBWith14GiBOfWeights) {
  // (40 - 14) GiB / 2 GiB per 4096-token sequence = 13.
  EXPECT_EQ(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, gib(40), gib(14)), 13);
}

TEST(Ch01Task2, DecimalGigabytesGiveTwelve) {
  // 26e9 bytes / 2.147e9 bytes per sequence = 12.1 -> 12: GB is not GiB.
  EXPECT_EQ(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, gb(40), gb(14)), 12);
}

TEST(Ch01Task2, GqaFitsMoreSequences) {
  // Llama 3.1 8B at 8192 tokens: 1 GiB per sequence; (80 - 16) GiB -> 64.
  EXPECT_EQ(max_batch_under_budget(llama31_8b(), 8192, KvDtype::F16, gib(80), gib(16)), 64);
}

TEST(Ch01Task2, ExactFitAndOneByteShort) {
  const ModelConfig c = smollm2_135m();
  const int64_t per_seq = 46080 * 512;  // f32, 512 tokens
  EXPECT_EQ(max_batch_under_budget(c, 512, KvDtype::F32, 1000 + 3 * per_seq, 1000), 3);
  EXPECT_EQ(max_batch_under_budget(c, 512, KvDtype::F32, 1000 + 3 * per_seq - 1, 1000), 2);
}

TEST(Ch01Task2, NothingFitsReturnsZero) {
  EXPECT_EQ(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, gib(14), gib(14)), 0);
  EXPECT_EQ(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, gib(10), gib(14)), 0);
  EXPECT_EQ(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, gib(15.5), gib(14)), 0);
}

TEST(Ch01Task2, RejectsBadArguments) {
  EXPECT_THROW(max_batch_under_budget(llama_7b(), 0, KvDtype::F16, gib(40), gib(14)), InvalidArgument);
  EXPECT_THROW(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, -1, gib(14)), InvalidArgument);
  EXPECT_THROW(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, gib(40), -5), InvalidArgument);
}

}  // namespace
