// Tree verification on the CUDA backend (issue 63, item 4): the CUDA twin of test_tree_verify.cpp.
// Every node of a draft tree run in ONE pass on the GPU gets the logits of its root-to-node path
// run as a plain chain after the same prefix (fresh GPU pool), for each CUDA attention backend
// (flash, naive, paged), the f16 pool (chapter 04's quantized kernel) and gemma3's windowed
// layers. Skips without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_runtime_info.h"
#include "tree_pass.h"

namespace {

class CudaTreeTest : public ::testing::Test {
 protected:
  std::string dir_ = lio::testing::make_temp_dir("lio_test_cuda_tree");
};

// Flash, naive and paged on an f32 pool and the f16 pool; the third tree of 3 nodes.
TEST_F(CudaTreeTest, EachNodeGetsItsPathsLogitsOnEveryCudaAttentionBackend) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const lio::LoadedModel m = lio::testing::load_tiny_tree_model(dir_, lio::testing::TinyModelSpec{}, "llama");
  lio::testing::expect_tree_pass_on_every_backend(m, lio::Device::Cuda, {lio::KvCacheDType::F32, lio::KvCacheDType::F16},
                                                  {3, 60, 100}, {-1, 0, 0}, "llama");
}

TEST_F(CudaTreeTest, SlidingWindowLayersMeasureTheWindowFromTheNodesDepth) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  lio::testing::TinyModelSpec spec;
  spec.architecture = "gemma3";
  spec.sliding_window = 3;
  const lio::LoadedModel m = lio::testing::load_tiny_tree_model(dir_, spec, "gemma3");
  lio::testing::expect_tree_pass_on_every_backend(m, lio::Device::Cuda, {lio::KvCacheDType::F32, lio::KvCacheDType::F16},
                                                  {3, 60, 100}, {-1, 0, 0}, "gemma3 window 3");
}

}  // namespace
