// test_cuda_gemv_int8.cpp — chapter 03's int8 activations on the GPU: quantize_activations_int8
// against the CPU's two rounding formulas (bit for bit: every step is exact IEEE arithmetic),
// and gemv_int8 against a double-precision host reference over the dequantized weights and the
// dequantized int8 activations, for every block-quantized dtype and batch sizes 1 .. 37 (one
// pass, several passes, a ragged last pass). Outputs start as random values (accumulate) or
// NaN (overwrite), so a row the kernel skips cannot pass.
// GPU tests skip without a usable GPU; the argument checks run everywhere.
//
// Tolerance: the integer sums are exact, the f32 scaling and accumulation round once per
// 8-element group: |got - want| <= 2e-6 * sum_j |w_j x'_j| + 1e-6.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "device_matrix.h"
#include "gemv_int8.h"
#include "cuda_runtime_info.h"
#include "device_buffer.h"
#include "lio/dtype.h"
#include "lio/error.h"
#include "random_inputs.h"

namespace {

using lio::DType;
using lio::cuda::ActivationGroup;
using lio::cuda::DeviceBuffer;
using lio::cuda::DeviceMatrix;
using lio::testing::random_floats;

constexpr DType kInt8Dtypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                                 DType::Q4_K, DType::Q6_K, DType::Q3_0, DType::Q3_1};

/// x rounded on the host as the CPU backend rounds it: codes (n, cols) and scales (n, cols/32).
struct HostInt8 {
  std::vector<int8_t> codes;
  std::vector<float> scales;
};

HostInt8 host_round(const std::vector<float>& x, int64_t n, int64_t cols, ActivationGroup group) {
  HostInt8 h{std::vector<int8_t>(x.size()), {}};
  for (int64_t r = 0; r < n; ++r) {
    const float* row = x.data() + r * cols;
    if (group == ActivationGroup::Block32) {  // kernels/cpu/matmul.cpp quantize_rows
      for (int64_t b = 0; b < cols / 32; ++b) {
        float amax = 0.0f;
        for (int64_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(row[b * 32 + i]));
        const float d = amax / 127.0f;
        const float inv = d > 0.0f ? 1.0f / d : 0.0f;
        for (int64_t i = 0; i < 32; ++i) {
          h.codes[size_t(r * cols + b * 32 + i)] = static_cast<int8_t>(std::nearbyint(row[b * 32 + i] * inv));
        }
        h.scales.push_back(d);
      }
    } else {  // chapter 03's quantize_row_int8
      float amax = 0.0f;
      for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(row[c]));
      const float s = amax / 127.0f;
      for (int64_t c = 0; c < cols; ++c) {
        h.codes[size_t(r * cols + c)] = s > 0.0f ? static_cast<int8_t>(std::round(row[c] / s)) : int8_t{0};
      }
      for (int64_t b = 0; b < cols / 32; ++b) h.scales.push_back(s);
    }
  }
  return h;
}

/// A random (rows, cols) matrix in `dtype` (Q5_*, K-quants: random block bytes), its
/// dequantized values and a device copy.
struct TestMatrix {
  int64_t rows, cols;
  std::vector<float> dequant;
  DeviceBuffer<std::byte> bytes;
  DeviceMatrix device;

  TestMatrix(DType dtype, int64_t rows_, int64_t cols_, uint32_t seed) : rows(rows_), cols(cols_) {
    const int64_t row_bytes = lio::dtype_row_bytes(dtype, cols);
    std::vector<std::byte> host;
    if (dtype == DType::Q5_0 || dtype == DType::Q5_1 || dtype == DType::Q4_K || dtype == DType::Q6_K) {
      host = lio::testing::random_read_only_blocks(dtype, rows, cols, seed);
    } else {
      const auto values = random_floats(size_t(rows * cols), -1.0f, 1.0f, seed);
      host.resize(size_t(rows * row_bytes));
      for (int64_t r = 0; r < rows; ++r) {
        lio::quantize_row(dtype, values.data() + r * cols, host.data() + r * row_bytes, cols);
      }
    }
    dequant.resize(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      lio::dequantize_row(dtype, host.data() + r * row_bytes, dequant.data() + r * cols, cols);
    }
    bytes = DeviceBuffer<std::byte>::from_host(host);
    device = DeviceMatrix{dtype, rows, cols, row_bytes, bytes.data()};
  }
};

