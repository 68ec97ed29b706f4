// test_cuda_gemv_batched.cpp — the small-batch matmul (gemv_batched, its naive twin, and
// cuda::matmul's dispatch to it) and the row gather, on fresh random weights in every dtype
// (fixed seeds, never zeros), against gemv row by row and a double-precision host reference
// over lio::dequantize_row's weights. Outputs start as random values (accumulate) or NaN
// (overwrite), so a row the kernel skips cannot pass.
// GPU tests skip without a usable GPU; the argument checks run everywhere.
//
// Tolerances: f32 accumulation in another order than the reference's: |got - want| <=
// 2e-6 * sum_j |w_j x_j| + 1e-6 (as test_cuda_ops.cpp's gemv bound). Against gemv on the same
// row the arithmetic is the same in the same order: 1e-6 of the same scale (a compiler may
// still contract a multiply-add differently).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cublas_handle.h"
#include "cuda_check.h"
#include "device_matrix.h"
#include "elementwise.h"
#include "gemv.h"
#include "gemv_batched.h"
#include "matmul.h"
#include "cuda_runtime_info.h"
#include "device_buffer.h"
#include "lio/dtype.h"
#include "lio/error.h"
#include "random_inputs.h"

namespace {

using lio::DType;
using lio::cuda::DeviceBuffer;
using lio::cuda::DeviceMatrix;
using lio::testing::random_floats;

constexpr DType kAllDtypes[] = {DType::F32,  DType::F16,  DType::BF16,
                                DType::Q8_0, DType::Q4_0, DType::Q4_1};

std::string dtype_name(DType t) { return std::string(lio::dtype_info(t).name); }

/// A random (rows, cols) matrix stored in `dtype`, its dequantized values, and a device copy.
struct TestMatrix {
  int64_t rows, cols;
  std::vector<float> dequant;  // (rows, cols) what the stored bytes mean (lio::dequantize_row)
  DeviceBuffer<std::byte> bytes;
  DeviceMatrix device;

  TestMatrix(DType dtype, int64_t rows_, int64_t cols_, uint32_t seed) : rows(rows_), cols(cols_) {
    const int64_t row_bytes = lio::dtype_row_bytes(dtype, cols);
    const auto values = random_floats(size_t(rows * cols), -1.0f, 1.0f, seed);
    std::vector<std::byte> host(size_t(rows * row_bytes));
    dequant.resize(values.size());
    for (int64_t r = 0; r < rows; ++r) {
      lio::quantize_row(dtype, values.data() + r * cols, host.data() + r * row_bytes, cols);
      lio::dequantize_row(dtype, host.data() + r * row_bytes, dequant.data() + r * cols, cols);
    }
    bytes = DeviceBuffer<std::byte>::from_host(host);
    device = DeviceMatrix{dtype, rows, cols, row_bytes, bytes.data()};
  }

  /// (sum_j W[r][j] x[j], sum_j |W[r][j] x[j]|) in double.
  std::pair<double, double> dot(int64_t r, const float* x) const {
    double s = 0, a = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const double p = double(dequant[size_t(r * cols + j)]) * x[j];
      s += p;
      a += std::fabs(p);
    }
    return {s, a};
  }
};

/// The signature gemv_batched and gemv_batched_naive share.
using BatchedLaunch = void (*)(const DeviceMatrix&, const float*, float*, int64_t, bool,
                               cudaStream_t);

