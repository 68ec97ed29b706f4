// test_cuda_quant_host.cu — the CUDA kernels' weight readers (kernels/cuda/quant.cuh:
// load_element, dot8) run on the HOST against lio::dequantize_row, for every dtype. They are
// __host__ __device__, so this test checks the block layouts, nibble order and index math of
// the GEMV / embedding / dequantize kernels on every machine, GPU or not. Chapter 03's integer
// path (Codes8::dot_int8, gemv_int8's inner step) is checked the same way: its int32 sums run
// here as a plain loop instead of __dp4a.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gemv_int8.h"
#include "lio/dtype.h"
#include "quant.cuh"
#include "random_inputs.h"

namespace {

using lio::DType;
using lio::testing::random_floats;

constexpr DType kAllDtypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                                DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q6_K, DType::Q3_0, DType::Q3_1};

struct Row {
  std::vector<std::byte> bytes;  // one row in `dtype`
  std::vector<float> dequant;    // lio::dequantize_row of those bytes
};

// One row of random values in `dtype` (Q5_*, K-quants: random block bytes, as LIO has no
// encoder for them).
Row make_row(DType dtype, int64_t cols, uint32_t seed) {
  const auto values = random_floats(size_t(cols), -2.0f, 2.0f, seed);
  Row r;
  r.bytes.resize(size_t(lio::dtype_row_bytes(dtype, cols)));
  r.dequant.resize(size_t(cols));
  if (dtype == DType::Q5_0 || dtype == DType::Q5_1 || dtype == DType::Q4_K || dtype == DType::Q6_K) {
    r.bytes = lio::testing::random_read_only_blocks(dtype, 1, cols, seed);
  } else {
    lio::quantize_row(dtype, values.data(), r.bytes.data(), cols);
  }
  lio::dequantize_row(dtype, r.bytes.data(), r.dequant.data(), cols);
  return r;
}

// Every element, exactly (the readers evaluate dequantize_row's formula; it is exact in f32).
TEST(CudaQuantHost, LoadElementEqualsDequantizeRowEveryDtype) {
  const int64_t cols = 512;
  for (DType t : kAllDtypes) {
    const Row r = make_row(t, cols, 11 + static_cast<uint32_t>(t));
    lio::cuda::detail::dispatch_dtype(t, [&]<DType kType>() {
      for (int c = 0; c < cols; ++c) {
        ASSERT_EQ(lio::cuda::detail::load_element<kType>(r.bytes.data(), c), r.dequant[size_t(c)])
            << lio::dtype_info(t).name << " col " << c;
      }
    });
  }
}

// Every 8-column group of a row: dot8 against a double-precision sum over the dequantized row,
// within 1e-6 of sum |w x| (8 products, a handful of f32 roundings).
TEST(CudaQuantHost, Dot8EqualsDequantizedDotEveryDtype) {
  const int64_t cols = 512;  // whole K-quant super-blocks
  for (DType t : kAllDtypes) {
    const Row r = make_row(t, cols, 41 + static_cast<uint32_t>(t));
    const auto x = random_floats(size_t(cols), -3.0f, 3.0f, 97);
    lio::cuda::detail::dispatch_dtype(t, [&]<DType kType>() {
      for (int e0 = 0; e0 < cols; e0 += lio::cuda::detail::kDot8Elems) {
        float x8[lio::cuda::detail::kDot8Elems];
        double want = 0, scale = 0;
        for (int j = 0; j < lio::cuda::detail::kDot8Elems; ++j) {
          x8[j] = x[size_t(e0 + j)];
          want += double(r.dequant[size_t(e0 + j)]) * x8[j];
          scale += std::fabs(double(r.dequant[size_t(e0 + j)]) * x8[j]);
        }
        const float got = lio::cuda::detail::dot8<kType>(r.bytes.data(), e0, x8);
        ASSERT_NEAR(got, want, 1e-6 * scale + 1e-7) << lio::dtype_info(t).name << " e0 " << e0;
      }
    });
  }
}

// Issue 45's wide Q4_1 reader: the four words of every block, each read with one 32-bit load,
// dotted with their activations (low nibbles: elements 4w..4w+3, high nibbles: 16+4w..), sum to
// the block's dequantized dot. A wrong nibble order or word offset fails here, on any machine.
TEST(CudaQuantHost, Q4_1WordDotsSumToTheBlocksDot) {
  const int64_t cols = 576;  // SmolLM2's d_model: 18 blocks
  const Row r = make_row(DType::Q4_1, cols, 1234);
  const auto x = random_floats(size_t(cols), -3.0f, 3.0f, 4321);
  for (int64_t b = 0; b < cols / 32; ++b) {
    double want = 0, scale = 0;
    for (int64_t j = 0; j < 32; ++j) {
      want += double(r.dequant[size_t(32 * b + j)]) * x[size_t(32 * b + j)];
      scale += std::fabs(double(r.dequant[size_t(32 * b + j)]) * x[size_t(32 * b + j)]);
    }
    double got = 0;
    for (int w = 0; w < 4; ++w) {
      float lo[4], hi[4];
      for (int j = 0; j < 4; ++j) {
        lo[j] = x[size_t(32 * b + 4 * w + j)];
        hi[j] = x[size_t(32 * b + 16 + 4 * w + j)];
      }
      got += lio::cuda::detail::q4_1_word_dot(r.bytes.data() + 20 * b, w, lo, hi);
    }
    ASSERT_NEAR(got, want, 2e-6 * scale + 1e-7) << "block " << b;
  }
}

