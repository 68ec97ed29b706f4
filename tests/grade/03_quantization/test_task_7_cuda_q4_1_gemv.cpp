// Chapter 03, Task 7: the Q4_1 GEMV kernel on a GPU (exercises/03_quantization/q4_1_gemv_kernel.cu,
// q4_1_gemv_kernel), run through its given launcher (lio::cuda::launch_q4_1_gemv) against the CPU
// oracle: every row dequantized by lio::dequantize_row (the engine's Q4_1 reader) and multiplied
// by x in double. Fresh random inputs (fixed seeds, never zeros): SmolLM2-135M's matrices (576 x
// 576 for W_q and W_o, 1,536 x 576 for W_gate and W_up, 576 x 1,536 for W_down with the residual
// added, the 49,152 x 576 LM head at Q4_1), rows not a multiple of a block's 8 and row lengths
// not a multiple of a warp step's 8 Q4_1 blocks, rows of a single block, extreme f16 scales and
// minimums (65,504, subnormal, zero, negative), and batches of 2 to 8 rows of x (8 x 1,536: the
// whole 48 KiB of shared memory).
// The matrices are RTN-quantized random rows (lio::quantize_row, the rounding `lio quantize`
// uses) with a different range per row, except the extreme case, whose d and m are chosen bits.
// Every y is NaN before the launch when accumulate is off (the old y must not be read), random
// when it is on; floats past y must keep a sentinel, and a poison block row of NaN scales after W
// and NaN floats after x catch a kernel that reads past either into its arithmetic.
// Without a GPU every case skips (ctest reports the test skipped): the launcher's host-side
// checks are tested apart, with or without a GPU (tests/unit/test_cuda_q4_1_gemv_launch.cpp).
//
// Tolerance: |got - want| <= 1e-5 x S, S = sum over c of (|d q_c| + |m|) |x[c]| (+ |old y| when
// accumulating), NaN failing. S bounds the magnitude of every term a kernel may add, whether it
// dequantizes each weight (d q + m) or factors the block's sum (d sum q x + m sum x), so
// cancellation between d q and m (the extreme case) cannot make the bound meaninglessly small.
// f32 summation of n terms is within n x 2^-24 x S in the worst case (Higham, "Accuracy and
// Stability of Numerical Algorithms", sec. 4.2), but its rounding errors add like a random walk,
// ~sqrt(n) x 2^-24 x S = 2.3e-6 x S at our longest rows (1,536 columns). Measured on these cases
// under a CPU emulation of the threads: the reference (a warp's partials, then a tree) stays
// within 1e-7 x S, and a plain kernel whose lane 0 sums a whole row in sequence within 1e-6 x S
// (not 1e-7): 1e-5 leaves that kernel a margin of 10. A kernel that misreads a nibble, a block, a
// scale, a minimum or an x row does so in every block of a row, moving its result by a good part
// of S; even one whole term is ~1 / n_cols of S (6.5e-4 x S at 1,536 columns), 65 tolerances.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "device_buffer.h"
#include "lio/dtype.h"
#include "q4_1_gemv.h"

