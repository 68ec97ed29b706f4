// Chapter 02, Task 3: mean-pooling K/V heads into groups (exercises/02_gqa_mla/gqa.cpp).
#include <gtest/gtest.h>

#include <vector>

#include "lio/error.h"
#include "lio/gqa.h"

namespace {
using namespace lio;

// w[(j * head_dim + d) * cols + c] = 100 * j + 10 * d + c: head j's rows are easy to read.
std::vector<float> heads(int64_t n_kv, int64_t head_dim, int64_t cols) {
  std::vector<float> w(static_cast<size_t>(n_kv * head_dim * cols));
  for (int64_t j = 0; j < n_kv; ++j)
    for (int64_t d = 0; d < head_dim; ++d)
      for (int64_t c = 0; c < cols; ++c)
        w[static_cast<size_t>((j * head_dim + d) * cols + c)] = static_cast<float>(100 * j + 10 * d + c);
  return w;
}

TEST(Ch02Task3, ThreeHeadsIntoOne) {  // SmolLM2's GQA -> MQA
  const std::vector<float> out = mean_pool_kv_heads(heads(3, 2, 3), 3, 2, 3, 1);
  ASSERT_EQ(out.size(), 6u);
  // mean of 100 j over j = 0, 1, 2 is 100.
  EXPECT_EQ(out, (std::vector<float>{100, 101, 102, 110, 111, 112}));
}

TEST(Ch02Task3, FourHeadsIntoTwoGroupsOfConsecutiveHeads) {
  const std::vector<float> out = mean_pool_kv_heads(heads(4, 1, 2), 4, 1, 2, 2);
  // group 0 = mean(head 0, head 1) = 50 + c; group 1 = mean(head 2, head 3) = 250 + c.
  EXPECT_EQ(out, (std::vector<float>{50, 51, 250, 251}));
}

TEST(Ch02Task3, OneGroupPerHeadIsTheIdentity) {
  const std::vector<float> w = heads(3, 4, 5);
  EXPECT_EQ(mean_pool_kv_heads(w, 3, 4, 5, 3), w);
}

TEST(Ch02Task3, MeanNotSum) {
  const std::vector<float> w = {2, 4, 6, 8};  // 4 heads of 1 row, 1 column
  EXPECT_EQ(mean_pool_kv_heads(w, 4, 1, 1, 1), std::vector<float>{5});
}

TEST(Ch02Task3, RejectsBadShapes) {
  const std::vector<float> w = heads(3, 2, 3);
  EXPECT_THROW(mean_pool_kv_heads(w, 3, 2, 3, 2), InvalidArgument);  // 3 heads, 2 groups
  EXPECT_THROW(mean_pool_kv_heads(w, 3, 2, 4, 1), InvalidArgument);  // size mismatch
  EXPECT_THROW(mean_pool_kv_heads(w, 3, 2, 3, 0), InvalidArgument);
}

}  // namespace
