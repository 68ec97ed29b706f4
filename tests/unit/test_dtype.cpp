// test_dtype.cpp — dtype tables, f16/bf16 conversion, and Q8_0/Q4_0/Q4_1 (de)quantization
// against hand-worked blocks (layouts: ggml-common.h; rounding: ggml-quants.c *_ref).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "lio/dtype.h"
#include "lio/error.h"
#include "random_inputs.h"

namespace {

using lio::DType;

// f16 bit patterns used below (IEEE binary16: 1 sign, 5 exponent, 10 mantissa bits).
constexpr uint16_t kF16Half = 0x3800;          // 0.5
constexpr uint16_t kF16Quarter = 0x3400;       // 0.25
constexpr uint16_t kF16One = 0x3c00;           // 1.0
constexpr uint16_t kF16MinusOne = 0xbc00;      // -1.0
constexpr uint16_t kF16MinusQuarter = 0xb400;  // -0.25

std::vector<std::byte> as_bytes(const void* p, size_t n) {
  std::vector<std::byte> out(n);
  std::memcpy(out.data(), p, n);
  return out;
}

// =========================================================================================
// Tables
// =========================================================================================

TEST(Dtype, GgmlIdsAndNames) {
  EXPECT_EQ(lio::dtype_from_ggml(0), DType::F32);
  EXPECT_EQ(lio::dtype_from_ggml(1), DType::F16);
  EXPECT_EQ(lio::dtype_from_ggml(2), DType::Q4_0);
  EXPECT_EQ(lio::dtype_from_ggml(3), DType::Q4_1);
  EXPECT_EQ(lio::dtype_from_ggml(6), DType::Q5_0);  // read only
  EXPECT_EQ(lio::dtype_from_ggml(7), DType::Q5_1);
  EXPECT_EQ(lio::dtype_from_ggml(8), DType::Q8_0);
  EXPECT_EQ(lio::dtype_from_ggml(30), DType::BF16);
  EXPECT_EQ(lio::dtype_from_ggml(12), DType::Q4_K);  // read only
  EXPECT_EQ(lio::dtype_from_ggml(14), DType::Q6_K);
  EXPECT_FALSE(lio::dtype_from_ggml(13).has_value());  // Q5_K
  EXPECT_FALSE(lio::dtype_from_ggml(11).has_value());  // Q3_K
  EXPECT_FALSE(lio::dtype_from_ggml(4000).has_value());
  EXPECT_EQ(lio::dtype_from_ggml(1000), DType::Q3_0);  // LIO's own packed 3-bit blocks
  EXPECT_EQ(lio::dtype_from_ggml(1001), DType::Q3_1);
  EXPECT_EQ(lio::ggml_type_name(1000), "Q3_0");

  EXPECT_EQ(lio::ggml_type_name(0), "F32");
  EXPECT_EQ(lio::ggml_type_name(8), "Q8_0");
  EXPECT_EQ(lio::ggml_type_name(12), "Q4_K");
  EXPECT_EQ(lio::ggml_type_name(14), "Q6_K");
  EXPECT_EQ(lio::ggml_type_name(23), "IQ4_XS");
  EXPECT_EQ(lio::ggml_type_name(29), "IQ1_M");
  EXPECT_EQ(lio::ggml_type_name(30), "BF16");
  EXPECT_EQ(lio::ggml_type_name(35), "TQ2_0");
  EXPECT_EQ(lio::ggml_type_name(4), "type4");    // removed Q4_2
  EXPECT_EQ(lio::ggml_type_name(33), "type33");  // removed Q4_0_8_8
  EXPECT_EQ(lio::ggml_type_name(123), "type123");
}

TEST(Dtype, InfoMatchesGgmlLayouts) {
  EXPECT_EQ(lio::dtype_info(DType::F32).block_bytes, 4);
  EXPECT_EQ(lio::dtype_info(DType::F16).block_bytes, 2);
  EXPECT_EQ(lio::dtype_info(DType::BF16).block_bytes, 2);
  EXPECT_EQ(lio::dtype_info(DType::Q4_0).block_bytes, 18);
  EXPECT_EQ(lio::dtype_info(DType::Q4_1).block_bytes, 20);
  EXPECT_EQ(lio::dtype_info(DType::Q8_0).block_bytes, 34);
  EXPECT_EQ(lio::dtype_info(DType::Q8_0).block_elems, 32);
  EXPECT_EQ(lio::dtype_info(DType::Q4_1).name, "Q4_1");
}

TEST(Dtype, RowBytes) {
  EXPECT_EQ(lio::dtype_row_bytes(DType::F32, 10), 40);
  EXPECT_EQ(lio::dtype_row_bytes(DType::BF16, 3), 6);
  EXPECT_EQ(lio::dtype_row_bytes(DType::F16, 0), 0);
  EXPECT_EQ(lio::dtype_row_bytes(DType::Q8_0, 32), 34);
  EXPECT_EQ(lio::dtype_row_bytes(DType::Q4_0, 64), 36);
  EXPECT_EQ(lio::dtype_row_bytes(DType::Q4_1, 576), 18 * 20);
}

TEST(Dtype, RowBytesRejectsPartialBlocksAndNegativeCounts) {
  EXPECT_THROW(lio::dtype_row_bytes(DType::Q4_0, 33), lio::InvalidArgument);
  EXPECT_THROW(lio::dtype_row_bytes(DType::Q8_0, 16), lio::InvalidArgument);
  EXPECT_THROW(lio::dtype_row_bytes(DType::F32, -1), lio::InvalidArgument);
  EXPECT_THROW(lio::dtype_row_bytes(DType::F32, std::numeric_limits<int64_t>::max() / 2),
               lio::InvalidArgument);  // byte count overflows
  try {
    lio::dtype_row_bytes(DType::Q4_1, 40);
    FAIL() << "expected InvalidArgument";
  } catch (const lio::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("Q4_1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("40"), std::string::npos) << e.what();
  }
}

// =========================================================================================
// f16 / bf16
// =========================================================================================

TEST(Dtype, F16ToF32KnownValues) {
  EXPECT_EQ(lio::f16_to_f32(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(lio::f16_to_f32(0x8000)));
  EXPECT_EQ(lio::f16_to_f32(kF16One), 1.0f);
  EXPECT_EQ(lio::f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(lio::f16_to_f32(kF16Half), 0.5f);
  EXPECT_EQ(lio::f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(lio::f16_to_f32(0x7bff), 65504.0f);                  // largest finite
  EXPECT_EQ(lio::f16_to_f32(0x0400), 6.103515625e-05f);          // smallest normal, 2^-14
  EXPECT_EQ(lio::f16_to_f32(0x0001), 5.9604644775390625e-08f);   // smallest subnormal, 2^-24
  EXPECT_EQ(lio::f16_to_f32(0x03ff), 6.09755516052246094e-05f);  // largest subnormal
  EXPECT_EQ(lio::f16_to_f32(0x8001), -5.9604644775390625e-08f);
  EXPECT_EQ(lio::f16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(lio::f16_to_f32(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(lio::f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(lio::f16_to_f32(0x7c01)));  // signalling NaN stays NaN
}

TEST(Dtype, F32ToF16RoundsToNearestEven) {
  EXPECT_EQ(lio::f32_to_f16(1.0f), kF16One);
  EXPECT_EQ(lio::f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(lio::f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(lio::f32_to_f16(65519.0f), 0x7bff);  // below the 65520 midpoint
  EXPECT_EQ(lio::f32_to_f16(65520.0f), 0x7c00);  // midpoint, ties to even = Inf
  EXPECT_EQ(lio::f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(lio::f32_to_f16(-1e6f), 0xfc00);
  EXPECT_EQ(lio::f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to the even mantissa (1.0).
  EXPECT_EQ(lio::f32_to_f16(1.0f + 0x1.0p-11f), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between mantissas 1 and 2: ties to 2.
  EXPECT_EQ(lio::f32_to_f16(1.0f + 0x3.0p-11f), 0x3c02);
  EXPECT_EQ(lio::f32_to_f16(1.0f + 0x1.0p-11f + 0x1.0p-20f), 0x3c01);  // above the tie
  // Subnormals: multiples of 2^-24.
  EXPECT_EQ(lio::f32_to_f16(0x1.0p-24f), 0x0001);
  EXPECT_EQ(lio::f32_to_f16(0x1.0p-25f), 0x0000);  // tie, to even (0)
  EXPECT_EQ(lio::f32_to_f16(0x3.0p-25f), 0x0002);  // 1.5 units, tie, to even (2)
  EXPECT_EQ(lio::f32_to_f16(0x1.2p-25f), 0x0001);  // just above half a unit
  EXPECT_EQ(lio::f32_to_f16(0x1.0p-30f), 0x0000);  // underflows to zero
  EXPECT_EQ(lio::f32_to_f16(-0x1.0p-24f), 0x8001);
  EXPECT_EQ(lio::f32_to_f16(0x3ffp-24f), 0x03ff);  // largest subnormal
  EXPECT_EQ(lio::f32_to_f16(0x7ffp-25f), 0x0400);  // rounds up into the smallest normal
  EXPECT_EQ(lio::f32_to_f16(-0.0f), 0x8000);
  const uint16_t nan = lio::f32_to_f16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
}

TEST(Dtype, F16RoundTripsEveryBitPatternAndRoundsEveryMidpoint) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float f = lio::f16_to_f32(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(lio::f16_to_f32(lio::f32_to_f16(f)))) << std::hex << h;
      continue;
    }
    ASSERT_EQ(lio::f32_to_f16(f), bits) << std::hex << h;
  }
  // Between each pair of adjacent positive finite halves: the midpoint ties to the even
  // one, and the floats just either side of it round to the nearer half.
  for (uint16_t lo = 0; lo < 0x7bff; ++lo) {
    const uint16_t hi = static_cast<uint16_t>(lo + 1);
    const float flo = lio::f16_to_f32(lo);
    const float fhi = lio::f16_to_f32(hi);
    const float mid = (flo + fhi) / 2;  // exact: halves have 11 significant bits
    ASSERT_EQ(lio::f32_to_f16(mid), (lo % 2 == 0) ? lo : hi) << std::hex << lo;
    ASSERT_EQ(lio::f32_to_f16(std::nextafter(mid, 0.0f)), lo) << std::hex << lo;
    ASSERT_EQ(lio::f32_to_f16(std::nextafter(mid, 1e9f)), hi) << std::hex << lo;
  }
}

TEST(Dtype, Bf16Conversions) {
  EXPECT_EQ(lio::bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(lio::bf16_to_f32(0xc040), -3.0f);
  EXPECT_EQ(lio::bf16_to_f32(0x0001), 0x1.0p-133f);  // smallest subnormal
  EXPECT_EQ(lio::bf16_to_f32(0x7f80), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(lio::bf16_to_f32(0x7fc0)));

  EXPECT_EQ(lio::f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(lio::f32_to_bf16(-3.0f), 0xc040);
  EXPECT_EQ(lio::f32_to_bf16(1.0f + 0x1.0p-8f), 0x3f80);  // tie, to even
  EXPECT_EQ(lio::f32_to_bf16(1.0f + 0x3.0p-8f), 0x3f82);  // tie, to even
  EXPECT_EQ(lio::f32_to_bf16(1.0f + 0x1.0p-8f + 0x1.0p-20f), 0x3f81);
  EXPECT_EQ(lio::f32_to_bf16(0x1.0p-133f), 0x0001);                        // subnormal kept
  EXPECT_EQ(lio::f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to Inf
  EXPECT_EQ(lio::f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  // A NaN whose payload lives only in the low 16 bits must not become Inf.
  const float low_payload_nan = std::bit_cast<float>(0x7f800001u);
  EXPECT_TRUE(std::isnan(lio::bf16_to_f32(lio::f32_to_bf16(low_payload_nan))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = lio::bf16_to_f32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(lio::f32_to_bf16(f), h) << std::hex << h;
    }
  }
}

// =========================================================================================
// Dequantization of hand-built blocks
// =========================================================================================

TEST(Dtype, DequantizeQ8_0HandWorkedBlocks) {
  lio::BlockQ8_0 blocks[2];
  blocks[0].d = kF16Half;
  blocks[1].d = kF16MinusQuarter;
  const int8_t qs0[32] = {-128, -100, -17, -3, -2, -1, 0, 1, 2, 3, 5, 8, 13, 21, 34, 55,
                          89,   127,  0,   0,  0,  0,  0, 0, 0, 0, 0, 0, 0,  0,  4,  -4};
  const float expected0[32] = {-64, -50, -8.5, -1.5, -1,   -0.5, 0,    0.5, 1, 1.5, 2.5,
                               4,   6.5, 10.5, 17,   27.5, 44.5, 63.5, 0,   0, 0,   0,
                               0,   0,   0,    0,    0,    0,    0,    0,   2, -2};
  std::memcpy(blocks[0].qs, qs0, 32);
  for (int j = 0; j < 32; ++j) blocks[1].qs[j] = static_cast<int8_t>(j - 16);

  // At an odd address: blocks inside a mapped file are not aligned.
  std::vector<std::byte> buf(1 + sizeof(blocks));
  std::memcpy(buf.data() + 1, blocks, sizeof(blocks));
  float out[64];
  lio::dequantize_row(DType::Q8_0, buf.data() + 1, out, 64);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], expected0[j]) << j;
  // Second block: q = j - 16, d = -0.25 -> 4.0, 3.75, ..., -3.75.
  EXPECT_EQ(out[32 + 0], 4.0f);
  EXPECT_EQ(out[32 + 1], 3.75f);
  EXPECT_EQ(out[32 + 16], -0.0f);
  EXPECT_EQ(out[32 + 31], -3.75f);
}

TEST(Dtype, DequantizeQ4_0HandWorkedBlock) {
  // d = 0.5; qs[j] low nibble (element j) = 15 - j, high nibble (element j + 16) = j.
  lio::BlockQ4_0 block;
  block.d = kF16Half;
  for (int j = 0; j < 16; ++j) block.qs[j] = static_cast<uint8_t>((15 - j) | (j << 4));
  // x = d * (q - 8)
  const float expected[32] = {3.5,  3.0,  2.5,  2.0,  1.5,  1.0,  0.5,  0.0,   // q 15..8
                              -0.5, -1.0, -1.5, -2.0, -2.5, -3.0, -3.5, -4.0,  // q 7..0
                              -4.0, -3.5, -3.0, -2.5, -2.0, -1.5, -1.0, -0.5,  // q 0..7
                              0.0,  0.5,  1.0,  1.5,  2.0,  2.5,  3.0,  3.5};  // q 8..15
  float out[32];
  lio::dequantize_row(DType::Q4_0, &block, out, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], expected[j]) << j;
}

TEST(Dtype, DequantizeQ4_1HandWorkedBlock) {
  // d = 0.25, m = -1; qs[j] low nibble (element j) = j, high nibble (element j + 16) = 15 - j.
  lio::BlockQ4_1 block;
  block.d = kF16Quarter;
  block.m = kF16MinusOne;
  for (int j = 0; j < 16; ++j) block.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  // x = d * q + m
  const float expected[32] = {-1.0, -0.75, -0.5, -0.25, 0.0,   0.25, 0.5,   0.75,   // q 0..7
                              1.0,  1.25,  1.5,  1.75,  2.0,   2.25, 2.5,   2.75,   // q 8..15
                              2.75, 2.5,   2.25, 2.0,   1.75,  1.5,  1.25,  1.0,    // q 15..8
                              0.75, 0.5,   0.25, 0.0,   -0.25, -0.5, -0.75, -1.0};  // q 7..0
  float out[32];
  lio::dequantize_row(DType::Q4_1, &block, out, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], expected[j]) << j;
}

TEST(Dtype, DequantizeF16AndBf16Rows) {
  const uint16_t f16[4] = {kF16One, kF16MinusQuarter, 0x7c00, 0x0001};
  float out[4];
  lio::dequantize_row(DType::F16, f16, out, 4);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -0.25f);
  EXPECT_TRUE(std::isinf(out[2]));
  EXPECT_EQ(out[3], 0x1.0p-24f);
  const uint16_t bf16[2] = {0x3f80, 0xc040};
  lio::dequantize_row(DType::BF16, bf16, out, 2);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
}

TEST(Dtype, DequantizeRejectsPartialBlock) {
  lio::BlockQ8_0 block{};
  float out[32] = {};
  EXPECT_THROW(lio::dequantize_row(DType::Q8_0, &block, out, 31), lio::InvalidArgument);
  EXPECT_THROW(lio::quantize_row(DType::Q4_0, out, &block, 20), lio::InvalidArgument);
}

// =========================================================================================
// Quantization: hand-worked blocks (ggml *_ref rounding), then random-data error bounds
// =========================================================================================

TEST(Dtype, QuantizeQ8_0HandWorkedBlock) {
  // amax = 127 -> d = 1, id = 1, q = roundf(x): halves round away from zero.
  float x[32] = {127, -127, 0.5f, -0.5f, 1.5f, 2.5f, -2.5f, 0.49f, 3.2f, -100.7f};
  lio::BlockQ8_0 block;
  lio::quantize_row(DType::Q8_0, x, &block, 32);
  EXPECT_EQ(block.d, kF16One);
  const int8_t expected[10] = {127, -127, 1, -1, 2, 3, -3, 0, 3, -101};
  for (int j = 0; j < 10; ++j) EXPECT_EQ(block.qs[j], expected[j]) << j;
  for (int j = 10; j < 32; ++j) EXPECT_EQ(block.qs[j], 0) << j;
}

TEST(Dtype, QuantizeQ4_0HandWorkedBlock) {
  // The largest-magnitude element is -8, so d = -8 / -8 = 1, id = 1, and
  // q = min(15, (int8)(x + 8.5)) truncates toward zero.
  float x[32] = {};
  x[0] = -8.0f;   // q 0
  x[1] = 7.0f;    // q 15
  x[2] = 0.4f;    // 8.9 -> 8
  x[3] = 0.5f;    // 9.0 -> 9
  x[4] = -0.5f;   // 8.0 -> 8
  x[5] = -0.6f;   // 7.9 -> 7
  x[6] = 3.2f;    // 11.7 -> 11
  x[16] = 1.0f;   // 9.5 -> 9
  x[17] = -3.0f;  // 5.5 -> 5
  x[31] = 7.9f;   // 16.4 -> 16, clamped to 15
  lio::BlockQ4_0 block;
  lio::quantize_row(DType::Q4_0, x, &block, 32);
  EXPECT_EQ(block.d, kF16One);
  // qs[j] = q[j] | q[j + 16] << 4; all other elements are 0 -> q 8.
  EXPECT_EQ(block.qs[0], 0x90);  // q0 = 0, q16 = 9
  EXPECT_EQ(block.qs[1], 0x5f);  // q1 = 15, q17 = 5
  EXPECT_EQ(block.qs[2], 0x88);
  EXPECT_EQ(block.qs[3], 0x89);
  EXPECT_EQ(block.qs[4], 0x88);
  EXPECT_EQ(block.qs[5], 0x87);
  EXPECT_EQ(block.qs[6], 0x8b);
  EXPECT_EQ(block.qs[7], 0x88);
  EXPECT_EQ(block.qs[15], 0xf8);  // q15 = 8, q31 = 15

  // Positive extreme: max = 8 -> d = -1, so 8 maps to q 0 and -8 would clamp at 15.
  float y[32] = {};
  y[0] = 8.0f;
  y[1] = -7.0f;
  lio::quantize_row(DType::Q4_0, y, &block, 32);
  EXPECT_EQ(block.d, 0xbc00);    // -1
  EXPECT_EQ(block.qs[0], 0x80);  // 8 * -1 + 8.5 = 0.5 -> 0
  EXPECT_EQ(block.qs[1], 0x8f);  // 7 + 8.5 -> 15
}

TEST(Dtype, QuantizeQ4_1HandWorkedBlock) {
  // min = -1, max = 2.75 -> d = 3.75 / 15 = 0.25, id = 4, q = (int8)((x + 1) * 4 + 0.5).
  float x[32];
  for (float& v : x) v = 0.0f;  // q = (int8)(4.5) = 4
  x[0] = -1.0f;                 // q 0
  x[1] = 2.75f;                 // q 15
  x[2] = 0.1f;                  // 4.9 -> 4
  x[3] = 0.2f;                  // 5.3 -> 5
  x[16] = 1.0f;                 // 8.5 -> 8
  x[17] = -0.9f;                // 0.9 -> 0
  lio::BlockQ4_1 block;
  lio::quantize_row(DType::Q4_1, x, &block, 32);
  EXPECT_EQ(block.d, kF16Quarter);
  EXPECT_EQ(block.m, kF16MinusOne);
  EXPECT_EQ(block.qs[0], 0x80);
  EXPECT_EQ(block.qs[1], 0x0f);
  EXPECT_EQ(block.qs[2], 0x44);
  EXPECT_EQ(block.qs[3], 0x45);
  EXPECT_EQ(block.qs[4], 0x44);
}

TEST(Dtype, QuantizeAllZeroBlockGivesZeroScale) {
  float x[32] = {};
  lio::BlockQ8_0 q8;
  lio::quantize_row(DType::Q8_0, x, &q8, 32);
  EXPECT_EQ(q8.d, 0);
  lio::BlockQ4_0 q4;
  lio::quantize_row(DType::Q4_0, x, &q4, 32);
  EXPECT_EQ(q4.qs[0], 0x88);
  float out[32];
  lio::dequantize_row(DType::Q4_0, &q4, out, 32);
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST(Dtype, QuantizeRejectsNonFinite) {
  float x[32] = {};
  x[7] = std::numeric_limits<float>::quiet_NaN();
  lio::BlockQ8_0 block;
  EXPECT_THROW(lio::quantize_row(DType::Q8_0, x, &block, 32), lio::InvalidArgument);
  x[7] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(lio::quantize_row(DType::Q4_1, x, &block, 32), lio::InvalidArgument);
}

// quantize_block is quantize_row's per-block step: the same bytes block by block, one RTN
// quantizer for the engine and chapter 03's reference answer.
TEST(Dtype, QuantizeBlockIsQuantizeRowBlockByBlock) {
  constexpr int64_t n = 32 * 8;
  const std::vector<float> x = lio::testing::random_floats(n, -4.0f, 3.0f, 99);
  for (DType dtype : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q3_0, DType::Q3_1}) {
    const int64_t block_bytes = lio::dtype_info(dtype).block_bytes;
    std::vector<std::byte> row(static_cast<size_t>(lio::dtype_row_bytes(dtype, n))),
        blocks(row.size());
    lio::quantize_row(dtype, x.data(), row.data(), n);
    for (int64_t b = 0; b < n / 32; ++b)
      lio::quantize_block(dtype, x.data() + b * 32, blocks.data() + b * block_bytes);
    EXPECT_EQ(row, blocks) << lio::dtype_info(dtype).name;
  }
  float y[32] = {};
  std::byte out[64];
  EXPECT_THROW(lio::quantize_block(DType::F16, y, out), lio::UnsupportedError);
  EXPECT_THROW(lio::quantize_block(DType::Q4_K, y, out), lio::UnsupportedError);
  y[3] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(lio::quantize_block(DType::Q8_0, y, out), lio::InvalidArgument);
}

// Per-block worst-case error of quantize -> dequantize, from each format's rounding:
//   Q8_0: |x - x'| <= d/2 + 127 * |d - f16(d)|, d = amax / 127
//   Q4_0: |x - x'| <= |d| (the value -max maps to q 16, clamped to 15) + 8 * |d - f16(d)|
//   Q4_1: |x - x'| <= d/2 + 15 * |d - f16(d)| + |min - f16(min)|
// with |v - f16(v)| <= |v| * 2^-11 for normal halves.
TEST(Dtype, QuantizeDequantizeErrorWithinFormatBounds) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr int64_t n = 32 * 256;
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng) * 3.0f + 0.5f;
  constexpr float f16_rel = 0x1.0p-11f;
  for (DType dtype : {DType::Q8_0, DType::Q4_0, DType::Q4_1}) {
    std::vector<std::byte> q(static_cast<size_t>(lio::dtype_row_bytes(dtype, n)));
    std::vector<float> back(n);
    lio::quantize_row(dtype, x.data(), q.data(), n);
    lio::dequantize_row(dtype, q.data(), back.data(), n);
    double sum_sq_err = 0, sum_sq = 0;
    for (int64_t b = 0; b < n / 32; ++b) {
      float amax = 0, mn = x[b * 32], mx = x[b * 32];
      for (int j = 0; j < 32; ++j) {
        amax = std::max(amax, std::fabs(x[b * 32 + j]));
        mn = std::min(mn, x[b * 32 + j]);
        mx = std::max(mx, x[b * 32 + j]);
      }
      float bound = 0;
      if (dtype == DType::Q8_0) {
        const float d = amax / 127;
        bound = d * (0.5f + 127 * f16_rel);
      } else if (dtype == DType::Q4_0) {
        const float d = amax / 8;
        bound = d * (1.0f + 8 * f16_rel);
      } else {
        const float d = (mx - mn) / 15;
        bound = d * (0.5f + 15 * f16_rel) + std::fabs(mn) * f16_rel;
      }
      bound = bound * 1.001f + 1e-6f;
      for (int j = 0; j < 32; ++j) {
        const int64_t i = b * 32 + j;
        ASSERT_LE(std::fabs(x[i] - back[i]), bound)
            << lio::dtype_info(dtype).name << " element " << i << " x " << x[i];
        sum_sq_err += (x[i] - back[i]) * (x[i] - back[i]);
        sum_sq += x[i] * x[i];
      }
    }
    // Signal-to-noise sanity: 8-bit ~ 40 dB, 4-bit ~ 20 dB on Gaussian data.
    const double snr_db = 10 * std::log10(sum_sq / sum_sq_err);
    EXPECT_GT(snr_db, dtype == DType::Q8_0 ? 35.0 : 15.0) << lio::dtype_info(dtype).name;
  }
}

TEST(Dtype, QuantizeF16Bf16F32RowsAreConversions) {
  const float x[3] = {1.0f, -0.25f, 1.0f + 0x1.0p-11f};
  uint16_t h[3];
  lio::quantize_row(DType::F16, x, h, 3);
  EXPECT_EQ(h[0], kF16One);
  EXPECT_EQ(h[1], kF16MinusQuarter);
  EXPECT_EQ(h[2], kF16One);
  uint16_t b[3];
  lio::quantize_row(DType::BF16, x, b, 3);
  EXPECT_EQ(b[0], 0x3f80);
  float f[3];
  lio::quantize_row(DType::F32, x, f, 3);
  EXPECT_EQ(as_bytes(f, sizeof(f)), as_bytes(x, sizeof(x)));
}

}  // namespace

namespace {

TEST(Dtype, DequantizeQ4_KHandWorkedBlock) {
  // d = 0.5, dmin = 0.25. Sub-block 1 (j < 4): sc = scales[1] & 63 = 3, m = scales[5] & 63 = 2.
  // Sub-block 6 (j >= 4): sc = (scales[10] & 15) | (scales[2] >> 6) << 4 = 5 | 1 << 4 = 21,
  // m = (scales[10] >> 4) | (scales[6] >> 6) << 4 = 7 | 2 << 4 = 39.
  lio::BlockQ4_K b{};
  b.d = lio::f32_to_f16(0.5f);
  b.dmin = lio::f32_to_f16(0.25f);
  b.scales[1] = 3;
  b.scales[5] = 2;
  b.scales[2] = 1 << 6;
  b.scales[6] = 2 << 6;
  b.scales[10] = 5 | (7 << 4);
  b.qs[0] = 0x9 << 4;  // element 32 (sub-block 1, high nibble of qs[0]) = 9
  b.qs[96 + 4] = 0xC;  // element 192 + 4 (sub-block 6, low nibble of qs[96 + 4]) = 12
  std::vector<float> y(256);
  lio::dequantize_row(DType::Q4_K, &b, y.data(), 256);
  EXPECT_EQ(y[32], 0.5f * 3 * 9 - 0.25f * 2);       // 13
  EXPECT_EQ(y[33], -0.25f * 2);                     // q = 0: minus the minimum
  EXPECT_EQ(y[196], 0.5f * 21 * 12 - 0.25f * 39);   // 116.25
  EXPECT_EQ(y[0], 0.0f);                            // sub-block 0: scale and minimum 0
  EXPECT_EQ(lio::dtype_row_bytes(DType::Q4_K, 512), 288);
  EXPECT_THROW(lio::dequantize_row(DType::Q4_K, &b, y.data(), 128), lio::InvalidArgument);
  EXPECT_THROW(lio::quantize_row(DType::Q4_K, y.data(), &b, 256), lio::UnsupportedError);
}

TEST(Dtype, DequantizeQ5_0AndQ5_1HandWorkedBlocks) {
  // Element 3: low nibble of qs[3] = 5, bit 3 of qh (byte 0) set: q = 21.
  // Element 16 + 9 = 25: high nibble of qs[9] = 2, bit 25 of qh (byte 3, bit 1) set: q = 18.
  // Element 30: high nibble of qs[14] = 15, bit 30 clear: q = 15.
  lio::BlockQ5_0 b0{};
  b0.d = lio::f32_to_f16(0.5f);
  b0.qs[3] = 5;
  b0.qs[9] = 2 << 4;
  b0.qs[14] = 15 << 4;
  b0.qh[0] = 1 << 3;
  b0.qh[3] = 1 << 1;
  std::vector<float> y(32);
  lio::dequantize_row(DType::Q5_0, &b0, y.data(), 32);
  EXPECT_EQ(y[3], 0.5f * (21 - 16));   // 2.5
  EXPECT_EQ(y[25], 0.5f * (18 - 16));  // 1
  EXPECT_EQ(y[30], 0.5f * (15 - 16));  // -0.5
  EXPECT_EQ(y[0], 0.5f * -16);         // q = 0
  lio::BlockQ5_1 b1{};
  b1.d = b0.d;
  b1.m = lio::f32_to_f16(-3.0f);
  std::memcpy(b1.qh, b0.qh, 4);
  std::memcpy(b1.qs, b0.qs, 16);
  lio::dequantize_row(DType::Q5_1, &b1, y.data(), 32);
  EXPECT_EQ(y[3], 0.5f * 21 - 3.0f);
  EXPECT_EQ(y[25], 0.5f * 18 - 3.0f);
  EXPECT_EQ(y[0], -3.0f);
  EXPECT_EQ(lio::dtype_row_bytes(DType::Q5_0, 64), 44);
  EXPECT_EQ(lio::dtype_row_bytes(DType::Q5_1, 64), 48);
  EXPECT_THROW(lio::quantize_row(DType::Q5_0, y.data(), &b0, 32), lio::UnsupportedError);
}

// LIO's packed 3-bit blocks: element i's low 2 bits at bit 2 * (i / 8) of qs[i % 8], its third
// bit at bit i of qh.
TEST(Dtype, DequantizeQ3_0AndQ3_1HandWorkedBlocks) {
  // Element 5: bits 0..1 of qs[5] = 3, bit 5 of qh[0] set: q = 7.
  // Element 21 (= 8 * 2 + 5): bits 4..5 of qs[5] = 1, bit 21 (qh[2] bit 5) clear: q = 1.
  // Element 31 (= 8 * 3 + 7): bits 6..7 of qs[7] = 2, bit 31 (qh[3] bit 7) set: q = 6.
  lio::BlockQ3_0 b0{};
  b0.d = lio::f32_to_f16(0.5f);
  b0.qs[5] = 3 | (1 << 4);
  b0.qs[7] = 2 << 6;
  b0.qh[0] = 1 << 5;
  b0.qh[3] = 1 << 7;
  std::vector<float> y(32);
  lio::dequantize_row(DType::Q3_0, &b0, y.data(), 32);
  EXPECT_EQ(y[5], 0.5f * (7 - 4));   // 1.5
  EXPECT_EQ(y[21], 0.5f * (1 - 4));  // -1.5
  EXPECT_EQ(y[31], 0.5f * (6 - 4));  // 1
  EXPECT_EQ(y[0], 0.5f * -4);        // q = 0
  lio::BlockQ3_1 b1{};
  b1.d = b0.d;
  b1.m = lio::f32_to_f16(-3.0f);
  std::memcpy(b1.qh, b0.qh, 4);
  std::memcpy(b1.qs, b0.qs, 8);
  lio::dequantize_row(DType::Q3_1, &b1, y.data(), 32);
  EXPECT_EQ(y[5], 0.5f * 7 - 3.0f);
  EXPECT_EQ(y[21], 0.5f * 1 - 3.0f);
  EXPECT_EQ(y[31], 0.5f * 6 - 3.0f);
  EXPECT_EQ(y[0], -3.0f);
  EXPECT_EQ(lio::dtype_row_bytes(DType::Q3_0, 64), 28);  // 3.5 bits per weight
  EXPECT_EQ(lio::dtype_row_bytes(DType::Q3_1, 64), 32);  // 4 bits per weight
  // pack_q3_codes is q3_code's inverse.
  int codes[32];
  for (int i = 0; i < 32; ++i) codes[i] = (i * 5 + 3) % 8;
  uint8_t qh[4], qs[8];
  lio::pack_q3_codes(codes, qh, qs);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(lio::q3_code(qh, qs, i), codes[i]) << i;
  codes[9] = 8;
  EXPECT_THROW(lio::pack_q3_codes(codes, qh, qs), lio::InvalidArgument);
}

// Q3_0 / Q3_1 quantize_row: round to nearest on 8 levels, every level used on Gaussian data,
// within half a step (Q3_0: a step at the clipped end, as Q4_0).
TEST(Dtype, QuantizeQ3RoundTripsWithinAStep) {
  std::mt19937 rng(77);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr int64_t n = 32 * 64;
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  for (DType dtype : {DType::Q3_0, DType::Q3_1}) {
    std::vector<std::byte> q(static_cast<size_t>(lio::dtype_row_bytes(dtype, n)));
    std::vector<float> back(n);
    lio::quantize_row(dtype, x.data(), q.data(), n);
    lio::dequantize_row(dtype, q.data(), back.data(), n);
    std::set<float> levels;
    for (int64_t b = 0; b < n / 32; ++b) {
      float amax = 0, mn = x[b * 32], mx = x[b * 32];
      for (int j = 0; j < 32; ++j) {
        amax = std::max(amax, std::fabs(x[b * 32 + j]));
        mn = std::min(mn, x[b * 32 + j]);
        mx = std::max(mx, x[b * 32 + j]);
      }
      const float step = dtype == DType::Q3_0 ? amax / 4 : (mx - mn) / 7;
      for (int j = 0; j < 32; ++j) {
        const int64_t i = b * 32 + j;
        ASSERT_LE(std::fabs(x[i] - back[i]), step * (dtype == DType::Q3_0 ? 1.0f : 0.5f) * 1.01f + std::fabs(mn) * 1e-3f)
            << lio::dtype_info(dtype).name << " element " << i;
        if (b == 0) levels.insert(back[i]);
      }
    }
    EXPECT_GE(levels.size(), 6u) << lio::dtype_info(dtype).name;
  }
}

TEST(Dtype, DequantizeQ6_KHandWorkedBlock) {
  // Element 128 + 32 * 3 + 17 = 241: second half, k = 3 (high nibble of ql[64 + 17 + 32]),
  // high bits 6..7 of qh[32 + 17], scale scales[8 + 17 / 16 + 6] = scales[15].
  lio::BlockQ6_K b{};
  b.d = lio::f32_to_f16(0.125f);
  b.ql[64 + 49] = 0xA << 4;   // low 4 bits 10
  b.qh[32 + 17] = 3 << 6;     // high 2 bits 3: q = 10 | 48 = 58
  b.scales[15] = -4;
  b.ql[5] = 0x7;              // element 5: k = 0, low nibble 7, high 0: q = 7
  b.scales[0] = 2;
  std::vector<float> y(256);
  lio::dequantize_row(DType::Q6_K, &b, y.data(), 256);
  EXPECT_EQ(y[241], 0.125f * -4 * (58 - 32));  // -13
  EXPECT_EQ(y[5], 0.125f * 2 * (7 - 32));      // -6.25
  EXPECT_EQ(y[6], 0.125f * 2 * -32);           // q = 0
  EXPECT_EQ(lio::dtype_row_bytes(DType::Q6_K, 256), 210);
}

}  // namespace
