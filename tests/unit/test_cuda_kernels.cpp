// test_cuda_kernels.cpp — each CUDA kernel (optimized and naive) against the CPU operator of
// kernels/cpu/cpu_ops.h on random inputs (fixed seeds, never all zeros), odd sizes included.
// Every test skips when no usable GPU is present, so this binary passes on CPU-only machines.
//
// Tolerances are stated per test. They cover: float vs double accumulation (rmsnorm), FMA
// contraction on the GPU (nvcc fuses a*c - b*s; g++ -std=c++20 does not), and libdevice vs
// glibc double cos/sin/pow differing in the last double ulp (can move a float rounding by 1 ulp).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "cpu_ops.h"
#include "cuda_check.h"
#include "rmsnorm.h"
#include "rope.h"
#include "cuda_runtime_info.h"
#include "device_buffer.h"
#include "lio/error.h"
#include "random_inputs.h"

namespace {

using lio::RopeStyle;
using lio::cuda::DeviceBuffer;

using lio::testing::random_floats;

std::vector<int32_t> random_positions(size_t n, int32_t max_pos, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, max_pos);
  std::vector<int32_t> v(n);
  for (int32_t& p : v) p = dist(rng);
  return v;
}

const char* style_name(RopeStyle style) {
  return style == RopeStyle::Normal ? "normal" : "neox";
}

// ---- rmsnorm ----------------------------------------------------------------------------

// Runs the given CUDA rmsnorm launcher on (n_rows, dim) random rows and compares with
// cpu::rmsnorm elementwise: |gpu - cpu| <= rel_tol * |cpu| + 1e-30.
// `offset` shifts every device pointer by that many floats (1 defeats the float4 path).
template <typename Launcher>
void check_rmsnorm_against_cpu(Launcher launch, int64_t n_rows, int64_t dim, double rel_tol,
                               uint32_t seed, int64_t offset = 0) {
  const auto x = random_floats(size_t(n_rows * dim), -3.0f, 3.0f, seed);
  const auto w = random_floats(size_t(dim), 0.5f, 1.5f, seed + 1);
  std::vector<float> expected(x.size());
  lio::cpu::rmsnorm(x.data(), w.data(), expected.data(), n_rows, dim, 1e-5f);

  DeviceBuffer<float> d_x(offset + n_rows * dim);
  DeviceBuffer<float> d_w(offset + dim);
  DeviceBuffer<float> d_out(offset + n_rows * dim);
  CUDA_CHECK(cudaMemcpy(d_x.data() + offset, x.data(), x.size() * sizeof(float),
                        cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_w.data() + offset, w.data(), w.size() * sizeof(float),
                        cudaMemcpyHostToDevice));
  launch(d_x.data() + offset, d_w.data() + offset, d_out.data() + offset, n_rows, dim, 1e-5f,
         cudaStream_t{nullptr});
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> got(x.size());
  CUDA_CHECK(cudaMemcpy(got.data(), d_out.data() + offset, got.size() * sizeof(float),
                        cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], expected[i], rel_tol * std::fabs(expected[i]) + 1e-30)
        << "n_rows=" << n_rows << " dim=" << dim << " offset=" << offset << " i=" << i;
  }
}

constexpr int64_t kRmsnormShapes[][2] = {{1, 1},   {1, 7},    {3, 64},   {5, 576}, {2, 4096},
                                         {7, 1001}, {4, 4099}, {300, 128}, {1, 8192}};

// Optimized kernel: float sums (dim/256 + 8 roundings deep) vs the CPU's double sum, then the
// same three float roundings: 1e-5 relative (~84 ulp) leaves a wide margin and still catches
// any wrong formula, index or reduction (those give O(1) errors).
TEST(CudaRmsnorm, MatchesCpu) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 1;
  for (const auto& s : kRmsnormShapes) {
    check_rmsnorm_against_cpu(lio::cuda::rmsnorm, s[0], s[1], 1e-5, seed);
    seed += 2;
  }
}

// Naive kernel is the CPU algorithm (double sum) on the GPU: within 4 ulp (4 * FLT_EPSILON).
TEST(CudaRmsnorm, NaiveMatchesCpu) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 100;
  for (const auto& s : kRmsnormShapes) {
    check_rmsnorm_against_cpu(lio::cuda::rmsnorm_naive, s[0], s[1], 4 * FLT_EPSILON, seed);
    seed += 2;
  }
}

