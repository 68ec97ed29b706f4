// matmul against a straightforward reference (dequantize, then a double-precision dot),
// for every weight dtype, on the GEMV (n == 1) and GEMM (n > 1) paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "cpu_ops.h"
#include "lio/dtype.h"
#include "lio/error.h"
#include "random_inputs.h"

namespace {

struct Quantized {
  std::vector<std::byte> bytes;
  lio::WeightMatrix w;
  std::vector<float> dequantized;  // what the kernel must effectively multiply by
};

bool read_only(lio::DType t) {
  return t == lio::DType::Q5_0 || t == lio::DType::Q5_1 || t == lio::DType::Q4_K || t == lio::DType::Q6_K;
}

/// A (rows, cols) weight in `dtype`: normal values through quantize_row, or random blocks for
/// the dtypes LIO cannot encode (Q5_*, K-quants), with their dequantized values.
Quantized make_weight(lio::DType dtype, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (float& v : values) v = dist(rng);
  Quantized q;
  const int64_t row_bytes = lio::dtype_row_bytes(dtype, cols);
  q.bytes.resize(static_cast<size_t>(rows * row_bytes));
  q.dequantized.resize(values.size());
  if (read_only(dtype)) q.bytes = lio::testing::random_read_only_blocks(dtype, rows, cols, static_cast<uint32_t>(rng()));
  for (int64_t r = 0; r < rows; ++r) {
    if (!read_only(dtype)) lio::quantize_row(dtype, values.data() + r * cols, q.bytes.data() + r * row_bytes, cols);
    lio::dequantize_row(dtype, q.bytes.data() + r * row_bytes, q.dequantized.data() + r * cols, cols);
  }
  q.w = lio::WeightMatrix{"w", dtype, rows, cols, row_bytes, q.bytes.data()};
  return q;
}

class MatmulTest : public ::testing::TestWithParam<std::tuple<lio::DType, int64_t>> {};

TEST_P(MatmulTest, MatchesDequantizedReference) {
  const auto [dtype, n] = GetParam();
  std::mt19937 rng(1234);
  const int64_t rows = 136, cols = 96;  // rows not a multiple of the 64-row GEMM tile
  Quantized q = make_weight(dtype, rows, cols, rng);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (float& v : x) v = dist(rng);
  std::vector<float> y(static_cast<size_t>(n * rows));
  lio::cpu::matmul(q.w, x.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < rows; ++r) {
      double ref = 0.0, mag = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = double(q.dequantized[r * cols + c]) * x[i * cols + c];
        ref += p;
        mag += std::abs(p);
      }
      // f32 accumulation over 96 terms: error bounded by a few ulps of the magnitude sum.
      EXPECT_NEAR(y[i * rows + r], ref, 1e-5 * mag + 1e-6) << "row " << r << " token " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllDtypes, MatmulTest,
    ::testing::Combine(::testing::Values(lio::DType::F32, lio::DType::F16, lio::DType::BF16,
                                         lio::DType::Q8_0, lio::DType::Q4_0, lio::DType::Q4_1,
                                         lio::DType::Q3_0, lio::DType::Q3_1),
                       ::testing::Values(int64_t{1}, int64_t{7})));

// Batch invariance: a row's output is the same bits whether it is alone, first, or the 13th
// of 21 rows (groups of 8 and a remainder), with or without accumulate, for every dtype and
// both activation precisions.
TEST(Matmul, RowsAreBitwiseIdenticalAloneAndInAnyBatch) {
  for (lio::DType dtype : {lio::DType::F32, lio::DType::F16, lio::DType::BF16, lio::DType::Q8_0, lio::DType::Q4_0,
                           lio::DType::Q4_1, lio::DType::Q5_0, lio::DType::Q5_1, lio::DType::Q4_K, lio::DType::Q6_K,
                           lio::DType::Q3_0, lio::DType::Q3_1}) {
    for (auto act : {lio::cpu::MatmulActivations::F32, lio::cpu::MatmulActivations::Int8}) {
      std::mt19937 rng(7);
      const int64_t rows = 70, cols = lio::dtype_info(dtype).block_elems == 256 ? 512 : 96, n = 21;
      Quantized q = make_weight(dtype, rows, cols, rng);
      const std::vector<float> x = lio::testing::random_floats(static_cast<size_t>(n * cols), -2.0f, 2.0f, 8);
      std::vector<float> batched(static_cast<size_t>(n * rows)), single(static_cast<size_t>(rows));
      lio::cpu::matmul(q.w, x.data(), batched.data(), n, false, act);
      for (int64_t i = 0; i < n; ++i) {
        lio::cpu::matmul(q.w, x.data() + i * cols, single.data(), 1, false, act);
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(single[r], batched[i * rows + r]) << lio::dtype_info(dtype).name << " row " << i << " out " << r;
      }
    }
  }
}

// Int8 activations: the block dot products in integers, within the rounding of x to 8 bits
// (each block's x carries up to 0.5 / 127 of its max-abs as error).
TEST(Matmul, Int8ActivationsStayWithinTheirRounding) {
  for (lio::DType dtype : {lio::DType::Q8_0, lio::DType::Q4_0, lio::DType::Q4_1, lio::DType::Q5_0, lio::DType::Q5_1,
                           lio::DType::Q4_K, lio::DType::Q6_K, lio::DType::Q3_0, lio::DType::Q3_1}) {
    std::mt19937 rng(21);
    const int64_t rows = 50, cols = 512, n = 5;
    Quantized q = make_weight(dtype, rows, cols, rng);
    const std::vector<float> x = lio::testing::random_floats(static_cast<size_t>(n * cols), -2.0f, 2.0f, 22);
    std::vector<float> y(static_cast<size_t>(n * rows));
    lio::cpu::matmul(q.w, x.data(), y.data(), n, false, lio::cpu::MatmulActivations::Int8);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t r = 0; r < rows; ++r) {
        double ref = 0, bound = 0;
        for (int64_t c = 0; c < cols; ++c) {
          ref += double(q.dequantized[r * cols + c]) * x[i * cols + c];
          double amax = 0;  // the block's max |x|
          for (int64_t k = c / 32 * 32; k < c / 32 * 32 + 32; ++k) amax = std::max(amax, double(std::fabs(x[i * cols + k])));
          bound += std::fabs(q.dequantized[r * cols + c]) * amax * 0.5 / 127.0;
        }
        ASSERT_NEAR(y[i * rows + r], ref, bound + 1e-4) << lio::dtype_info(dtype).name;
        worst = std::max(worst, std::fabs(y[i * rows + r] - ref));
      }
    EXPECT_GT(worst, 0.0) << "no rounding at all: the int8 path did not run";
  }
}