namespace {

using lio::BlockQ4_1;
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
    "no usable CUDA device: Task 7 runs on a GPU (it compiles here; scripts/gpu_check.sh grades it "
    "on a lent card)";

constexpr double kTol = 1e-5;
constexpr int64_t kGuardFloats = 64;   // sentinel floats after y
constexpr float kSentinel = 12345.0f;  // what they must still hold after the launch
constexpr uint16_t kF16NaN = 0x7E00;   // the poison row's d and m

struct Case {
  int64_t n_rows, n_cols, n_batch = 1;
  bool accumulate = false;
  bool extreme = false;  // d and m drawn from extreme f16 bit patterns instead of RTN
};

std::string describe(const Case& c) {
  return std::to_string(c.n_rows) + " x " + std::to_string(c.n_cols) + ", batch " +
         std::to_string(c.n_batch) + (c.accumulate ? ", accumulate" : "") +
         (c.extreme ? ", extreme scales" : "");
}

/// W as Q4_1 blocks: row r RTN-quantized from uniform floats in [lo_r, hi_r) (a different range
/// per row, sometimes all positive or all negative), or, when `extreme`, random codes under d and
/// m drawn from extreme f16 bit patterns.
std::vector<BlockQ4_1> make_weights(const Case& c, std::mt19937& rng) {
  const int64_t n_blocks = c.n_cols / 32;
  std::vector<BlockQ4_1> w(static_cast<size_t>(c.n_rows * n_blocks));
  if (c.extreme) {
    // 65,504 (f16's largest), -65,504, 2^-24 (the smallest subnormal), -2^-24, 0, -0, 2^-14 (the
    // smallest normal), 1, -3.5, 1000.
    static constexpr uint16_t kBits[] = {0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x0000,
                                         0x8000, 0x0400, 0x3C00, 0xC300, 0x63D0};
    std::uniform_int_distribution<int> pick(0, static_cast<int>(std::size(kBits)) - 1);
    std::uniform_int_distribution<int> byte(0, 255);
    for (BlockQ4_1& b : w) {
      b.d = kBits[pick(rng)];
      b.m = kBits[pick(rng)];
      for (uint8_t& q : b.qs) q = static_cast<uint8_t>(byte(rng));
    }
    return w;
  }
  std::uniform_real_distribution<float> centre(-2.0f, 2.0f), half_width(0.01f, 3.0f);
  std::vector<float> row(static_cast<size_t>(c.n_cols));
  for (int64_t r = 0; r < c.n_rows; ++r) {
    const float mid = centre(rng), half = half_width(rng);
    std::uniform_real_distribution<float> value(mid - half, mid + half);
    for (float& v : row) v = value(rng);
    lio::quantize_row(lio::DType::Q4_1, row.data(), w.data() + r * n_blocks, c.n_cols);
  }
  return w;
}

/// Runs the Task 7 kernel on a fresh random case and checks every output against the oracle.
void expect_matches_reference(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t n_blocks = c.n_cols / 32;
  std::vector<BlockQ4_1> w = make_weights(c, rng);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(c.n_batch * c.n_cols));
  for (float& v : x) v = unit(rng);
  std::vector<float> y0(static_cast<size_t>(c.n_batch * c.n_rows), NAN);
  if (c.accumulate) {
    for (float& v : y0) v = 4.0f * unit(rng);
  }

  // The oracle: each row as dequantize_row gives it, the product in double; S as above.
  std::vector<double> want(y0.size()), bound(y0.size());
  std::vector<float> w_row(static_cast<size_t>(c.n_cols));
  std::vector<double> mag_row(static_cast<size_t>(c.n_cols));  // |d q| + |m| per column
  for (int64_t r = 0; r < c.n_rows; ++r) {
    lio::dequantize_row(lio::DType::Q4_1, w.data() + r * n_blocks, w_row.data(), c.n_cols);
    for (int64_t k = 0; k < n_blocks; ++k) {
      const BlockQ4_1& b = w[static_cast<size_t>(r * n_blocks + k)];
      const double d = lio::f16_to_f32(b.d), m = lio::f16_to_f32(b.m);
      for (int i = 0; i < 32; ++i) {
        const int q = i < 16 ? (b.qs[i] & 0x0F) : (b.qs[i - 16] >> 4);
        mag_row[static_cast<size_t>(32 * k + i)] = std::fabs(d * q) + std::fabs(m);
      }
    }
    for (int64_t bt = 0; bt < c.n_batch; ++bt) {
      double sum = 0.0, s = 0.0;
      for (int64_t col = 0; col < c.n_cols; ++col) {
        const double xv = x[static_cast<size_t>(bt * c.n_cols + col)];
        sum += static_cast<double>(w_row[static_cast<size_t>(col)]) * xv;
        s += mag_row[static_cast<size_t>(col)] * std::fabs(xv);
      }
      const size_t at = static_cast<size_t>(bt * c.n_rows + r);
      if (c.accumulate) {
        sum += y0[at];
        s += std::fabs(y0[at]);
      }
      want[at] = sum;
      bound[at] = kTol * s;
    }
  }

  // Device buffers with poison past W (a row of NaN scales) and x (NaN), and a sentinel past y.
  std::vector<BlockQ4_1> w_padded = w;
  BlockQ4_1 poison{};
  poison.d = poison.m = kF16NaN;
  w_padded.insert(w_padded.end(), static_cast<size_t>(n_blocks), poison);
  std::vector<float> x_padded = x;
  x_padded.insert(x_padded.end(), 64, NAN);
  std::vector<float> y_padded = y0;
  y_padded.insert(y_padded.end(), kGuardFloats, kSentinel);
  const auto d_w = DeviceBuffer<BlockQ4_1>::from_host(w_padded);
  const auto d_x = DeviceBuffer<float>::from_host(x_padded);
  auto d_y = DeviceBuffer<float>::from_host(y_padded);
  lio::cuda::launch_q4_1_gemv(d_w.data(), d_x.data(), d_y.data(), c.n_rows, c.n_cols, c.n_batch,
                              c.accumulate, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = d_y.to_host();

  for (int64_t bt = 0; bt < c.n_batch; ++bt) {
    for (int64_t r = 0; r < c.n_rows; ++r) {
      const size_t at = static_cast<size_t>(bt * c.n_rows + r);
      ASSERT_TRUE(std::fabs(double(got[at]) - want[at]) <= bound[at])
          << describe(c) << ": x row " << bt << ", output row " << r << " (block " << r / 8
          << ", warp " << r % 8 << "): got " << got[at] << ", want " << want[at] << " (tolerance "
          << bound[at] << (c.accumulate ? ", old y " : "")
          << (c.accumulate ? std::to_string(y0[at]) : std::string()) << ")";
    }
  }
  for (int64_t i = 0; i < kGuardFloats; ++i) {
    ASSERT_EQ(got[y0.size() + static_cast<size_t>(i)], kSentinel)
        << describe(c) << ": the kernel wrote " << i << " floats past the end of y";
  }
}

}  // namespace

