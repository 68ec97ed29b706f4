// test_cuda_paged_decode_launch.cpp — the given launcher of chapter 04's Task 6 kernel
// (lio::cuda::launch_paged_decode, kernels/cuda/paged_decode.cu) refuses every bad shape and
// pointer with InvalidArgument naming what is wrong, before any CUDA call: these run on a machine
// without a GPU (a CUDA call there would throw CudaError instead, and fail the test). The kernel
// itself is graded on a GPU by tests/grade/04_paged_attention/test_task_6_cuda_paged_decode.cpp.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "lio/error.h"
#include "paged_decode.h"

namespace {

/// A valid call: SmolLM2's attention shape, 3 sequences in a pool of 20 blocks of 16 tokens, 8
/// table entries each. The pointers are host memory that the launcher must never reach with a bad
/// shape (it would launch on them).
struct Call {
  std::vector<float> q_buf = std::vector<float>(3 * 9 * 64),
                     pool_buf = std::vector<float>(2 * 20 * 16 * 3 * 64),
                     out_buf = std::vector<float>(3 * 9 * 64);
  std::vector<int32_t> tables_buf = std::vector<int32_t>(3 * 8), lens_buf = {45, 1, 100};
  const float* q = q_buf.data();
  const float* k_pool = pool_buf.data();
  const float* v_pool = pool_buf.data() + 20 * 16 * 3 * 64;
  float* out = out_buf.data();
  const int32_t* block_tables = tables_buf.data();
  const int32_t* seq_lens = lens_buf.data();
  int64_t n_seqs = 3, n_blocks = 20, block_size = 16, max_blocks_per_seq = 8, n_heads = 9,
          n_kv_heads = 3, head_dim = 64;
  float scale = 0.125f;
  void launch() const {
    lio::cuda::launch_paged_decode(q, k_pool, v_pool, out, block_tables, seq_lens, n_seqs, n_blocks,
                                   block_size, max_blocks_per_seq, n_heads, n_kv_heads, head_dim,
                                   scale, nullptr);
  }
};

/// The launch throws InvalidArgument whose message contains `needle`.
void expect_refused(const Call& c, const std::string& needle) {
  try {
    c.launch();
    ADD_FAILURE() << "no exception; expected InvalidArgument mentioning '" << needle << "'";
  } catch (const lio::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("launch_paged_decode"), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InvalidArgument mentioning '" << needle << "', got: " << e.what();
  }
}

}  // namespace

TEST(CudaPagedDecodeLaunch, RefusesBadCountsAndPoolShapes) {
  Call c;
  c.n_seqs = -1;
  expect_refused(c, "n_seqs must be in 0 .. INT32_MAX");
  c = Call{};
  c.n_seqs = int64_t{INT32_MAX} + 1;
  expect_refused(c, "n_seqs must be in 0 .. INT32_MAX");
  for (int64_t* field : {&c.n_blocks, &c.block_size, &c.max_blocks_per_seq}) {
    c = Call{};
    *field = 0;
    expect_refused(c, "n_blocks, block_size and max_blocks_per_seq must be >= 1");
  }
  c = Call{};
  c.block_size = 1 << 16, c.max_blocks_per_seq = 1 << 16;  // 2^32 positions a sequence
  expect_refused(c, "exceeds INT32_MAX (positions are int)");
  c = Call{};
  c.n_blocks = INT64_MAX / 64;
  expect_refused(c, "overflows int64");
}

TEST(CudaPagedDecodeLaunch, RefusesHeadsThatDoNotGroup) {
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

TEST(CudaPagedDecodeLaunch, RefusesHeadDimsOutsideTheKernelsRange) {
  for (const int64_t head_dim : {0, 16, 48, 80, 160, 256}) {
    Call c;
    c.head_dim = head_dim;
    expect_refused(
        c, "head_dim must be a multiple of 32 in 32 .. 128, got " + std::to_string(head_dim));
  }
}

TEST(CudaPagedDecodeLaunch, RefusesNonFiniteScaleNullAndOverlappingPointers) {
  Call c;
  c.scale = INFINITY;
  expect_refused(c, "scale must be finite");
  c = Call{};
  c.seq_lens = nullptr;
  expect_refused(c, "non-null");
  c = Call{};
  c.block_tables = nullptr;
  expect_refused(c, "non-null");
  c = Call{};
  c.out = c.pool_buf.data() + 20 * 16 * 3 * 64 + 100;  // inside v_pool
  expect_refused(c, "out overlaps q, k_pool or v_pool");
}

TEST(CudaPagedDecodeLaunch, NoSequencesLaunchNothing) {
  Call c;
  c.n_seqs = 0;
  c.q = c.k_pool = c.v_pool = nullptr;
  c.out = nullptr;
  c.block_tables = c.seq_lens = nullptr;
  EXPECT_NO_THROW(c.launch());  // returns before any CUDA call, so also without a GPU
}

TEST(CudaPagedDecodeLaunch, SharedMemoryAndGridOfTheLessonsExample) {
  // The lesson's worked example: K and V tiles of 32 keys at a stride of 65 floats, then 4 query
  // vectors of 64 floats.
  EXPECT_EQ(lio::cuda::paged_decode_smem_bytes(64), (2u * 32 * 65 + 4 * 64) * 4);
  EXPECT_EQ(lio::cuda::paged_decode_smem_bytes(64), 17664u);
  EXPECT_EQ(lio::cuda::paged_decode_smem_bytes(lio::cuda::kPagedDecodeMaxHeadDim), 35072u);
  EXPECT_EQ(lio::cuda::paged_decode_blocks_per_group(9, 3), 1);  // SmolLM2: group of 3
  EXPECT_EQ(lio::cuda::paged_decode_blocks_per_group(4, 4), 1);  // one head a KV head
  EXPECT_EQ(lio::cuda::paged_decode_blocks_per_group(12, 2), 2);  // group of 6: 4 + 2
  EXPECT_EQ(lio::cuda::paged_decode_blocks_per_group(64, 8), 2);  // Llama-3-70B: group of 8
}
