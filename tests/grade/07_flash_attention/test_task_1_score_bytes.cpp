// Chapter 07, Task 1: the bytes of the score matrix standard attention materializes
// (exercises/07_flash_attention/flash_attention.cpp, attention_score_bytes).
#include <gtest/gtest.h>

#include <limits>

#include "flash_attention.h"
#include "lio/error.h"

namespace {
using lio::cpu::attention_score_bytes;

TEST(Ch07Task1, LectureNoteBatchTwoThirtyTwoHeadsFourKInFp16IsTwoPointOneFiveGB) {
  // Lecture note 003, section 6.2: batch 2, 32 heads, N = 4,096, fp16.
  const int64_t bytes = attention_score_bytes(2, 32, 4096, 4096, 2);
  EXPECT_EQ(bytes, 2147483648LL);  // 2.15 GB = exactly 2 GiB
}

TEST(Ch07Task1, ThisModelsScoresPerLayerInF32) {
  // SmolLM2-135M: 9 query heads; one sequence of 8,192 tokens, f32 scores: 2.25 GiB per layer.
  EXPECT_EQ(attention_score_bytes(1, 9, 8192, 8192, 4), 9LL * 8192 * 8192 * 4);
  // Quadratic in N: twice the tokens, four times the bytes.
  EXPECT_EQ(attention_score_bytes(1, 9, 4096, 4096, 4) * 4, attention_score_bytes(1, 9, 8192, 8192, 4));
}

TEST(Ch07Task1, DecodeRowsAndChunksAreRectangles) {
  // A decode step: one query against 4,096 keys, 32 sequences, 32 heads, fp16.
  EXPECT_EQ(attention_score_bytes(32, 32, 1, 4096, 2), 32LL * 32 * 4096 * 2);
  // A prefill chunk of 512 queries over a 2,048-token context.
  EXPECT_EQ(attention_score_bytes(1, 9, 512, 2048, 4), 9LL * 512 * 2048 * 4);
  EXPECT_EQ(attention_score_bytes(0, 32, 4096, 4096, 2), 0);
}

TEST(Ch07Task1, RejectsNegativesAndOverflow) {
  EXPECT_THROW(attention_score_bytes(-1, 32, 4096, 4096, 2), lio::InvalidArgument);
  EXPECT_THROW(attention_score_bytes(1, 32, 4096, -4096, 2), lio::InvalidArgument);
  EXPECT_THROW(attention_score_bytes(1, 32, 4096, 4096, -2), lio::InvalidArgument);
  const int64_t big = std::numeric_limits<int64_t>::max() / 2;
  EXPECT_THROW(attention_score_bytes(big, 2, 2, 2, 2), lio::InvalidArgument);
  EXPECT_THROW(attention_score_bytes(1 << 20, 1 << 20, 1 << 20, 1 << 20, 2), lio::InvalidArgument);
}

}  // namespace
