// test_cuda_reduce_host.cu — the argmax reduction's combine step (kernels/cuda/reduce.cuh:
// argmax_beats, argmax_combine) run on the HOST. The kernel splits a row over 1024 threads and
// merges their candidates in a shuffle tree; the answer is only lio::argmax's (first index of
// the maximum, NaN never chosen) if the merge gives the same winner in ANY order. This checks
// exactly that, on every machine, GPU or not: per-thread candidates as the kernel forms them,
// merged in random orders, against lio::argmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "lio/sampler.h"
#include "random_inputs.h"
#include "reduce.cuh"

namespace {

using lio::cuda::detail::argmax_beats;
using lio::cuda::detail::argmax_combine;
using lio::cuda::detail::ArgmaxCandidate;

/// Thread t's candidate for a row split over n_threads (columns t, t + n_threads, ...), formed
/// as argmax_kernel forms it.
std::vector<ArgmaxCandidate> thread_candidates(const std::vector<float>& row, int n_threads) {
  std::vector<ArgmaxCandidate> out(static_cast<size_t>(n_threads));
  for (int t = 0; t < n_threads; ++t) {
    ArgmaxCandidate best;
    for (size_t i = static_cast<size_t>(t); i < row.size(); i += static_cast<size_t>(n_threads)) {
      const ArgmaxCandidate c{row[i], static_cast<int32_t>(i)};
      if (argmax_beats(c, best)) best = c;
    }
    out[static_cast<size_t>(t)] = best;
  }
  return out;
}

/// Merges candidates pairwise in a random order until one is left.
ArgmaxCandidate merge_randomly(std::vector<ArgmaxCandidate> c, std::mt19937& rng) {
  while (c.size() > 1) {
    std::shuffle(c.begin(), c.end(), rng);
    std::vector<ArgmaxCandidate> next;
    for (size_t i = 0; i + 1 < c.size(); i += 2) next.push_back(argmax_combine(c[i], c[i + 1]));
    if (c.size() % 2 == 1) next.push_back(c.back());
    c = std::move(next);
  }
  return c[0];
}

TEST(CudaReduceHost, ArgmaxMergeOrderDoesNotChangeTheWinner) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 60; ++trial) {
    const size_t n = 1 + static_cast<size_t>(rng() % 5000);
    // Few distinct values, so the maximum is tied at many places.
    std::vector<float> row =
        lio::testing::random_floats(n, -4.0f, 4.0f, 300u + static_cast<uint32_t>(trial));
    for (float& v : row) v = std::round(v);
    std::uniform_int_distribution<size_t> col(0, n - 1);
    if (trial % 2 == 0) row[col(rng)] = kNaN;
    if (trial % 3 == 0) row[col(rng)] = -kInf;
    if (trial % 7 == 0) row[col(rng)] = kInf;
    const int32_t want = lio::argmax(row);
    for (const int n_threads : {1, 32, 1024}) {
      for (int order = 0; order < 3; ++order) {
        const ArgmaxCandidate got = merge_randomly(thread_candidates(row, n_threads), rng);
        // The kernel reports "no candidate" (an all-NaN row) as index 0, as lio::argmax does.
        ASSERT_EQ(got.index == ArgmaxCandidate::kNoIndex ? 0 : got.index, want)
            << "trial " << trial << " n=" << n << " threads=" << n_threads;
      }
    }
  }
}

// NaN never wins, -inf beats "nothing seen yet", and equal values go to the lower index.
TEST(CudaReduceHost, ArgmaxBeatsOrder) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(argmax_beats({nan, 0}, {-inf, 5}));
  EXPECT_FALSE(argmax_beats({nan, 0}, ArgmaxCandidate{}));
  EXPECT_TRUE(argmax_beats({-inf, 7}, ArgmaxCandidate{}));
  EXPECT_TRUE(argmax_beats({1.0f, 3}, {1.0f, 4}));
  EXPECT_FALSE(argmax_beats({1.0f, 4}, {1.0f, 3}));
  EXPECT_TRUE(argmax_beats({2.0f, 9}, {1.0f, 3}));
  EXPECT_EQ(argmax_combine({1.0f, 4}, {1.0f, 3}).index, 3);
  EXPECT_EQ(argmax_combine(ArgmaxCandidate{}, ArgmaxCandidate{}).index, ArgmaxCandidate::kNoIndex);
}

}  // namespace
