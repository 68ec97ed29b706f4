// test_cuda_flash_forward_launch.cpp — the given launcher of chapter 07's Task 6 kernel
// (lio::cuda::launch_flash_forward, kernels/cuda/flash_forward.cu) refuses every bad shape and
// pointer with InvalidArgument naming what is wrong, before any CUDA call: these run on a machine
// without a GPU (a CUDA call there would throw CudaError instead, and fail the test). The kernel
// itself is graded on a GPU by tests/grade/07_flash_attention/test_task_6_cuda_flash_forward.cpp.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "flash_forward.h"
#include "lio/error.h"

namespace {

/// A valid call: SmolLM2's attention shape, 7 rows after 300 cached positions. The pointers are
/// host memory that the launcher must never reach with a bad shape (it would launch on them).
struct Call {
  std::vector<float> q_buf = std::vector<float>(7 * 9 * 64),
                     kv_buf = std::vector<float>(2 * 307 * 3 * 64),
                     out_buf = std::vector<float>(7 * 9 * 64);
  const float* q = q_buf.data();
  const float* k = kv_buf.data();
  const float* v = kv_buf.data() + 307 * 3 * 64;
  float* out = out_buf.data();
  int64_t n_q = 7, start_pos = 300, n_ctx = 307, n_heads = 9, n_kv_heads = 3, head_dim = 64;
  float scale = 0.125f;
  void launch() const {
    lio::cuda::launch_flash_forward(q, k, v, out, n_q, start_pos, n_ctx, n_heads, n_kv_heads,
                                    head_dim, scale, nullptr);
  }
};

/// The launch throws InvalidArgument whose message contains `needle`.
void expect_refused(const Call& c, const std::string& needle) {
  try {
    c.launch();
    ADD_FAILURE() << "no exception; expected InvalidArgument mentioning '" << needle << "'";
  } catch (const lio::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("launch_flash_forward"), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InvalidArgument mentioning '" << needle << "', got: " << e.what();
  }
}

}  // namespace

TEST(CudaFlashForwardLaunch, RefusesBadCountsAndPositions) {
  Call c;
  c.n_q = -1;
  expect_refused(c, "n_q must be >= 0");
  c = Call{};
  c.start_pos = -5;
  expect_refused(c, "start_pos must be >= 0");
  c = Call{};
  c.n_ctx = 306;  // the last query (position 306) would have no key of its own
  expect_refused(c, "n_ctx (306) < start_pos + n_q");
  c = Call{};
  c.start_pos = INT32_MAX, c.n_ctx = INT64_MAX / 4;
  expect_refused(c, "exceeds INT32_MAX");
}

TEST(CudaFlashForwardLaunch, RefusesHeadsThatDoNotGroup) {
  Call c;
  c.n_kv_heads = 2;  // 9 query heads cannot share 2 KV heads evenly
  expect_refused(c, "n_heads (9) must be a multiple of n_kv_heads (2)");
  c = Call{};
  c.n_kv_heads = 0;
  expect_refused(c, "must be >= 1");
  c = Call{};
  c.n_heads = 70000, c.n_kv_heads = 1;
  expect_refused(c, "65,535");
}

TEST(CudaFlashForwardLaunch, RefusesHeadDimsOutsideTheKernelsRange) {
  for (const int64_t head_dim : {0, 8, 72, 144, 256}) {
    Call c;
    c.head_dim = head_dim;
    expect_refused(
        c, "head_dim must be a multiple of 16 in 16 .. 128, got " + std::to_string(head_dim));
  }
}

TEST(CudaFlashForwardLaunch, RefusesNonFiniteScaleNullAndOverlappingPointers) {
  Call c;
  c.scale = NAN;
  expect_refused(c, "scale must be finite");
  c = Call{};
  c.v = nullptr;
  expect_refused(c, "non-null");
  c = Call{};
  c.out = c.kv_buf.data() + 100;  // inside k
  expect_refused(c, "out overlaps q, k or v");
}

TEST(CudaFlashForwardLaunch, NoRowsLaunchNothing) {
  Call c;
  c.n_q = 0, c.n_ctx = 300;
  c.q = c.k = c.v = nullptr;
  c.out = nullptr;
  EXPECT_NO_THROW(c.launch());  // returns before any CUDA call, so also without a GPU
}

TEST(CudaFlashForwardLaunch, SharedMemoryIsTheKAndVTiles) {
  // The lesson's worked example: Bc = 32 keys of head_dim 64 in f32, one K and one V tile.
  EXPECT_EQ(lio::cuda::flash_forward_smem_bytes(64), 2u * 32 * 64 * 4);
  EXPECT_EQ(lio::cuda::flash_forward_smem_bytes(64), 16384u);
  EXPECT_EQ(lio::cuda::flash_forward_smem_bytes(lio::cuda::kFlashForwardMaxHeadDim), 32768u);
}
