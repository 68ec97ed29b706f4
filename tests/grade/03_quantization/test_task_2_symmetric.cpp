// Chapter 03, Task 2: symmetric round-to-nearest of one block, Q8_0 (INT8) and Q4_0 (INT4)
// (exercises/03_quantization/rtn.cpp): the exact bytes ggml writes, and the error bound.
#include <gtest/gtest.h>

#include <cmath>

#include "lio/dtype.h"
#include "lio/quantization.h"
#include "rtn_helpers.h"

namespace {
using namespace lio;

TEST(Ch03Task2, Q8_0OfARampByHand) {
  ch03::Block x{};
  for (int i = 0; i < 32; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i - 16) / 16.0f;  // -1 .. 0.9375
  const BlockQ8_0 b = quantize_block_q8_0(x);
  EXPECT_EQ(b.d, f32_to_f16(1.0f / 127.0f));
  EXPECT_EQ(b.qs[0], -127);  // -1 / d
  EXPECT_EQ(b.qs[16], 0);
  EXPECT_EQ(b.qs[20], 32);   // 0.25 * 127 = 31.75
  EXPECT_EQ(b.qs[31], 119);  // 0.9375 * 127 = 119.06
}

TEST(Ch03Task2, Q8_0MatchesGgmlBitForBit) {
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    const ch03::Block x = ch03::random_block(seed, 0.02f * static_cast<float>(seed % 7 + 1), seed % 32,
                                             seed % 3 == 0 ? 0.5f : 0.0f);
    EXPECT_TRUE(ch03::same_bytes(quantize_block_q8_0(x), ch03::reference<BlockQ8_0>(DType::Q8_0, x))) << seed;
  }
  const ch03::Block zeros{};
  EXPECT_TRUE(ch03::same_bytes(quantize_block_q8_0(zeros), ch03::reference<BlockQ8_0>(DType::Q8_0, zeros)));
}

TEST(Ch03Task2, Q4_0MatchesGgmlBitForBit) {
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    // Outliers of both signs: the scale follows the signed value of largest magnitude.
    const float outlier = seed % 2 == 0 ? 0.3f : -0.3f;
    const ch03::Block x = ch03::random_block(seed, 0.05f, static_cast<int>(seed % 32), seed % 5 == 0 ? outlier : 0.0f);
    EXPECT_TRUE(ch03::same_bytes(quantize_block_q4_0(x), ch03::reference<BlockQ4_0>(DType::Q4_0, x))) << seed;
  }
  const ch03::Block zeros{};
  EXPECT_TRUE(ch03::same_bytes(quantize_block_q4_0(zeros), ch03::reference<BlockQ4_0>(DType::Q4_0, zeros)));
}

TEST(Ch03Task2, DequantizedErrorIsAtMostHalfAStep) {
  for (uint32_t seed = 1; seed <= 50; ++seed) {
    const ch03::Block x = ch03::random_block(seed, 0.1f);
    const BlockQ8_0 q8 = quantize_block_q8_0(x);
    const BlockQ4_0 q4 = quantize_block_q4_0(x);
    float y8[32], y4[32];
    dequantize_row(DType::Q8_0, &q8, y8, 32);
    dequantize_row(DType::Q4_0, &q4, y4, 32);
    const float d8 = std::fabs(f16_to_f32(q8.d)), d4 = std::fabs(f16_to_f32(q4.d));
    for (int i = 0; i < 32; ++i) {
      // Half a step, plus the f16 rounding of d times |q| <= 127 (2^-11 relative).
      EXPECT_LE(std::fabs(y8[i] - x[static_cast<size_t>(i)]), 0.57f * d8) << seed << " Q8_0 " << i;
      // Q4_0's grid is [-8, 7] steps: the positive end can clip by up to one step.
      EXPECT_LE(std::fabs(y4[i] - x[static_cast<size_t>(i)]), 1.0f * d4 * 1.01f) << seed << " Q4_0 " << i;
    }
  }
}

}  // namespace
