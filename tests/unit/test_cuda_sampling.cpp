// test_cuda_sampling.cpp — the greedy sampler's kernels (kernels/cuda/sampling.cu) against the
// CPU sampler's own functions (lio/sampler.h): argmax (optimized and naive) against lio::argmax
// and the repetition penalty against lio::repeat_penalty_logit. Both are exact — the same index,
// the same bits — so the tolerance is zero. Rows are drawn fresh (fixed seeds) and then given
// ties, NaN, +inf and -inf, since those are where an argmax goes wrong. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "sampling.h"
#include "cuda_runtime_info.h"
#include "device_buffer.h"
#include "lio/error.h"
#include "lio/sampler.h"
#include "random_inputs.h"

namespace {

using lio::cuda::ArgmaxResult;
using lio::cuda::DeviceBuffer;
using lio::testing::random_floats;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// What the kernels must report for one row, computed on the host.
ArgmaxResult expected_result(const float* row, int64_t n) {
  ArgmaxResult r;
  r.index = lio::argmax(std::span<const float>(row, static_cast<size_t>(n)));
  for (int64_t i = 0; i < n; ++i) {
    r.n_invalid += !(row[i] < kInf);
    r.n_masked += row[i] == -kInf;
  }
  return r;
}

using ArgmaxLauncher = void (*)(const float*, ArgmaxResult*, int64_t, int64_t, cudaStream_t);

/// Runs `launch` on (n_rows, n) host values and compares every row with expected_result().
void check_argmax(ArgmaxLauncher launch, const std::vector<float>& x, int64_t n_rows, int64_t n,
                  const std::string& what) {
  ASSERT_EQ(x.size(), static_cast<size_t>(n_rows * n));
  auto d_x = DeviceBuffer<float>::from_host(x);
  DeviceBuffer<ArgmaxResult> d_out(n_rows);
  launch(d_x.data(), d_out.data(), n_rows, n, cudaStream_t{nullptr});
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<ArgmaxResult> got = d_out.to_host();
  for (int64_t r = 0; r < n_rows; ++r) {
    const ArgmaxResult want = expected_result(x.data() + r * n, n);
    const ArgmaxResult& g = got[static_cast<size_t>(r)];
    EXPECT_EQ(g.index, want.index) << what << " row " << r << " n=" << n;
    EXPECT_EQ(g.n_invalid, want.n_invalid) << what << " row " << r << " n=" << n;
    EXPECT_EQ(g.n_masked, want.n_masked) << what << " row " << r << " n=" << n;
  }
}

/// Random rows of logits, then in row r: the maximum repeated at several places (ties), and
/// NaN / -inf / +inf sprinkled by the row's number, so each row tests another mix.
std::vector<float> tricky_rows(int64_t n_rows, int64_t n, uint32_t seed) {
  std::vector<float> x = random_floats(static_cast<size_t>(n_rows * n), -8.0f, 8.0f, seed);
  std::mt19937 rng(seed + 1);
  std::uniform_int_distribution<int64_t> col(0, n - 1);
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = x.data() + r * n;
    const int32_t top = lio::argmax(std::span<const float>(row, static_cast<size_t>(n)));
    for (int k = 0; k < 3; ++k) row[col(rng)] = row[top];  // ties at random places
    if (r % 2 == 1) row[col(rng)] = kNaN;
    if (r % 3 == 1) row[col(rng)] = -kInf;
    if (r % 5 == 4) row[col(rng)] = kInf;
  }
  return x;
}

// Sizes around the block width (1024) and warp width, plus SmolLM2's vocabulary (49152).
constexpr int64_t kRowLengths[] = {1, 2, 31, 33, 1023, 1024, 1025, 4099, 49152};

TEST(CudaArgmax, MatchesCpuArgmax) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 5;
  for (int64_t n : kRowLengths) {
    check_argmax(lio::cuda::argmax, tricky_rows(6, n, seed), 6, n, "argmax");
    seed += 7;
  }
}

TEST(CudaArgmax, NaiveMatchesCpuArgmax) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 105;
  for (int64_t n : kRowLengths) {
    check_argmax(lio::cuda::argmax_naive, tricky_rows(6, n, seed), 6, n, "argmax_naive");
    seed += 7;
  }
}

