// Chapter 03, Task 6: W8A8's per-token INT8 activations and the integer dot product with its
// scales (exercises/03_quantization/int8.cpp). Graded by hand-worked values, the contract's
// rounding bound on random rows, an int32 sum that a float or int16 accumulator gets wrong,
// the engine's AVX2 W8A8 kernel agreeing with your dot on a per-channel INT8 matrix, and the
// engine itself running W8A8 on your rounding (--activations int8-token).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "cpu_ops.h"
#include "lio/cpu_backend.h"
#include "lio/error.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "lio/quant_grid.h"
#include "lio/quantization.h"
#include "random_inputs.h"
#include "tiny_model.h"

namespace {
using namespace lio;

TEST(Ch03Task6, QuantizeRowByHand) {
  const std::vector<float> x = {0.5f, -1.27f, 0.01f, 0.0f, 0.3f, -0.026f};
  std::vector<int8_t> q(x.size(), 99);
  const float s = quantize_row_int8(x, q);
  EXPECT_EQ(s, 1.27f / 127.0f);  // the largest |x| sets the scale
  EXPECT_EQ(q, (std::vector<int8_t>{50, -127, 1, 0, 30, -3}));  // -0.026 / 0.01 = -2.6 -> -3
}

TEST(Ch03Task6, ARowOfZerosHasScaleZero) {
  const std::vector<float> x(64, 0.0f);
  std::vector<int8_t> q(x.size(), 7);
  EXPECT_EQ(quantize_row_int8(x, q), 0.0f);
  EXPECT_TRUE(std::all_of(q.begin(), q.end(), [](int8_t v) { return v == 0; }));
}

TEST(Ch03Task6, RandomRowsFollowTheContract) {
  for (uint32_t seed = 1; seed <= 50; ++seed) {
    std::vector<float> x = lio::testing::random_floats(576, -1.0f, 1.0f, seed);
    x[seed % 576] = (seed % 2 ? 1.0f : -1.0f) * static_cast<float>(seed);  // an outlier channel
    std::vector<int8_t> q(x.size());
    const float s = quantize_row_int8(x, q);
    float amax = 0.0f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    ASSERT_EQ(s, amax / 127.0f) << seed;
    EXPECT_EQ(std::abs(q[seed % 576]), 127) << seed;
    for (size_t i = 0; i < x.size(); ++i) {  // round to nearest: off by at most half a step
      ASSERT_LE(std::fabs(x[i] - s * q[i]), 0.5f * s * 1.0001f) << "seed " << seed << " element " << i;
    }
  }
}

TEST(Ch03Task6, QuantizeRejectsBadInput) {
  const std::vector<float> x = {1.0f, 2.0f, 3.0f};
  std::vector<int8_t> short_q(2);
  EXPECT_THROW(quantize_row_int8(x, short_q), InvalidArgument);
  const std::vector<float> nan = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  std::vector<int8_t> q(2);
  EXPECT_THROW(quantize_row_int8(nan, q), InvalidArgument);
}

TEST(Ch03Task6, DotByHand) {
  const std::vector<int8_t> a = {1, -2, 3}, b = {4, 5, -6};
  EXPECT_EQ(int8_dot(a, 0.5f, b, 0.25f), -3.0f);  // (4 - 10 - 18) * 0.5 * 0.25
}

TEST(Ch03Task6, DotSumsExactlyInInt32) {
  // 4096 x 127 * 127: past 2^25, where a float accumulator drops 1 on every add.
  const std::vector<int8_t> a(4096, 127);
  EXPECT_EQ(int8_dot(a, 1.0f, a, 1.0f), 66064384.0f);
  // The longest allowed dot of the largest codes: 2,147,467,264 still fits an int32.
  const std::vector<int8_t> m(static_cast<size_t>(kInt8DotMaxLen), -128);
  EXPECT_EQ(int8_dot(m, 1.0f, m, 1.0f), 2147467264.0f);
}

TEST(Ch03Task6, RandomDotsMatchAnInt64Sum) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const std::vector<float> fa = lio::testing::random_floats(1536, -128.0f, 128.0f, seed);
    const std::vector<float> fb = lio::testing::random_floats(1536, -128.0f, 128.0f, seed + 100);
    std::vector<int8_t> a, b;
    int64_t exact = 0;
    for (size_t i = 0; i < fa.size(); ++i) {
      a.push_back(static_cast<int8_t>(std::clamp(std::floor(fa[i]), -128.0f, 127.0f)));
      b.push_back(static_cast<int8_t>(std::clamp(std::floor(fb[i]), -128.0f, 127.0f)));
      exact += int64_t{a.back()} * int64_t{b.back()};
    }
    const float sa = 0.013f * static_cast<float>(seed), sb = 0.0021f;
    EXPECT_FLOAT_EQ(int8_dot(a, sa, b, sb), static_cast<float>(exact) * sa * sb) << seed;
  }
}