/// Runs `launch` (callable as a BatchedLaunch) for n x rows against the double reference (and,
/// when `gemv_too`, against gemv launched per row), with and without accumulate.
template <typename Launch>
void check_batched(Launch launch, DType t, int64_t rows, int64_t cols, int64_t n, uint32_t seed,
                   bool gemv_too) {
  const std::string what = dtype_name(t) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                           " n=" + std::to_string(n);
  TestMatrix m(t, rows, cols, seed);
  const auto x = random_floats(size_t(n * cols), -2.0f, 2.0f, seed + 1);
  const auto y0 = random_floats(size_t(n * rows), -5.0f, 5.0f, seed + 2);
  const auto d_x = DeviceBuffer<float>::from_host(x);
  for (bool accumulate : {false, true}) {
    auto d_y = DeviceBuffer<float>::from_host(y0);
    if (!accumulate) CUDA_CHECK(cudaMemset(d_y.data(), 0xFF, d_y.size_bytes()));  // NaN
    launch(m.device, d_x.data(), d_y.data(), n, accumulate, nullptr);
    std::vector<float> per_row;
    if (gemv_too) {
      auto d_g = DeviceBuffer<float>::from_host(y0);
      for (int64_t i = 0; i < n; ++i) {
        lio::cuda::gemv(m.device, d_x.data() + i * cols, d_g.data() + i * rows, accumulate,
                        nullptr);
      }
      CUDA_CHECK(cudaDeviceSynchronize());
      per_row = d_g.to_host();
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    const auto got = d_y.to_host();
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t r = 0; r < rows; ++r) {
        const size_t at = size_t(i * rows + r);
        const auto [dot, scale] = m.dot(r, x.data() + i * cols);
        const double want = dot + (accumulate ? y0[at] : 0.0f);
        const double y_scale = accumulate ? std::fabs(y0[at]) : 0.0;
        ASSERT_NEAR(got[at], want, 2e-6 * scale + 1e-6 + 1e-6 * y_scale)
            << what << " accumulate=" << accumulate << " x row " << i << " out " << r;
        if (gemv_too) {
          ASSERT_NEAR(got[at], per_row[at], 1e-6 * scale + 1e-6 * y_scale)
              << what << " vs gemv, accumulate=" << accumulate << " x row " << i << " out " << r;
        }
      }
    }
  }
}

// Every dtype, every batch size matmul() sends here (2 .. 16: one and two passes of 8, ragged
// groups). rows = 75: the last block has 3 of 8 warps busy; cols = 320: one full 256-column
// warp step plus a partial one.
TEST(CudaGemvBatched, MatchesGemvAndReferenceEveryDtypeAndBatch) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 11;
  for (DType t : kAllDtypes) {
    for (int64_t n = 2; n <= lio::cuda::kGemvBatchedMaxRows; ++n) {
      check_batched(lio::cuda::gemv_batched, t, 75, 320, n, seed += 3, true);
    }
  }
}

// Float dtypes with a ragged tail inside a lane's 8 columns (cols = 70: staged rows padded to
// 72), and rows wider than the shared-memory staging limit (x read through L1/L2).
TEST(CudaGemvBatched, RaggedAndWideRows) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t wide = lio::cuda::kGemvBatchedMaxSharedCols;
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    check_batched(lio::cuda::gemv_batched, t, 9, 70, 5, 101 + uint32_t(t), true);
  }
  check_batched(lio::cuda::gemv_batched, DType::Q8_0, 5, wide, 9, 201, true);       // at the limit
  check_batched(lio::cuda::gemv_batched, DType::Q4_1, 5, wide + 32, 9, 203, true);  // past it
  check_batched(lio::cuda::gemv_batched, DType::F32, 3, wide + 68, 3, 205, true);   // past, ragged
}

TEST(CudaGemvBatched, NaiveMatchesReferenceEveryDtype) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 301;
  for (DType t : kAllDtypes) {
    check_batched(lio::cuda::gemv_batched_naive, t, 75, 320, 11, seed += 3, false);
  }
}

// cuda::matmul sends 2 .. kGemvBatchedMaxRows rows to gemv_batched, which needs no scratch:
// a null scratch works for a quantized matrix there (and only there; see the argument test).
TEST(CudaMatmul, SmallBatchesUseGemvBatchedWithoutScratch) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  lio::cuda::CublasHandle cublas;
  const auto via_matmul = [&cublas](const DeviceMatrix& w, const float* x, float* y, int64_t n,
                                    bool accumulate, cudaStream_t stream) {
    lio::cuda::matmul(cublas, w, x, y, n, accumulate, nullptr, 0, stream);
  };
  check_batched(via_matmul, DType::Q4_1, 40, 256, 2, 401, true);
  check_batched(via_matmul, DType::Q8_0, 40, 256, lio::cuda::kGemvBatchedMaxRows, 403, true);
}