TEST(Ch03Task7, SmolLM2AttentionProjection576x576) {
  if (!gpu_present()) GTEST_SKIP() << kNoGpu;
  // W_q and W_o: 576 rows of 18 blocks (2 full warp steps of 8 blocks, then 2), 72 blocks.
  expect_matches_reference({.n_rows = 576, .n_cols = 576}, 71);
}

TEST(Ch03Task7, SmolLM2GateAndUp1536x576) {
  if (!gpu_present()) GTEST_SKIP() << kNoGpu;
  expect_matches_reference({.n_rows = 1536, .n_cols = 576}, 72);
}

TEST(Ch03Task7, SmolLM2DownAddsTheResidual576x1536) {
  if (!gpu_present()) GTEST_SKIP() << kNoGpu;
  // W_down: rows of 48 blocks (6 full warp steps); y += W x is the layer's residual add.
  expect_matches_reference({.n_rows = 576, .n_cols = 1536, .accumulate = true}, 73);
  expect_matches_reference({.n_rows = 576, .n_cols = 1536}, 74);
}

TEST(Ch03Task7, SmolLM2LmHead49152x576) {
  if (!gpu_present()) GTEST_SKIP() << kNoGpu;
  // The tied embedding as the output head at Q4_1 (the shipped file keeps it at Q8_0):
  // 6,144 blocks, 17,694,720 bytes of weights.
  expect_matches_reference({.n_rows = 49152, .n_cols = 576}, 75);
}

TEST(Ch03Task7, RaggedRowsAndRowLengths) {
  if (!gpu_present()) GTEST_SKIP() << kNoGpu;
  // 13 rows: a second block with 5 of its 8 warps serving. 3 blocks a row: 5 lanes of 8 groups
  // idle. 9 blocks a row: one past a warp step. 17: two steps and one block.
  expect_matches_reference({.n_rows = 13, .n_cols = 96}, 76);
  expect_matches_reference({.n_rows = 1001, .n_cols = 288}, 77);
  expect_matches_reference({.n_rows = 9, .n_cols = 544, .accumulate = true}, 78);
  expect_matches_reference({.n_rows = 192, .n_cols = 576}, 79);  // W_k and W_v
}

TEST(Ch03Task7, SingleBlockRows) {
  if (!gpu_present()) GTEST_SKIP() << kNoGpu;
  // One Q4_1 block a row: 4 lanes of each warp read the row, 28 add nothing.
  expect_matches_reference({.n_rows = 1, .n_cols = 32}, 80);
  expect_matches_reference({.n_rows = 70, .n_cols = 32, .n_batch = 3}, 81);
}

TEST(Ch03Task7, ExtremeScalesAndMinimums) {
  if (!gpu_present()) GTEST_SKIP() << kNoGpu;
  // d and m each one of 65,504, -65,504, 2^-24, -2^-24, 0, -0, 2^-14, 1, -3.5 and 1,000: weights
  // up to ~1e6, subnormal scales, blocks where d q and m cancel.
  expect_matches_reference({.n_rows = 576, .n_cols = 576, .extreme = true}, 82);
  expect_matches_reference(
      {.n_rows = 100, .n_cols = 1536, .n_batch = 2, .accumulate = true, .extreme = true}, 83);
}

TEST(Ch03Task7, BatchesOfTwoToEight) {
  if (!gpu_present()) GTEST_SKIP() << kNoGpu;
  // Each decoded weight serves every row of x; 8 x 1,536 floats fill the 48 KiB exactly.
  expect_matches_reference({.n_rows = 576, .n_cols = 576, .n_batch = 2}, 84);
  expect_matches_reference({.n_rows = 1536, .n_cols = 576, .n_batch = 5, .accumulate = true}, 85);
  expect_matches_reference({.n_rows = 576, .n_cols = 1536, .n_batch = 8}, 86);
  expect_matches_reference({.n_rows = 33, .n_cols = 224, .n_batch = 7}, 87);
}
