// The GPU benchmarks' HBM working-set plan (bench/cuda_decode/hbm_working_set.h): host-only
// arithmetic, so it runs here without a GPU. Issue 60, defect 6: bench_cuda_gemv timed 200
// launches on one copy of a layer-0 matrix of at most 1 MB, which sits in an H100 / H200's 50 MB
// L2; these tests fail on that plan (one copy, 1 MB working set).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "cuda_decode/hbm_working_set.h"
#include "lio/error.h"

namespace {

using lio::bench::HbmRotation;
using lio::bench::plan_hbm_rotation;

constexpr int64_t kMB = 1000 * 1000;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kH200L2Bytes = 50 * kMiB;  // cudaDevAttrL2CacheSize on an H100 / H200 SXM

TEST(BenchHbmWorkingSet, OneCopyOfALayerZeroMatrixReadsTheL2) {
  // The plan before the fix: 200 launches on the same 1 MB matrix.
  EXPECT_FALSE(lio::bench::streams_from_hbm(1 * kMB, kH200L2Bytes));
}

TEST(BenchHbmWorkingSet, SmallMatrixWorkingSetIsFourTimesTheL2) {
  const HbmRotation r = plan_hbm_rotation(1 * kMB, kH200L2Bytes, 200);
  EXPECT_GE(r.working_set_bytes, 4 * kH200L2Bytes);
  EXPECT_TRUE(lio::bench::streams_from_hbm(r.working_set_bytes, kH200L2Bytes));
  EXPECT_EQ(r.working_set_bytes, r.n_copies * r.bytes_per_copy);
  EXPECT_EQ(r.bytes_per_copy, 1 * kMB);
}

TEST(BenchHbmWorkingSet, EveryCopyIsReadInEachTiming) {
  // A 69 KB W_k (SmolLM2's 192 x 576 Q4_1) needs thousands of copies: 200 launches would read
  // only 14 MB of them, inside the L2, so the launches rise to one per copy.
  const HbmRotation r = plan_hbm_rotation(192 * 360, kH200L2Bytes, 200);
  EXPECT_GE(r.launches, r.n_copies);
  EXPECT_GE(r.launches, 200);
  EXPECT_GE(r.working_set_bytes, 4 * kH200L2Bytes);
}

TEST(BenchHbmWorkingSet, NeverFewerThanTwoCopies) {
  const HbmRotation r = plan_hbm_rotation(4096 * kMiB, kH200L2Bytes, 200);
  EXPECT_EQ(r.n_copies, 2);
  EXPECT_EQ(r.launches, 200);
}

TEST(BenchHbmWorkingSet, MemoryIsBoundedForHugeAndTinyMatrices) {
  const int64_t target = lio::bench::hbm_working_set_target_bytes(kH200L2Bytes);
  for (const int64_t bytes :
       {int64_t{1}, int64_t{4096}, 1 * kMB, 3 * kMB + 7, 150 * kMiB, 2048 * kMiB}) {
    const HbmRotation r = plan_hbm_rotation(bytes, kH200L2Bytes, 1);
    EXPECT_LE(r.working_set_bytes, std::max(target + bytes, 2 * bytes))
        << bytes << " bytes per copy";
    EXPECT_GE(r.working_set_bytes, target) << bytes << " bytes per copy";
  }
}

TEST(BenchHbmWorkingSet, UnknownL2KeepsTheFloor) {
  EXPECT_EQ(lio::bench::hbm_working_set_target_bytes(0), lio::bench::kHbmMinWorkingSetBytes);
  EXPECT_GE(plan_hbm_rotation(1 * kMB, 0, 1).working_set_bytes, 256 * kMiB);
}

TEST(BenchHbmWorkingSet, LargerL2RaisesTheTarget) {
  const int64_t l2 = 128 * kMiB;
  EXPECT_EQ(lio::bench::hbm_working_set_target_bytes(l2), 4 * l2);
  EXPECT_GE(plan_hbm_rotation(1 * kMB, l2, 1).working_set_bytes, 4 * l2);
}

TEST(BenchHbmWorkingSet, CopyProbeOfOneGibStreamsFromHbm) {
  // copy_bandwidth.h refuses a probe the L2 would hold; bench_cuda_gemv's 1 GiB buffers pass.
  EXPECT_TRUE(lio::bench::streams_from_hbm(int64_t{1} << 30, kH200L2Bytes));
  EXPECT_FALSE(lio::bench::streams_from_hbm(32 * kMiB, kH200L2Bytes));
}

TEST(BenchHbmWorkingSet, BadArgumentsThrow) {
  EXPECT_THROW(plan_hbm_rotation(0, kH200L2Bytes, 1), lio::InvalidArgument);
  EXPECT_THROW(plan_hbm_rotation(1 * kMB, -1, 1), lio::InvalidArgument);
  EXPECT_THROW(plan_hbm_rotation(1 * kMB, kH200L2Bytes, 0), lio::InvalidArgument);
  EXPECT_THROW(plan_hbm_rotation(INT64_MAX, kH200L2Bytes, 1), lio::InvalidArgument);
}

}  // namespace