TEST(CudaGatherRows, CopiesTheRequestedRows) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t dim = 577, n_src = 9;
  const std::vector<int32_t> rows = {8, 0, 3, 3, 7};
  const auto x = random_floats(size_t(n_src * dim), -4.0f, 4.0f, 501);
  const auto d_x = DeviceBuffer<float>::from_host(x);
  const auto d_rows = DeviceBuffer<int32_t>::from_host(rows);
  DeviceBuffer<float> d_out(int64_t(rows.size()) * dim);
  CUDA_CHECK(cudaMemset(d_out.data(), 0xFF, d_out.size_bytes()));
  lio::cuda::gather_rows(d_x.data(), d_rows.data(), int64_t(rows.size()), dim, d_out.data(),
                         nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> want;
  for (int32_t r : rows) want.insert(want.end(), x.begin() + r * dim, x.begin() + (r + 1) * dim);
  EXPECT_EQ(d_out.to_host(), want);
}

// ---- argument checks (host side: these run without a GPU) -----------------------------------

TEST(CudaGemvBatchedArguments, LaunchersRejectBadShapesBeforeLaunching) {
  auto* f = reinterpret_cast<float*>(uintptr_t{256});
  const auto* fake_bytes = reinterpret_cast<const std::byte*>(uintptr_t{256});
  const auto* ids = reinterpret_cast<const int32_t*>(uintptr_t{256});
  using lio::InvalidArgument;
  const DeviceMatrix ok{DType::Q8_0, 4, 64, lio::dtype_row_bytes(DType::Q8_0, 64), fake_bytes};
  const DeviceMatrix partial_block{DType::Q4_1, 4, 40, lio::dtype_row_bytes(DType::F32, 40),
                                   fake_bytes};
  const DeviceMatrix wrong_bytes{DType::Q8_0, 4, 64, 64, fake_bytes};
  for (const BatchedLaunch launch :
       {BatchedLaunch{lio::cuda::gemv_batched}, BatchedLaunch{lio::cuda::gemv_batched_naive}}) {
    EXPECT_THROW(launch(partial_block, f, f, 3, false, nullptr), InvalidArgument);
    EXPECT_THROW(launch(wrong_bytes, f, f, 3, false, nullptr), InvalidArgument);
    EXPECT_THROW(launch(ok, nullptr, f, 3, false, nullptr), InvalidArgument);
    EXPECT_THROW(launch(ok, f, nullptr, 3, false, nullptr), InvalidArgument);
    EXPECT_THROW(launch(ok, f, f, -1, false, nullptr), InvalidArgument);
    EXPECT_THROW(launch(DeviceMatrix{}, f, f, 3, false, nullptr), InvalidArgument);
  }
  // Past kGemvBatchedMaxRows a quantized matrix goes through the f32 scratch: none given.
  // (The cuBLAS handle is never touched: the scratch check comes first.)
  if (lio::cuda::cuda_available()) {
    lio::cuda::CublasHandle cublas;
    EXPECT_THROW(lio::cuda::matmul(cublas, ok, f, f, lio::cuda::kGemvBatchedMaxRows + 1, false,
                                   nullptr, 0, nullptr),
                 InvalidArgument);
  }
  EXPECT_THROW(lio::cuda::gather_rows(f, ids, -1, 8, f, nullptr), InvalidArgument);
  EXPECT_THROW(lio::cuda::gather_rows(f, ids, 2, 0, f, nullptr), InvalidArgument);
  EXPECT_THROW(lio::cuda::gather_rows(f, nullptr, 2, 8, f, nullptr), InvalidArgument);
}

}  // namespace