// Both groupings, a row with a zero block (scale 0) and values on exact .5 ties of the grid.
TEST(CudaInt8Activations, RoundingEqualsCpuBitForBit) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 5, cols = 576;
  std::vector<float> x = random_floats(size_t(n * cols), -3.0f, 3.0f, 8101);
  std::fill_n(x.begin() + cols + 64, 32, 0.0f);  // row 1, block 2: all zero
  for (int64_t i = 0; i < 32; ++i) x[size_t(2 * cols + i)] = i == 0 ? 127.0f : static_cast<float>(i) + 0.5f;  // ties
  const auto d_x = DeviceBuffer<float>::from_host(x);
  for (const ActivationGroup group : {ActivationGroup::Block32, ActivationGroup::Token}) {
    const HostInt8 want = host_round(x, n, cols, group);
    DeviceBuffer<int8_t> codes(n * cols);
    DeviceBuffer<float> scales(n * cols / 32);
    lio::cuda::quantize_activations_int8(d_x.data(), n, cols, group, codes.data(), scales.data(), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const char* what = group == ActivationGroup::Block32 ? "block32" : "token";
    EXPECT_EQ(codes.to_host(), want.codes) << what;
    EXPECT_EQ(scales.to_host(), want.scales) << what;
  }
}

TEST(CudaInt8Activations, GemvInt8MatchesDequantizedReference) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t rows = 37, cols = 512;  // whole K-quant super-blocks; rows not a multiple of 8
  uint32_t seed = 8201;
  for (const DType t : kInt8Dtypes) {
    const TestMatrix w(t, rows, cols, seed += 10);
    for (const int64_t n : {1, 3, 8, 9, 37}) {
      for (const ActivationGroup group : {ActivationGroup::Block32, ActivationGroup::Token}) {
        const std::vector<float> x = random_floats(size_t(n * cols), -2.0f, 2.0f, seed + 1);
        const HostInt8 q = host_round(x, n, cols, group);
        const auto d_codes = DeviceBuffer<int8_t>::from_host(q.codes);
        const auto d_scales = DeviceBuffer<float>::from_host(q.scales);
        for (const bool accumulate : {false, true}) {
          const std::vector<float> y0 = random_floats(size_t(n * rows), -1.0f, 1.0f, seed + 2);
          DeviceBuffer<float> y = DeviceBuffer<float>::from_host(y0);
          if (!accumulate) CUDA_CHECK(cudaMemset(y.data(), 0xFF, y.size_bytes()));
          lio::cuda::gemv_int8(w.device, d_codes.data(), d_scales.data(), y.data(), n, accumulate, nullptr);
          CUDA_CHECK(cudaDeviceSynchronize());
          const std::vector<float> got = y.to_host();
          for (int64_t r = 0; r < n; ++r) {
            for (int64_t j = 0; j < rows; ++j) {
              double want = accumulate ? y0[size_t(r * rows + j)] : 0.0, scale = 0;
              for (int64_t c = 0; c < cols; ++c) {
                const double xc = double(q.scales[size_t(r * (cols / 32) + c / 32)]) * q.codes[size_t(r * cols + c)];
                const double p = double(w.dequant[size_t(j * cols + c)]) * xc;
                want += p;
                scale += std::fabs(p);
              }
              ASSERT_NEAR(got[size_t(r * rows + j)], want, 2e-6 * scale + 1e-6)
                  << lio::dtype_info(t).name << " n=" << n << " row " << r << " out " << j
                  << (accumulate ? " accumulate" : "");
            }
          }
        }
      }
    }
  }
}

// ---- argument checks (host side: these run without a GPU) -----------------------------------

TEST(CudaInt8Arguments, LaunchersRejectBadInputBeforeLaunching) {
  auto* f = reinterpret_cast<float*>(uintptr_t{256});
  auto* q = reinterpret_cast<int8_t*>(uintptr_t{256});
  const auto* bytes = reinterpret_cast<const std::byte*>(uintptr_t{256});
  using lio::InvalidArgument;
  using lio::cuda::gemv_int8;
  using lio::cuda::quantize_activations_int8;
  EXPECT_THROW(quantize_activations_int8(f, 2, 48, ActivationGroup::Block32, q, f, nullptr), InvalidArgument);
  EXPECT_THROW(quantize_activations_int8(f, -1, 64, ActivationGroup::Token, q, f, nullptr), InvalidArgument);
  EXPECT_THROW(quantize_activations_int8(nullptr, 2, 64, ActivationGroup::Token, q, f, nullptr), InvalidArgument);
  const DeviceMatrix q8{DType::Q8_0, 4, 64, lio::dtype_row_bytes(DType::Q8_0, 64), bytes};
  const DeviceMatrix f32{DType::F32, 4, 64, 64 * 4, bytes};
  EXPECT_THROW(gemv_int8(f32, q, f, f, 2, false, nullptr), InvalidArgument);  // no integer codes
  EXPECT_THROW(gemv_int8(q8, nullptr, f, f, 2, false, nullptr), InvalidArgument);
  EXPECT_THROW(gemv_int8(q8, q, f, f, -1, false, nullptr), InvalidArgument);
  EXPECT_THROW(gemv_int8({DType::Q8_0, 4, 64, 99, bytes}, q, f, f, 2, false, nullptr), InvalidArgument);
}

}  // namespace