// The wide Q4_1 reader's x loads (q4_1_wide_x_offset): lane l of a warp step reads block l / 4
// (+ 8 per step), word l % 4; its two float4 loads are its x_lo and x_hi, each once. A float4
// load is served 8 lanes (128 bytes) at a time: each phase of each load must touch 32 distinct
// banks (4-byte words modulo 32), or the load replays (issue 60, defect 8: x_lo first on every
// lane put blocks b and b + 1 of a phase in the same 16 banks, a 2-way conflict).
TEST(CudaQuantHost, Q4_1WideXLoadsAreConflictFreeAndCoverEachBlockOnce) {
  using lio::cuda::detail::q4_1_wide_x_offset;
  for (int step = 0; step < 3; ++step) {
    std::vector<int> covered(256 * 3, 0);
    for (int load = 0; load < 2; ++load) {
      for (int phase = 0; phase < 4; ++phase) {
        std::vector<int> banks(32, 0);
        for (int lane = 8 * phase; lane < 8 * phase + 8; ++lane) {
          const int b = (lane >> 2) + 8 * step;
          const int at = q4_1_wide_x_offset(b, lane, load);
          ASSERT_EQ(at % 4, 0) << "float4 loads must be 16-byte aligned";
          for (int j = 0; j < 4; ++j) {
            ++banks[size_t((at + j) % 32)];
            ++covered[size_t(at + j)];
          }
        }
        for (int k = 0; k < 32; ++k) EXPECT_EQ(banks[size_t(k)], 1) << "step " << step << " load " << load << " phase " << phase << " bank " << k;
      }
    }
    // Both loads together read every x of the step's 8 blocks exactly once, x_lo and x_hi where
    // q4_1_word_dot expects them.
    for (int e = 256 * step; e < 256 * (step + 1); ++e) EXPECT_EQ(covered[size_t(e)], 1) << "x[" << e << "]";
    for (int lane = 0; lane < 32; ++lane) {
      const int b = (lane >> 2) + 8 * step, w = lane & 3;
      const int a = q4_1_wide_x_offset(b, lane, 0), c = q4_1_wide_x_offset(b, lane, 1);
      EXPECT_EQ(std::min(a, c), 32 * b + 4 * w);
      EXPECT_EQ(std::max(a, c), 32 * b + 16 + 4 * w);
    }
  }
}

// Every 8-column group of every block-quantized dtype: Codes8 (the codes gemv_int8 packs for
// __dp4a) dotted with 8 int8 activation codes equals sum_j w_j * (dx * qx_j) over the
// dequantized weights, within 1e-6 of the sum of |terms|. The codes must fit int8 and the
// minimum / offset must land where dequantize_row puts it, or this fails.
TEST(CudaQuantHost, Codes8Int8DotEqualsDequantizedDot) {
  const int64_t cols = 512;
  std::mt19937 rng(123);
  std::uniform_int_distribution<int> code(-127, 127);
  for (DType t : kAllDtypes) {
    if (!lio::cuda::has_int8_kernel(t)) continue;
    const Row r = make_row(t, cols, 71 + static_cast<uint32_t>(t));
    lio::cuda::detail::dispatch_dtype(t, [&]<DType kType>() {
      if constexpr (lio::cuda::has_int8_kernel(kType)) {
        for (int e0 = 0; e0 < cols; e0 += lio::cuda::detail::kDot8Elems) {
          int qx[8];
          for (int& q : qx) q = code(rng);
          const float dx = 0.013f;
          double want = 0, scale = 0;
          for (int j = 0; j < 8; ++j) {
            const double term = double(r.dequant[size_t(e0 + j)]) * (double(dx) * qx[j]);
            want += term;
            scale += std::fabs(term);
          }
          const lio::cuda::detail::Codes8 c =
              lio::cuda::detail::codes8<kType>(lio::cuda::detail::load_weights8<kType>(r.bytes.data(), e0));
          const float got = c.dot_int8(lio::cuda::detail::pack_int8x4(qx[0], qx[1], qx[2], qx[3]),
                                       lio::cuda::detail::pack_int8x4(qx[4], qx[5], qx[6], qx[7]), dx);
          ASSERT_NEAR(got, want, 1e-6 * scale + 1e-7) << lio::dtype_info(t).name << " e0 " << e0;
        }
      }
    });
  }
}

// pack_int8x4 puts value j in byte j (little-endian), as __dp4a reads its operands.
TEST(CudaQuantHost, PackInt8x4ByteOrder) {
  EXPECT_EQ(static_cast<uint32_t>(lio::cuda::detail::pack_int8x4(1, -1, 127, -128)), 0x807FFF01u);
}

}  // namespace