// The edges the sampler cares about: all -inf (index 0, every value masked), all NaN (index 0,
// every value invalid), the only finite value last, the maximum both first and last.
TEST(CudaArgmax, DegenerateRows) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 3000;
  std::vector<float> x(static_cast<size_t>(4 * n), -kInf);
  std::fill(x.begin() + n, x.begin() + 2 * n, kNaN);
  x[static_cast<size_t>(3 * n - 1)] = -1e30f;
  const auto rest = random_floats(static_cast<size_t>(n), -1.0f, 1.0f, 77);
  std::copy(rest.begin(), rest.end(), x.begin() + 3 * n);
  x[static_cast<size_t>(3 * n)] = 2.0f;
  x[static_cast<size_t>(4 * n - 1)] = 2.0f;
  for (ArgmaxLauncher launch : {lio::cuda::argmax, lio::cuda::argmax_naive}) {
    check_argmax(launch, x, 4, n, "degenerate");
  }
  auto d_x = DeviceBuffer<float>::from_host(x);
  DeviceBuffer<ArgmaxResult> d_out(4);
  lio::cuda::argmax(d_x.data(), d_out.data(), 4, n, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = d_out.to_host();
  EXPECT_EQ(got[0].n_masked, n);
  EXPECT_EQ(got[1].n_invalid, n);
  EXPECT_EQ(got[2].index, n - 1);
  EXPECT_EQ(got[3].index, 0);
}

TEST(CudaArgmax, RejectsBadArguments) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  DeviceBuffer<float> x(8);
  DeviceBuffer<ArgmaxResult> out(1);
  EXPECT_THROW(lio::cuda::argmax(x.data(), out.data(), 1, 0, nullptr), lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::argmax(x.data(), out.data(), -1, 8, nullptr), lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::argmax(nullptr, out.data(), 1, 8, nullptr), lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::argmax(x.data(), nullptr, 1, 8, nullptr), lio::InvalidArgument);
  EXPECT_NO_THROW(lio::cuda::argmax(nullptr, nullptr, 0, 8, nullptr));  // no rows: nothing runs
}

// The penalty kernel against the CPU formula, bit for bit, on the distinct window of a random
// history (positive, negative and zero logits), for a penalty above and below 1.
TEST(CudaRepeatPenalty, MatchesCpuBitForBit) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t vocab = 5000;
  std::vector<float> logits = random_floats(static_cast<size_t>(vocab), -6.0f, 6.0f, 91);
  logits[10] = 0.0f;
  std::mt19937 rng(92);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab) - 1);
  std::vector<int32_t> history(300);
  for (int32_t& t : history) t = id(rng);
  history.push_back(10);
  for (const float penalty : {1.3f, 0.7f}) {
    const std::vector<int32_t> tokens = lio::repeat_penalty_tokens(history, 200, vocab);
    std::vector<float> want = logits;
    for (const int32_t t : tokens)
      want[size_t(t)] = lio::repeat_penalty_logit(want[size_t(t)], penalty);
    auto d_logits = DeviceBuffer<float>::from_host(logits);
    auto d_tokens = DeviceBuffer<int32_t>::from_host(tokens);
    lio::cuda::repeat_penalty(d_logits.data(), d_tokens.data(), static_cast<int64_t>(tokens.size()),
                              penalty, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> got = d_logits.to_host();
    ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
        << "penalty " << penalty;
  }
}

TEST(CudaRepeatPenalty, RejectsBadArguments) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  DeviceBuffer<float> logits(8);
  DeviceBuffer<int32_t> tokens(2);
  EXPECT_THROW(lio::cuda::repeat_penalty(logits.data(), tokens.data(), -1, 1.3f, nullptr),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::repeat_penalty(logits.data(), tokens.data(), 2, 0.0f, nullptr),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::repeat_penalty(logits.data(), tokens.data(), 2, kInf, nullptr),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::repeat_penalty(logits.data(), nullptr, 2, 1.3f, nullptr),
               lio::InvalidArgument);
  EXPECT_NO_THROW(lio::cuda::repeat_penalty(nullptr, nullptr, 0, 1.3f, nullptr));
}

}  // namespace