// dim % 4 == 0 but pointers only 4-byte aligned: the launcher must take the scalar path.
TEST(CudaRmsnorm, MisalignedPointersUseScalarPath) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_rmsnorm_against_cpu(lio::cuda::rmsnorm, 3, 576, 1e-5, 200, /*offset=*/1);
  check_rmsnorm_against_cpu(lio::cuda::rmsnorm, 2, 4096, 1e-5, 202, /*offset=*/3);
}

TEST(CudaRmsnorm, InPlaceEqualsOutOfPlace) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (int64_t dim : {576, 1001}) {  // float4 path and scalar path
    const int64_t n_rows = 4;
    const auto x = random_floats(size_t(n_rows * dim), -2.0f, 2.0f, 300);
    const auto w = random_floats(size_t(dim), -1.0f, 1.0f, 301);
    auto d_x = DeviceBuffer<float>::from_host(x);
    const auto d_w = DeviceBuffer<float>::from_host(w);
    DeviceBuffer<float> d_out(n_rows * dim);
    lio::cuda::rmsnorm(d_x.data(), d_w.data(), d_out.data(), n_rows, dim, 1e-6f, nullptr);
    lio::cuda::rmsnorm(d_x.data(), d_w.data(), d_x.data(), n_rows, dim, 1e-6f, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(d_x.to_host(), d_out.to_host()) << "dim=" << dim;  // same kernel: bitwise equal
  }
}

TEST(CudaRmsnorm, RejectsBadArguments) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  DeviceBuffer<float> buf(16);
  float* p = buf.data();
  for (auto launch : {lio::cuda::rmsnorm, lio::cuda::rmsnorm_naive}) {
    EXPECT_THROW(launch(nullptr, p, p, 1, 8, 1e-5f, nullptr), lio::InvalidArgument);
    EXPECT_THROW(launch(p, p, p, 1, 0, 1e-5f, nullptr), lio::InvalidArgument);
    EXPECT_THROW(launch(p, p, p, -1, 8, 1e-5f, nullptr), lio::InvalidArgument);
    EXPECT_THROW(launch(p, p, p, 1, 8, NAN, nullptr), lio::InvalidArgument);
    EXPECT_NO_THROW(launch(p, p, p, 0, 8, 1e-5f, nullptr));  // no rows: nothing launched
  }
  CUDA_CHECK(cudaDeviceSynchronize());
}

// ---- rope -------------------------------------------------------------------------------

// Runs a CUDA rope launcher and cpu::rope on the same random input; |gpu - cpu| <= 2e-6
// absolute for values in [-1, 1] (FMA contraction + at most 1 ulp in cos/sin).
template <typename Launcher>
void check_rope_against_cpu(Launcher launch, int64_t n_tokens, int64_t n_heads,
                            int64_t head_dim, float base, RopeStyle style, uint32_t seed,
                            cudaStream_t stream = nullptr) {
  const auto x = random_floats(size_t(n_tokens * n_heads * head_dim), -1.0f, 1.0f, seed);
  const auto positions = random_positions(size_t(n_tokens), 131071, seed + 1);
  auto expected = x;
  lio::cpu::rope(expected.data(), positions.data(), n_tokens, n_heads, head_dim, base, style);

  auto d_x = DeviceBuffer<float>::from_host(x);
  const auto d_pos = DeviceBuffer<int32_t>::from_host(positions);  // returns once copied
  launch(d_x.data(), d_pos.data(), n_tokens, n_heads, head_dim, base, style, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto got = d_x.to_host();
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], expected[i], 2e-6)
        << style_name(style) << " n_tokens=" << n_tokens << " n_heads=" << n_heads
        << " head_dim=" << head_dim << " i=" << i;
  }
}

struct RopeShape {
  int64_t n_tokens, n_heads, head_dim;
  float base;
};
// Odd head counts (9, 13: partial head groups per block), tiny and odd-half head_dims (2, 6),
// the SmolLM2 shape (9 x 64), Llama shapes (32 x 128, 500000), and a long prefill.
constexpr RopeShape kRopeShapes[] = {
    {1, 1, 2, 10000.0f},   {3, 3, 6, 10000.0f},    {1, 9, 64, 10000.0f},
    {5, 13, 64, 10000.0f}, {2, 32, 128, 500000.0f}, {300, 3, 64, 10000.0f},
    {4, 2, 256, 10000.0f}, {7, 1, 1000, 10000.0f},
};

