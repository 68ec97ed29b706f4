// test_cuda_q4_1_gemv_launch.cpp — the given launcher of chapter 03's Task 7 kernel
// (lio::cuda::launch_q4_1_gemv, kernels/cuda/q4_1_gemv.cu) refuses every bad shape and pointer
// with InvalidArgument naming what is wrong, before any CUDA call: these run on a machine without
// a GPU (a CUDA call there would throw CudaError instead, and fail the test). The kernel itself is
// graded on a GPU by tests/grade/03_quantization/test_task_7_cuda_q4_1_gemv.cpp.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "lio/dtype.h"
#include "lio/error.h"
#include "q4_1_gemv.h"

namespace {

using lio::BlockQ4_1;

/// A valid call: SmolLM2's W_q (576 x 576) on 2 rows of x. The pointers are host memory that the
/// launcher must never reach with a bad shape (it would launch on them).
struct Call {
  std::vector<BlockQ4_1> w_buf = std::vector<BlockQ4_1>(576 * 18);
  std::vector<float> x_buf = std::vector<float>(2 * 576), y_buf = std::vector<float>(2 * 576);
  const BlockQ4_1* w = w_buf.data();
  const float* x = x_buf.data();
  float* y = y_buf.data();
  int64_t n_rows = 576, n_cols = 576, n_batch = 2;
  bool accumulate = false;
  void launch() const {
    lio::cuda::launch_q4_1_gemv(w, x, y, n_rows, n_cols, n_batch, accumulate, nullptr);
  }
};

/// The launch throws InvalidArgument whose message contains `needle`.
void expect_refused(const Call& c, const std::string& needle) {
  try {
    c.launch();
    ADD_FAILURE() << "no exception; expected InvalidArgument mentioning '" << needle << "'";
  } catch (const lio::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("launch_q4_1_gemv"), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InvalidArgument mentioning '" << needle << "', got: " << e.what();
  }
}

}  // namespace

TEST(CudaQ4_1GemvLaunch, RefusesRowCountsOutsideInt) {
  Call c;
  c.n_rows = -1;
  expect_refused(c, "n_rows must be in 0 .. INT32_MAX");
  c.n_rows = int64_t{INT32_MAX} + 1;
  expect_refused(c, "n_rows must be in 0 .. INT32_MAX");
}

TEST(CudaQ4_1GemvLaunch, RefusesColumnsThatAreNotWholeBlocks) {
  for (const int64_t n_cols : {int64_t{0}, int64_t{-32}, int64_t{16}, int64_t{48}, int64_t{577}}) {
    Call c;
    c.n_cols = n_cols;
    expect_refused(c, "n_cols must be a positive multiple of 32");
  }
}

TEST(CudaQ4_1GemvLaunch, RefusesBatchesOutsideOneToEight) {
  for (const int64_t n_batch : {0, -1, 9, 64}) {
    Call c;
    c.n_batch = n_batch;
    expect_refused(c, "n_batch must be in 1 .. 8, got " + std::to_string(n_batch));
  }
}

TEST(CudaQ4_1GemvLaunch, RefusesXPastTheSharedMemory) {
  Call c;
  c.n_batch = 8, c.n_cols = 1568;  // 12,544 floats: 50,176 bytes
  expect_refused(c, "at most 12,288 floats");
  c = Call{};
  c.n_batch = 1, c.n_cols = 12320;
  expect_refused(c, "at most 12,288 floats");
}

TEST(CudaQ4_1GemvLaunch, RefusesNullMisalignedAndOverlappingPointers) {
  Call c;
  c.w = nullptr;
  expect_refused(c, "non-null");
  c = Call{};
  c.y = nullptr;
  expect_refused(c, "non-null");
  c = Call{};
  c.w = reinterpret_cast<const BlockQ4_1*>(reinterpret_cast<const char*>(c.w_buf.data()) + 2);
  expect_refused(c, "4-byte aligned");
  c = Call{};
  c.y = c.x_buf.data() + 100;  // inside x
  expect_refused(c, "y overlaps w or x");
  c = Call{};
  c.y = reinterpret_cast<float*>(c.w_buf.data() + 10);  // inside w
  expect_refused(c, "y overlaps w or x");
}

TEST(CudaQ4_1GemvLaunch, NoRowsLaunchNothing) {
  Call c;
  c.n_rows = 0;
  c.w = nullptr, c.x = nullptr, c.y = nullptr;
  EXPECT_NO_THROW(c.launch());  // returns before any CUDA call, so also without a GPU
}

TEST(CudaQ4_1GemvLaunch, SharedMemoryAndGridOfTheLessonsExample) {
  // The lesson's worked example: one row of x of 576 floats; the widest, 8 rows of 1,536.
  EXPECT_EQ(lio::cuda::q4_1_gemv_smem_bytes(1, 576), 2304u);
  EXPECT_EQ(lio::cuda::q4_1_gemv_smem_bytes(8, 1536), lio::cuda::kQ4_1GemvMaxSmemBytes);
  EXPECT_EQ(lio::cuda::q4_1_gemv_blocks(576), 72);
  EXPECT_EQ(lio::cuda::q4_1_gemv_blocks(49152), 6144);
  EXPECT_EQ(lio::cuda::q4_1_gemv_blocks(13), 2);
  EXPECT_EQ(lio::cuda::q4_1_gemv_blocks(1), 1);
  EXPECT_EQ(lio::cuda::kQ4_1BlockBytes * (576 / 32), 360);  // bytes of one SmolLM2 row
}
