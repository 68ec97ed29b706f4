// Chapter 07, Task 6: the FlashAttention-2 forward kernel on a GPU (exercises/07_flash_attention/
// flash_attention_kernel.cu, flash_forward_kernel), run through its given launcher
// (lio::cuda::launch_flash_forward) against the CPU oracle, cpu::attention_reference, on fresh
// random inputs (fixed seeds, never zeros): SmolLM2's shape (9 query heads, 3 KV heads, head_dim
// 64) as a prefill, as a chunk after a cached prefix, as decode rows and a short chunk; head_dim
// 32 (one KV head), 80 and 128; query tiles and key tiles with ragged edges (130 rows = 4 x 32
// + 2; 430 keys = 13 x 32 + 14); K and V rows past the last query's position set to NaN (they
// must not be read); and scores of hundreds, far past expf's range.
// Every output is NaN before the launch, so a row the kernel leaves unwritten cannot pass.
// Without a GPU every case skips (ctest reports the test skipped): the launcher's host-side
// checks are tested apart, with or without a GPU (tests/unit/test_cuda_flash_forward_launch.cpp).
//
// Tolerance: |got - want| <= tol x max(1, |want|), NaN failing. The outputs are convex
// combinations of V rows with |v| < 1, so O(1). The kernel and the oracle both compute in f32,
// in different orders: dot products of <= 128 terms, exponentials, sums over <= 430 keys. Each
// differs from the exact value by ~1e-6 relative or less (the reference kernel, run under a CPU
// emulation of its threads against double precision: at most 1.5e-7), so tol = 1e-4 leaves a
// margin of ~100 while any wrong mask, scale or rescale moves outputs by far more than 1e-2.
// Where the scores reach hundreds, a score's own f32 rounding is ~|s| x 2^-24 x sqrt(head_dim),
// about 1e-4 absolute at |s| = 200 (and every weight moves by that relative amount): there
// tol = 1e-3.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "attention_reference.h"
#include "cuda_check.h"
#include "device_buffer.h"
#include "flash_forward.h"

namespace {

using lio::cuda::DeviceBuffer;

/// Whether a CUDA device answers (lio::cuda::cuda_available() would also probe for a kernel image,
/// but lives in lio_kernels_cuda, which grading this task does not build).
bool gpu_present() {
  int n_devices = 0;
  if (cudaGetDeviceCount(&n_devices) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: clear the runtime's error slot
    return false;
  }
  return n_devices > 0;
}

constexpr const char* kNoGpu =
    "no usable CUDA device: Task 6 runs on a GPU (it compiles here; scripts/gpu_check.sh grades it "
    "on a lent card)";

struct Shape {
  int64_t n_q, start_pos, n_heads, n_kv_heads, head_dim;
  int64_t n_ctx_extra = 0;   // K/V rows past the last query's position, NaN
  float q_magnitude = 1.0f;  // q uniform in [-q_magnitude, q_magnitude); k, v in [-1, 1)
};

std::string describe(const Shape& s) {
  return "n_q " + std::to_string(s.n_q) + ", start_pos " + std::to_string(s.start_pos) +
         ", heads " + std::to_string(s.n_heads) + "/" + std::to_string(s.n_kv_heads) +
         ", head_dim " + std::to_string(s.head_dim);
}

std::vector<float> uniform(size_t n, float magnitude, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-magnitude, magnitude);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/// Runs the Task 6 kernel on `s` and checks every output against cpu::attention_reference.
void expect_matches_reference(const Shape& s, uint32_t seed, double tol) {
  const int64_t n_ctx = s.start_pos + s.n_q + s.n_ctx_extra;
  const int64_t kv_elems = n_ctx * s.n_kv_heads * s.head_dim;
  // K/V floats of the positions some query sees; those past them become NaN.
  const int64_t seen_elems = (s.start_pos + s.n_q) * s.n_kv_heads * s.head_dim;
  const std::vector<float> q =
      uniform(static_cast<size_t>(s.n_q * s.n_heads * s.head_dim), s.q_magnitude, seed);
  std::vector<float> k = uniform(static_cast<size_t>(kv_elems), 1.0f, seed + 1);
  std::vector<float> v = uniform(static_cast<size_t>(kv_elems), 1.0f, seed + 2);
  std::fill(k.begin() + seen_elems, k.end(), NAN);
  std::fill(v.begin() + seen_elems, v.end(), NAN);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));

  std::vector<float> want(q.size());
  lio::cpu::attention_reference(q.data(), k.data(), v.data(), want.data(), s.n_q, s.start_pos,
                                s.n_heads, s.n_kv_heads, s.head_dim, scale);

  const auto d_q = DeviceBuffer<float>::from_host(q);
  const auto d_k = DeviceBuffer<float>::from_host(k);
  const auto d_v = DeviceBuffer<float>::from_host(v);
  DeviceBuffer<float> d_out(static_cast<int64_t>(q.size()));
  CUDA_CHECK(cudaMemset(d_out.data(), 0xFF, d_out.size_bytes()));  // NaN everywhere
  lio::cuda::launch_flash_forward(d_q.data(), d_k.data(), d_v.data(), d_out.data(), s.n_q,
                                  s.start_pos, n_ctx, s.n_heads, s.n_kv_heads, s.head_dim, scale,
                                  nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = d_out.to_host();

  for (int64_t i = 0; i < s.n_q; ++i) {
    for (int64_t h = 0; h < s.n_heads; ++h) {
      for (int64_t d = 0; d < s.head_dim; ++d) {
        const size_t at = static_cast<size_t>((i * s.n_heads + h) * s.head_dim + d);
        const double bound = tol * std::max(1.0, std::fabs(double(want[at])));
        ASSERT_TRUE(std::fabs(double(got[at]) - want[at]) <= bound)
            << describe(s) << ": query row " << i << " (position " << s.start_pos + i << "), head "
            << h << ", dim " << d << ": got " << got[at] << ", cpu::attention_reference "
            << want[at] << " (tolerance " << bound << ")";
      }
    }
  }
}