TEST(CudaRope, MatchesCpuBothStyles) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 400;
  for (const RopeShape& s : kRopeShapes) {
    for (RopeStyle style : {RopeStyle::Normal, RopeStyle::Neox}) {
      check_rope_against_cpu(lio::cuda::rope, s.n_tokens, s.n_heads, s.head_dim, s.base, style,
                             seed);
      seed += 2;
    }
  }
}

TEST(CudaRope, NaiveMatchesCpuBothStyles) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 500;
  for (const RopeShape& s : kRopeShapes) {
    for (RopeStyle style : {RopeStyle::Normal, RopeStyle::Neox}) {
      check_rope_against_cpu(lio::cuda::rope_naive, s.n_tokens, s.n_heads, s.head_dim, s.base,
                             style, seed);
      seed += 2;
    }
  }
}

TEST(CudaRope, RunsOnExplicitStream) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  check_rope_against_cpu(lio::cuda::rope, 17, 9, 64, 10000.0f, RopeStyle::Neox, 600, stream);
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(CudaRope, AcceptsMaxHeadDimRejectsLarger) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t max_dim = lio::cuda::kRopeMaxHeadDim;
  check_rope_against_cpu(lio::cuda::rope, 2, 2, max_dim, 10000.0f, RopeStyle::Normal, 700);
  DeviceBuffer<float> x(2 * (max_dim + 2));
  DeviceBuffer<int32_t> pos(2);
  EXPECT_THROW(lio::cuda::rope(x.data(), pos.data(), 1, 2, max_dim + 2, 10000.0f,
                               RopeStyle::Normal, nullptr),
               lio::InvalidArgument);
}

TEST(CudaRope, RejectsBadArguments) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  DeviceBuffer<float> x(64);
  DeviceBuffer<int32_t> pos(4);
  for (auto launch : {lio::cuda::rope, lio::cuda::rope_naive}) {
    EXPECT_THROW(launch(x.data(), pos.data(), 1, 1, 5, 1e4f, RopeStyle::Normal, nullptr),
                 lio::InvalidArgument);  // odd head_dim
    EXPECT_THROW(launch(x.data(), pos.data(), 1, 0, 4, 1e4f, RopeStyle::Neox, nullptr),
                 lio::InvalidArgument);
    EXPECT_THROW(launch(x.data(), pos.data(), -1, 1, 4, 1e4f, RopeStyle::Neox, nullptr),
                 lio::InvalidArgument);
    EXPECT_THROW(launch(x.data(), pos.data(), 1, 1, 4, -1.0f, RopeStyle::Neox, nullptr),
                 lio::InvalidArgument);
    EXPECT_THROW(launch(nullptr, pos.data(), 1, 1, 4, 1e4f, RopeStyle::Neox, nullptr),
                 lio::InvalidArgument);
    EXPECT_THROW(launch(x.data(), nullptr, 1, 1, 4, 1e4f, RopeStyle::Neox, nullptr),
                 lio::InvalidArgument);
    EXPECT_NO_THROW(launch(x.data(), pos.data(), 0, 1, 4, 1e4f, RopeStyle::Neox, nullptr));
  }
  CUDA_CHECK(cudaDeviceSynchronize());
}

// ---- runtime helpers --------------------------------------------------------------------

TEST(CudaRuntime, DeviceBufferRoundTripsAndMoves) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  EXPECT_GE(lio::cuda::cuda_device_count(), 1);
  const auto host = random_floats(37, -5.0f, 5.0f, 800);
  auto a = DeviceBuffer<float>::from_host(host);
  EXPECT_EQ(a.n_elems(), 37);
  EXPECT_EQ(a.size_bytes(), 37 * sizeof(float));
  DeviceBuffer<float> b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.n_elems(), 0);
  EXPECT_EQ(b.to_host(), host);
  std::vector<float> too_big(38);
  EXPECT_THROW(b.copy_from_host(too_big.data(), 38), lio::InvalidArgument);
  EXPECT_THROW(DeviceBuffer<float>(-1), lio::InvalidArgument);
  DeviceBuffer<float> empty(0);
  EXPECT_TRUE(empty.to_host().empty());
}

TEST(CudaRuntime, CudaCheckThrowsWithLocation) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  try {
    CUDA_CHECK(cudaErrorInvalidValue);
    FAIL() << "CUDA_CHECK did not throw";
  } catch (const lio::cuda::CudaError& e) {
    EXPECT_EQ(e.code(), cudaErrorInvalidValue);
    const std::string what = e.what();
    EXPECT_NE(what.find("test_cuda_kernels.cpp:"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaErrorInvalidValue"), std::string::npos) << what;
  }
}

}  // namespace
