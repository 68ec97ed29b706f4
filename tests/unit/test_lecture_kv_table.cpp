// test_lecture_kv_table.cpp — lecture note 000's KV-cache table, recomputed with chapter 01's
// kv_cache_bytes (Task 1, reference solution) and the models' real KV heads: the note multiplied by
// the query heads (32 for Llama 3.1 8B, 64 for the 70B), so both rows came out too large (by 4x and
// 8x). The corrected cells, in GiB, are the ones docs/01_kv_cache.md prints; and at 128K tokens the
// 8B's cache (16 GiB) outgrows its bf16 weights (8.03e9 x 2 bytes = 14.96 GiB), the note's claim,
// which holds with the right head count too.
#include <gtest/gtest.h>

#include "lio/kv_sizing.h"
#include "lio/model_config.h"

namespace {

lio::ModelConfig llama(int64_t layers, int64_t heads, int64_t kv_heads) {
  lio::ModelConfig c;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = 128;
  c.d_model = heads * 128;
  return c;
}

double gib_of(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(lio::gib(1)); }

TEST(LectureNote000KvTable, CorrectedWithTheKvHeads) {
  const lio::ModelConfig l8b = llama(32, 32, 8), l70b = llama(80, 64, 8);
  const int64_t k1 = 1024, k8 = 8 * 1024, k128 = 128 * 1024;
  EXPECT_DOUBLE_EQ(gib_of(lio::kv_cache_bytes(l8b, k1, 1, lio::KvDtype::F16)), 0.125);
  EXPECT_DOUBLE_EQ(gib_of(lio::kv_cache_bytes(l8b, k8, 1, lio::KvDtype::F16)), 1.0);
  EXPECT_DOUBLE_EQ(gib_of(lio::kv_cache_bytes(l8b, k128, 1, lio::KvDtype::F16)), 16.0);
  EXPECT_DOUBLE_EQ(gib_of(lio::kv_cache_bytes(l70b, k1, 1, lio::KvDtype::F16)), 0.3125);
  EXPECT_DOUBLE_EQ(gib_of(lio::kv_cache_bytes(l70b, k8, 1, lio::KvDtype::F16)), 2.5);
  EXPECT_DOUBLE_EQ(gib_of(lio::kv_cache_bytes(l70b, k128, 1, lio::KvDtype::F16)), 40.0);
  // The note's cells come back when the query heads stand in for the KV heads: the mistake.
  EXPECT_DOUBLE_EQ(gib_of(lio::kv_cache_bytes(llama(32, 32, 32), k128, 1, lio::KvDtype::F16)), 64.0);
  EXPECT_DOUBLE_EQ(gib_of(lio::kv_cache_bytes(llama(80, 64, 64), k128, 1, lio::KvDtype::F16)), 320.0);
  // "The KV cache can exceed the weights": the 8B at 128K, 16 GiB against 14.96 GiB of bf16 weights.
  EXPECT_GT(lio::kv_cache_bytes(l8b, k128, 1, lio::KvDtype::F16), static_cast<int64_t>(8.03e9 * 2));
}

// Lecture note 001's LLaMA-7B example: 2,048 tokens in fp16 take 1,073,741,824 bytes (1.07 GB = 1 GiB)
// per sequence, 34.4 GB at batch 32.
TEST(LectureNote001KvExample, LlamaSevenBAt2048Tokens) {
  const lio::ModelConfig l7b = llama(32, 32, 32);
  EXPECT_EQ(lio::kv_cache_bytes(l7b, 2048, 1, lio::KvDtype::F16), 1073741824);
  EXPECT_NEAR(static_cast<double>(lio::kv_cache_bytes(l7b, 2048, 32, lio::KvDtype::F16)) / 1e9, 34.36, 0.01);
}

}  // namespace