TEST(Ch03Task6, DotRejectsBadLengths) {
  const std::vector<int8_t> a(3, 1), b(4, 1);
  EXPECT_THROW(int8_dot(a, 1.0f, b, 1.0f), InvalidArgument);
  const std::vector<int8_t> long_a(static_cast<size_t>(kInt8DotMaxLen + 1), 1);
  EXPECT_THROW(int8_dot(long_a, 1.0f, long_a, 1.0f), InvalidArgument);
}

TEST(Ch03Task6, TheEnginesW8A8KernelComputesYourDot) {
  // W (16, 256) per output channel in Q8_0 blocks (the row's scale repeated in each block).
  const int64_t rows = 16, cols = 256, n = 3;
  const std::vector<float> w = lio::testing::random_floats(static_cast<size_t>(rows * cols), -0.5f, 0.5f, 7);
  const QuantGrid grid{8, kPerChannel, false};
  const QuantizedMatrix qw = rtn_quantize(grid, w.data(), rows, cols);
  const int64_t row_bytes = dtype_row_bytes(DType::Q8_0, cols);
  std::vector<std::byte> bytes(static_cast<size_t>(rows * row_bytes));
  for (int64_t r = 0; r < rows; ++r) qw.encode_row(r, bytes.data() + r * row_bytes);
  const WeightMatrix m{"w", DType::Q8_0, rows, cols, row_bytes, bytes.data()};

  const std::vector<float> x = lio::testing::random_floats(static_cast<size_t>(n * cols), -2.0f, 2.0f, 8);
  std::vector<int8_t> qx(x.size());
  std::vector<float> sx(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    sx[static_cast<size_t>(t)] = quantize_row_int8(std::span<const float>(x).subspan(static_cast<size_t>(t * cols), cols),
                                                   std::span<int8_t>(qx).subspan(static_cast<size_t>(t * cols), cols));
  }
  std::vector<float> y(static_cast<size_t>(n * rows));
  cpu::matmul_int8(m, qx.data(), sx.data(), y.data(), n);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < rows; ++j) {
      const float yours = int8_dot(std::span<const int8_t>(qx).subspan(static_cast<size_t>(t * cols), cols),
                                   sx[static_cast<size_t>(t)],
                                   std::span<const int8_t>(qw.codes).subspan(static_cast<size_t>(j * cols), cols),
                                   qw.params[static_cast<size_t>(j)].scale);
      EXPECT_NEAR(y[static_cast<size_t>(t * rows + j)], yours, 1e-5f * (1.0f + std::fabs(yours)))
          << "token " << t << ", output channel " << j;
    }
}

TEST(Ch03Task6, TheEngineRunsW8A8OnYourRounding) {
  lio::testing::TinyModelSpec spec;
  spec.weight_dtype = DType::Q8_0;
  spec.embd_dtype = DType::Q8_0;
  spec.d_model = 64;
  spec.d_ff = 128;
  const std::string dir = lio::testing::make_temp_dir("lio_grade_ch03_w8a8");
  lio::testing::write_tiny_gguf(dir + "/m.gguf", spec);
  const LoadedModel model = load_model(dir + "/m.gguf", WeightMode::AsStored);
  const std::vector<int32_t> tokens = {5, 80, 17, 200, 33, 121, 9, 64};
  const auto logits = [&](cpu::MatmulActivations act) {
    ModelRunner runner(std::make_unique<CpuBackend>(model.config, model.weights, act), KvPoolConfig{16, 1});
    SoloSequence seq(runner, 16);
    const std::span<const float> out = seq.forward(tokens, /*all_logits=*/true);
    return std::vector<float>(out.begin(), out.end());
  };
  const std::vector<float> f32 = logits(cpu::MatmulActivations::F32);
  const std::vector<float> w8a8 = logits(cpu::MatmulActivations::Int8PerToken);
  ASSERT_EQ(f32.size(), w8a8.size());
  double diff2 = 0.0, ref2 = 0.0;
  for (size_t i = 0; i < f32.size(); ++i) {
    diff2 += (f32[i] - w8a8[i]) * static_cast<double>(f32[i] - w8a8[i]);
    ref2 += f32[i] * static_cast<double>(f32[i]);
  }
  const double rel_rms = std::sqrt(diff2 / ref2);
  // This random model amplifies rounding: round-to-nearest moves its logits by 3.4% RMS,
  // truncation toward zero by 5.0%, f32 activations by 0.
  EXPECT_GT(rel_rms, 0.0) << "int8-token activations changed nothing: the rounding did not run";
  EXPECT_LT(rel_rms, 0.045) << "the logits moved by " << rel_rms << " RMS (relative): is the rounding to nearest?";
}

}  // namespace
