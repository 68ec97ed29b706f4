// test_cuda_fused_kernels.cpp — cuda::FusedKernels (kernels/cuda/fused_kernels.h), the one place
// that decides when issue 45's fused decode kernels replace the unfused ones. Host-only: every
// answer is arithmetic on shapes and dtypes, so this runs on every machine, GPU or not.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <iterator>

#include "device_matrix.h"
#include "fused_kernels.h"
#include "gemv_fused.h"
#include "lio/dtype.h"

namespace {

using lio::DType;
using lio::cuda::DeviceMatrix;
using lio::cuda::FusedKernels;

/// A (rows, cols) matrix of `dtype` whose data pointer is `data` (never dereferenced here).
DeviceMatrix matrix(DType dtype, int64_t rows, int64_t cols, const std::byte* data) {
  return DeviceMatrix{dtype, rows, cols, lio::dtype_row_bytes(dtype, cols), data};
}

TEST(CudaFusedKernels, DisabledChoosesNothing) {
  alignas(4) std::byte storage[4] = {};
  const FusedKernels off;
  const DeviceMatrix q = matrix(DType::Q4_1, 64, 576, storage);
  const DeviceMatrix* qkv[] = {&q, &q, &q};
  EXPECT_FALSE(off.enabled());
  EXPECT_FALSE(off.wide_q4_1_gemv(q, 1));
  EXPECT_FALSE(off.rmsnorm_gemv(576, qkv, 1));
  EXPECT_FALSE(off.rope_qk());
}

TEST(CudaFusedKernels, WideGemvOnlyForOneRowOfAlignedQ4_1) {
  alignas(4) std::byte storage[8] = {};
  const FusedKernels on(true);
  EXPECT_TRUE(on.rope_qk());
  EXPECT_TRUE(on.wide_q4_1_gemv(matrix(DType::Q4_1, 64, 576, storage), 1));
  EXPECT_FALSE(on.wide_q4_1_gemv(matrix(DType::Q4_1, 64, 576, storage), 2));           // a batch: gemv_batched
  EXPECT_FALSE(on.wide_q4_1_gemv(matrix(DType::Q8_0, 64, 576, storage), 1));           // another dtype
  EXPECT_FALSE(on.wide_q4_1_gemv(matrix(DType::Q4_1, 64, 576, storage + 1), 1));       // unaligned data
}

TEST(CudaFusedKernels, RmsnormGemvNeedsOneRowOneDtypeAndTheNormsWidth) {
  const FusedKernels on(true);
  const DeviceMatrix q = matrix(DType::Q4_1, 576, 576, nullptr);
  const DeviceMatrix k = matrix(DType::Q4_1, 192, 576, nullptr);
  const DeviceMatrix k8 = matrix(DType::Q8_0, 192, 576, nullptr);
  const DeviceMatrix narrow = matrix(DType::Q4_1, 192, 512, nullptr);
  const DeviceMatrix* qkv[] = {&q, &k, &k};
  EXPECT_TRUE(on.rmsnorm_gemv(576, qkv, 1));
  EXPECT_FALSE(on.rmsnorm_gemv(576, qkv, 2));  // decode rows only
  const DeviceMatrix* mixed[] = {&q, &k8};
  EXPECT_FALSE(on.rmsnorm_gemv(576, mixed, 1));
  const DeviceMatrix* wrong_cols[] = {&q, &narrow};
  EXPECT_FALSE(on.rmsnorm_gemv(576, wrong_cols, 1));
  const DeviceMatrix* four[] = {&q, &k, &k, &k};
  static_assert(std::size(four) > lio::cuda::kMaxFusedGemvOuts);
  EXPECT_FALSE(on.rmsnorm_gemv(576, four, 1));
  EXPECT_FALSE(on.rmsnorm_gemv(576, {}, 1));
  const DeviceMatrix* with_null[] = {&q, nullptr};
  EXPECT_FALSE(on.rmsnorm_gemv(576, with_null, 1));
  // Past the shared-memory bound: the widest row the fused kernels take, and one block wider.
  const int64_t widest = lio::cuda::kFusedGemvMaxDim;
  const DeviceMatrix wide = matrix(DType::Q4_1, 32, widest, nullptr);
  const DeviceMatrix wider = matrix(DType::Q4_1, 32, widest + 32, nullptr);
  const DeviceMatrix* one_wide[] = {&wide};
  const DeviceMatrix* one_wider[] = {&wider};
  EXPECT_TRUE(on.rmsnorm_gemv(widest, one_wide, 1));
  EXPECT_FALSE(on.rmsnorm_gemv(widest + 32, one_wider, 1));
}

}  // namespace