// matmul_int8 (W8A8 / W4A8 with one scale per token): the rows arrive already rounded, so the
// result is exactly (dequantized W) . (sx * qx) up to f32 accumulation, alone or in a batch.
TEST(Matmul, Int8PerTokenIsTheDequantizedProduct) {
  for (lio::DType dtype : {lio::DType::Q8_0, lio::DType::Q4_0, lio::DType::Q4_1, lio::DType::Q5_0, lio::DType::Q5_1,
                           lio::DType::Q4_K, lio::DType::Q6_K, lio::DType::Q3_0, lio::DType::Q3_1}) {
    std::mt19937 rng(31);
    const int64_t rows = 70, cols = 256, n = 11;
    Quantized q = make_weight(dtype, rows, cols, rng);
    std::uniform_int_distribution<int> code(-127, 127);
    std::vector<int8_t> qx(static_cast<size_t>(n * cols));
    for (int8_t& v : qx) v = static_cast<int8_t>(code(rng));
    std::vector<float> sx(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) sx[i] = 0.01f * static_cast<float>(i + 1);
    std::vector<float> y(static_cast<size_t>(n * rows)), single(static_cast<size_t>(rows));
    lio::cpu::matmul_int8(q.w, qx.data(), sx.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      lio::cpu::matmul_int8(q.w, qx.data() + i * cols, sx.data() + i, single.data(), 1);
      for (int64_t r = 0; r < rows; ++r) {
        double ref = 0, mag = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double p = double(q.dequantized[r * cols + c]) * sx[i] * qx[i * cols + c];
          ref += p;
          mag += std::fabs(p);
        }
        ASSERT_NEAR(y[i * rows + r], ref, 1e-5 * mag + 1e-6) << lio::dtype_info(dtype).name << " token " << i;
        ASSERT_EQ(single[r], y[i * rows + r]) << "batch invariance, " << lio::dtype_info(dtype).name;
      }
    }
    // accumulate adds onto y
    std::vector<float> acc(y.size(), 1.0f);
    lio::cpu::matmul_int8(q.w, qx.data(), sx.data(), acc.data(), n, /*accumulate=*/true);
    for (size_t k = 0; k < y.size(); ++k) ASSERT_NEAR(acc[k], y[k] + 1.0f, 1e-4f * (1.0f + std::fabs(y[k])));
  }
}