constexpr double kTol = 1e-4;

}  // namespace

TEST(Ch07Task6, SmolLM2PrefillFromPositionZero) {
  if (!gpu_present()) GTEST_SKIP() << kNoGpu;
  expect_matches_reference(
      {.n_q = 130, .start_pos = 0, .n_heads = 9, .n_kv_heads = 3, .head_dim = 64}, 61, kTol);
}

TEST(Ch07Task6, SmolLM2ChunkAfterACachedPrefix) {
  if (!gpu_present()) GTEST_SKIP() << kNoGpu;
  // 430 keys: the last key tile holds 14 of 32; the last query tile 2 rows of 32.
  expect_matches_reference(
      {.n_q = 130, .start_pos = 300, .n_heads = 9, .n_kv_heads = 3, .head_dim = 64}, 62, kTol);
}

TEST(Ch07Task6, DecodeRowsOneQueryATile) {
  if (!gpu_present()) GTEST_SKIP() << kNoGpu;
  // The first token of a sequence (one key) and a decode step at position 300.
  expect_matches_reference(
      {.n_q = 1, .start_pos = 0, .n_heads = 9, .n_kv_heads = 3, .head_dim = 64}, 63, kTol);
  expect_matches_reference(
      {.n_q = 1, .start_pos = 300, .n_heads = 9, .n_kv_heads = 3, .head_dim = 64}, 64, kTol);
}

TEST(Ch07Task6, ShortChunkOfSevenRows) {
  if (!gpu_present()) GTEST_SKIP() << kNoGpu;
  expect_matches_reference(
      {.n_q = 7, .start_pos = 300, .n_heads = 9, .n_kv_heads = 3, .head_dim = 64}, 65, kTol);
}

TEST(Ch07Task6, HeadDim32WithOneKvHead) {
  if (!gpu_present()) GTEST_SKIP() << kNoGpu;
  expect_matches_reference(
      {.n_q = 130, .start_pos = 300, .n_heads = 4, .n_kv_heads = 1, .head_dim = 32}, 66, kTol);
}

TEST(Ch07Task6, HeadDim128) {
  if (!gpu_present()) GTEST_SKIP() << kNoGpu;
  expect_matches_reference(
      {.n_q = 130, .start_pos = 300, .n_heads = 8, .n_kv_heads = 2, .head_dim = 128}, 67, kTol);
}

TEST(Ch07Task6, HeadDim80AndRaggedTiles) {
  if (!gpu_present()) GTEST_SKIP() << kNoGpu;
  // 45 rows (32 + 13) from position 17: keys end at 62, inside the second key tile.
  expect_matches_reference(
      {.n_q = 45, .start_pos = 17, .n_heads = 2, .n_kv_heads = 1, .head_dim = 80}, 68, kTol);
}

TEST(Ch07Task6, KeysPastTheLastQueryAreNeverRead) {
  if (!gpu_present()) GTEST_SKIP() << kNoGpu;
  // 45 NaN rows after position 63 (33 queries from 31 end exactly on a key tile's edge): a kernel
  // that loads them, even to mask them, multiplies 0 by NaN.
  expect_matches_reference({.n_q = 33,
                            .start_pos = 31,
                            .n_heads = 9,
                            .n_kv_heads = 3,
                            .head_dim = 64,
                            .n_ctx_extra = 45},
                           69, kTol);
  expect_matches_reference(
      {.n_q = 1, .start_pos = 300, .n_heads = 9, .n_kv_heads = 3, .head_dim = 64, .n_ctx_extra = 7},
      70, kTol);
}

TEST(Ch07Task6, ScoresFarPastExpRangeStayFinite) {
  if (!gpu_present()) GTEST_SKIP() << kNoGpu;
  // q in [-200, 200): scaled scores of a row spread over hundreds; e^s overflows f32 past 88.
  expect_matches_reference({.n_q = 40,
                            .start_pos = 20,
                            .n_heads = 3,
                            .n_kv_heads = 3,
                            .head_dim = 64,
                            .q_magnitude = 200.0f},
                           71, 1e-3);
}
