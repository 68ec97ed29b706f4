// Chapter 03, Task 3: asymmetric round-to-nearest of one block, Q4_1 (INT4 with a minimum)
// (exercises/03_quantization/rtn.cpp): the exact bytes ggml writes, the error bound, and why
// asymmetry pays on a block that does not straddle zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "lio/dtype.h"
#include "lio/quantization.h"
#include "rtn_helpers.h"

namespace {
using namespace lio;

TEST(Ch03Task3, Q4_1OfARampByHand) {
  ch03::Block x{};
  for (int i = 0; i < 32; ++i) x[static_cast<size_t>(i)] = 1.0f + static_cast<float>(i) * 0.5f;  // 1 .. 16.5
  const BlockQ4_1 b = quantize_block_q4_1(x);
  EXPECT_EQ(b.m, f32_to_f16(1.0f));
  EXPECT_EQ(b.d, f32_to_f16(15.5f / 15.0f));
  EXPECT_EQ(b.qs[0] & 0x0F, 0);   // the minimum
  EXPECT_EQ(b.qs[15] >> 4, 15);   // element 31: the maximum
  EXPECT_EQ(b.qs[0] >> 4, 8);     // element 16: 8 / (15.5 / 15) + 0.5 = 8.24
}

TEST(Ch03Task3, Q4_1MatchesGgmlBitForBit) {
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    ch03::Block x = ch03::random_block(seed, 0.05f, static_cast<int>(seed % 32), seed % 4 == 0 ? -0.4f : 0.0f);
    if (seed % 3 == 0)
      for (float& v : x) v += 0.2f;  // blocks that do not straddle zero
    EXPECT_TRUE(ch03::same_bytes(quantize_block_q4_1(x), ch03::reference<BlockQ4_1>(DType::Q4_1, x))) << seed;
  }
  ch03::Block constant{};
  constant.fill(0.75f);  // max == min: d = 0, every q = 0, m carries the value
  const BlockQ4_1 c = quantize_block_q4_1(constant);
  EXPECT_TRUE(ch03::same_bytes(c, ch03::reference<BlockQ4_1>(DType::Q4_1, constant)));
  EXPECT_EQ(c.m, f32_to_f16(0.75f));
}

TEST(Ch03Task3, AsymmetricBeatsSymmetricOnAShiftedBlock) {
  // All weights in [0.2, 0.3]: Q4_0 spends half its levels on negatives it never uses.
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    ch03::Block x = ch03::random_block(seed, 0.02f);
    for (float& v : x) v = 0.25f + std::clamp(v, -0.05f, 0.05f);
    const BlockQ4_1 a = quantize_block_q4_1(x);
    const BlockQ4_0 s = ch03::reference<BlockQ4_0>(DType::Q4_0, x);
    float ya[32], ys[32];
    dequantize_row(DType::Q4_1, &a, ya, 32);
    dequantize_row(DType::Q4_0, &s, ys, 32);
    double ea = 0, es = 0;
    for (int i = 0; i < 32; ++i) {
      ea += std::pow(ya[i] - x[static_cast<size_t>(i)], 2);
      es += std::pow(ys[i] - x[static_cast<size_t>(i)], 2);
      EXPECT_LE(std::fabs(ya[i] - x[static_cast<size_t>(i)]), 0.5f * f16_to_f32(a.d) + 1e-3f) << seed << " " << i;
    }
    EXPECT_LT(ea, es / 4) << seed;
  }
}

}  // namespace