TEST(Matmul, Int8PerTokenRejectsWhatItCannotRun) {
  std::mt19937 rng(5);
  Quantized f = make_weight(lio::DType::F32, 4, 64, rng);
  std::vector<int8_t> qx(64, 1);
  float sx = 1.0f;
  std::vector<float> y(4), x(64, 1.0f);
  EXPECT_THROW(lio::cpu::matmul_int8(f.w, qx.data(), &sx, y.data(), 1), lio::InvalidArgument);
  Quantized q = make_weight(lio::DType::Q8_0, 4, 64, rng);
  EXPECT_THROW(lio::cpu::matmul_int8(q.w, nullptr, &sx, y.data(), 1), lio::InvalidArgument);
  EXPECT_THROW(lio::cpu::matmul_int8(q.w, qx.data(), &sx, y.data(), 0), lio::InvalidArgument);
  // cpu::matmul does not round per token itself: the caller does (CpuBackend, Task 6).
  EXPECT_THROW(lio::cpu::matmul(q.w, x.data(), y.data(), 1, false, lio::cpu::MatmulActivations::Int8PerToken),
               lio::InvalidArgument);
  EXPECT_TRUE(lio::cpu::has_int8_kernel(q.w));
  EXPECT_FALSE(lio::cpu::has_int8_kernel(f.w));
}

// The types LIO reads but cannot write (Q5_0, Q5_1, Q4_K, Q6_K), and LIO's packed Q3_0 / Q3_1
// (random blocks: every bit pattern), run as stored: each 32-element
// block (K-quants: sub-block) is decoded to exactly dequantize_row's values and multiplied as
// the f32 path multiplies, so the output is the same bits as the dequantized f32 matrix's,
// alone and at every batch size, with and without accumulate. (Their int8-activation kernels
// are checked with the others above.)
TEST(Matmul, ReadOnlyTypesAreBitwiseTheirDequantizedF32Matrix) {
  for (lio::DType dtype : {lio::DType::Q5_0, lio::DType::Q5_1, lio::DType::Q4_K, lio::DType::Q6_K, lio::DType::Q3_0,
                           lio::DType::Q3_1}) {
    const int64_t rows = 37, cols = 768;  // 3 super-blocks; rows not a multiple of the tile
    const std::vector<std::byte> raw = lio::testing::random_read_only_blocks(dtype, rows, cols, 5);
    const int64_t row_bytes = lio::dtype_row_bytes(dtype, cols);
    const lio::WeightMatrix wk{"wk", dtype, rows, cols, row_bytes, raw.data()};
    std::vector<float> dense(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) lio::dequantize_row(dtype, raw.data() + r * row_bytes, dense.data() + r * cols, cols);
    const lio::WeightMatrix wf{"wf", lio::DType::F32, rows, cols, cols * 4, reinterpret_cast<const std::byte*>(dense.data())};
    EXPECT_TRUE(lio::cpu::has_int8_kernel(wk));
    for (int64_t n : {1, 5, 13}) {
      const std::vector<float> x = lio::testing::random_floats(static_cast<size_t>(n * cols), -2.0f, 2.0f, 9);
      {
        std::vector<float> yk(static_cast<size_t>(n * rows), 0.5f), yf = yk;
        lio::cpu::matmul(wk, x.data(), yk.data(), n, /*accumulate=*/true);
        lio::cpu::matmul(wf, x.data(), yf.data(), n, /*accumulate=*/true);
        double mag = 0;
        for (size_t i = 0; i < yk.size(); ++i) {
          ASSERT_EQ(yk[i], yf[i]) << lio::dtype_info(dtype).name << " n " << n << " out " << i;
          mag += std::fabs(yk[i] - 0.5f);
        }
        EXPECT_GT(mag, 1e-3 * yk.size()) << "outputs too small to tell the layouts apart";
      }
    }
  }
}

// A K-quant matrix needs whole 256-element super-blocks per row.
TEST(Matmul, KQuantsRejectAPartialSuperBlock) {
  std::vector<std::byte> raw(4096);
  const lio::WeightMatrix w{"w", lio::DType::Q4_K, 2, 288, 162, raw.data()};
  std::vector<float> x(288), y(2);
  EXPECT_THROW(lio::cpu::matmul(w, x.data(), y.data(), 1), lio::InvalidArgument);
}

TEST(Matmul, RejectsNullAndEmpty) {
  lio::WeightMatrix w{"w", lio::DType::F32, 2, 2, 8, nullptr};
  float x[2] = {1, 2}, y[2];
  EXPECT_THROW(lio::cpu::matmul(w, x, y, 1), lio::InvalidArgument);
}

}  // namespace
