// test_cuda_nccl.cpp — chapter 08's NcclCommunicator on one GPU (world size 1: the one GPU a
// session is lent): its collectives take device memory, an all-reduce of one rank leaves the
// data as it is, an all-gather copies it, and a build without NCCL refuses with a clear error.
// Skips without a GPU (label cuda).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "lio/communicator.h"
#include "lio/error.h"
#include "lio/nccl_communicator.h"

namespace lio {
namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

TEST(NcclCommunicator, OneRankAllReduceAndAllGatherOnDeviceMemory) {
  SingleCommunicator bootstrap;
  if (!nccl_available()) {
    EXPECT_THROW(make_nccl_communicator(bootstrap), UnsupportedError);
    GTEST_SKIP() << "this build has no NCCL";
  }
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  std::unique_ptr<Communicator> nccl = make_nccl_communicator(bootstrap);
  EXPECT_EQ(nccl->size(), 1);
  EXPECT_EQ(nccl->memory_kind(), CommMemory::Device);
  const std::vector<float> host{1.5f, -2.0f, 3.25f, 0.0f, 7.0f};
  float* d_in = nullptr;
  float* d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_in, host.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out, host.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_in, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  nccl->all_reduce_sum(d_in, static_cast<int64_t>(host.size()));
  nccl->all_gather(d_in, d_out, static_cast<int64_t>(host.size()));
  std::vector<float> back(host.size());
  ASSERT_EQ(cudaMemcpy(back.data(), d_out, back.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);
  cudaFree(d_in);
  cudaFree(d_out);
}

}  // namespace
}  // namespace lio
