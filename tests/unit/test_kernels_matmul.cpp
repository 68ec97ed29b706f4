// matmul against a straightforward reference (dequantize, then a double-precision dot),
// for every weight dtype, on the GEMV (n == 1) and GEMM (n > 1) paths.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu_ops.h"
#include "lio/dtype.h"
#include "lio/error.h"

namespace {

struct Quantized {
  std::vector<std::byte> bytes;
  lio::WeightMatrix w;
  std::vector<float> dequantized;  // what the kernel must effectively multiply by
};

Quantized make_weight(lio::DType dtype, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (float& v : values) v = dist(rng);
  Quantized q;
  const int64_t row_bytes = lio::dtype_row_bytes(dtype, cols);
  q.bytes.resize(static_cast<size_t>(rows * row_bytes));
  q.dequantized.resize(values.size());
  for (int64_t r = 0; r < rows; ++r) {
    lio::quantize_row(dtype, values.data() + r * cols, q.bytes.data() + r * row_bytes, cols);
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
                                         lio::DType::Q8_0, lio::DType::Q4_0, lio::DType::Q4_1),
                       ::testing::Values(int64_t{1}, int64_t{7})));

TEST(Matmul, GemvAndGemmAgree) {
  std::mt19937 rng(7);
  Quantized q = make_weight(lio::DType::Q4_1, 100, 64, rng);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(3 * 64);
  for (float& v : x) v = dist(rng);
  std::vector<float> batched(3 * 100), single(100);
  lio::cpu::matmul(q.w, x.data(), batched.data(), 3);
  for (int i = 0; i < 3; ++i) {
    lio::cpu::matmul(q.w, x.data() + i * 64, single.data(), 1);
    for (int r = 0; r < 100; ++r) EXPECT_NEAR(single[r], batched[i * 100 + r], 1e-4);
  }
}

TEST(Matmul, RejectsNullAndEmpty) {
  lio::WeightMatrix w{"w", lio::DType::F32, 2, 2, 8, nullptr};
  float x[2] = {1, 2}, y[2];
  EXPECT_THROW(lio::cpu::matmul(w, x, y, 1), lio::InvalidArgument);
}

}  // namespace
