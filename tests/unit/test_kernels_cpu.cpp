// test_kernels_cpu.cpp — the CPU operators of kernels/cpu/cpu_ops.h against direct
// double-precision references and against their defining properties.
//
// Inputs are random with fixed seeds (std::mt19937), never all zeros. Tolerances are stated
// per test and derived from the float operations each op performs (FLT_EPSILON ~ 1.19e-7).
// matmul and attention are tested elsewhere.
#include <algorithm>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cpu_ops.h"
#include "lio/dtype.h"
#include "lio/error.h"
#include "random_inputs.h"
#include "lio/rope_style.h"
#include "lio/tensor.h"

namespace {

using lio::RopeStyle;

using lio::testing::random_floats;

// ---- references (double precision, straight from the formulas) --------------------------

std::vector<double> rmsnorm_reference(const std::vector<float>& x, const std::vector<float>& w,
                                      int64_t n_rows, int64_t dim, double eps) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < n_rows; ++r) {
    double sum_sq = 0.0;
    for (int64_t j = 0; j < dim; ++j) sum_sq += double(x[r * dim + j]) * x[r * dim + j];
    const double inv_rms = 1.0 / std::sqrt(sum_sq / double(dim) + eps);
    for (int64_t j = 0; j < dim; ++j) out[r * dim + j] = x[r * dim + j] * inv_rms * w[j];
  }
  return out;
}

// RoFormer eq. 34 with theta_k = base^(-2k/d), written per style from the definition.
std::vector<double> rope_reference(const std::vector<float>& x, const std::vector<int32_t>& pos,
                                   int64_t n_heads, int64_t head_dim, double base,
                                   RopeStyle style) {
  std::vector<double> out(x.begin(), x.end());
  const int64_t half = head_dim / 2;
  for (size_t t = 0; t < pos.size(); ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      const size_t off = (t * n_heads + h) * head_dim;
      for (int64_t k = 0; k < half; ++k) {
        const double angle = pos[t] * std::pow(base, -2.0 * k / double(head_dim));
        const int64_t i0 = style == RopeStyle::Normal ? 2 * k : k;
        const int64_t i1 = style == RopeStyle::Normal ? 2 * k + 1 : k + half;
        const double a = x[off + i0], b = x[off + i1];
        out[off + i0] = a * std::cos(angle) - b * std::sin(angle);
        out[off + i1] = a * std::sin(angle) + b * std::cos(angle);
      }
    }
  }
  return out;
}

// ---- rmsnorm ----------------------------------------------------------------------------

// Tolerance: the op rounds 1/rms to float, then does two float multiplies, so each output is
// within ~1.5 ulp of exact; we allow 4 * FLT_EPSILON relative (plus 1e-30 for exact zeros).
TEST(CpuRmsnorm, MatchesDoubleReference) {
  const int64_t shapes[][2] = {{1, 1}, {1, 7}, {3, 64}, {5, 576}, {2, 4096}, {4, 1001}};
  uint32_t seed = 1;
  for (const auto& s : shapes) {
    const int64_t n_rows = s[0], dim = s[1];
    const auto x = random_floats(size_t(n_rows * dim), -3.0f, 3.0f, seed++);
    const auto w = random_floats(size_t(dim), 0.5f, 1.5f, seed++);
    std::vector<float> out(x.size());
    lio::cpu::rmsnorm(x.data(), w.data(), out.data(), n_rows, dim, 1e-5f);
    const auto ref = rmsnorm_reference(x, w, n_rows, dim, 1e-5);
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_NEAR(out[i], ref[i], 4 * FLT_EPSILON * std::fabs(ref[i]) + 1e-30)
          << "n_rows=" << n_rows << " dim=" << dim << " i=" << i;
    }
  }
}

TEST(CpuRmsnorm, InPlaceEqualsOutOfPlace) {
  const int64_t n_rows = 3, dim = 130;
  auto x = random_floats(size_t(n_rows * dim), -2.0f, 2.0f, 11);
  const auto w = random_floats(size_t(dim), -1.0f, 1.0f, 12);
  std::vector<float> out(x.size());
  lio::cpu::rmsnorm(x.data(), w.data(), out.data(), n_rows, dim, 1e-6f);
  lio::cpu::rmsnorm(x.data(), w.data(), x.data(), n_rows, dim, 1e-6f);
  EXPECT_EQ(x, out);  // same float operations in the same order: bitwise equal
}

TEST(CpuRmsnorm, LargeRowsParallelMatchReference) {
  // Enough elements to cross the OpenMP threshold.
  const int64_t n_rows = 64, dim = 1024;
  const auto x = random_floats(size_t(n_rows * dim), -1.0f, 1.0f, 13);
  const auto w = random_floats(size_t(dim), 0.5f, 1.5f, 14);
  std::vector<float> out(x.size());
  lio::cpu::rmsnorm(x.data(), w.data(), out.data(), n_rows, dim, 1e-5f);
  const auto ref = rmsnorm_reference(x, w, n_rows, dim, 1e-5);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(out[i], ref[i], 4 * FLT_EPSILON * std::fabs(ref[i]) + 1e-30) << "i=" << i;
  }
}

TEST(CpuRmsnorm, RejectsBadArguments) {
  std::vector<float> x(8, 1.0f), w(8, 1.0f), out(8);
  EXPECT_THROW(lio::cpu::rmsnorm(x.data(), w.data(), out.data(), 1, 0, 1e-5f),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cpu::rmsnorm(x.data(), w.data(), out.data(), -1, 8, 1e-5f),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cpu::rmsnorm(x.data(), w.data(), out.data(), 1, 8, -1.0f),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cpu::rmsnorm(nullptr, w.data(), out.data(), 1, 8, 1e-5f),
               lio::InvalidArgument);
}

// ---- rope -------------------------------------------------------------------------------

// Tolerance: cos/sin are correctly rounded floats of the double angle and each output is
// a*c - b*s in float, so the error is a few ulp of max(|a|, |b|) <= 1: we allow 1e-6 absolute.
TEST(CpuRope, BothStylesMatchFormula) {
  struct Case {
    int64_t n_heads, head_dim;
    float base;
    std::vector<int32_t> positions;
  };
  const Case cases[] = {
      {1, 2, 10000.0f, {0, 1, 2}},
      {3, 6, 10000.0f, {5, 0, 17}},
      {9, 64, 10000.0f, {0, 1, 2, 3, 100, 2047}},
      {4, 128, 500000.0f, {7, 8191, 131071}},
  };
  uint32_t seed = 100;
  for (const Case& c : cases) {
    for (RopeStyle style : {RopeStyle::Normal, RopeStyle::Neox}) {
      const int64_t n_tokens = int64_t(c.positions.size());
      auto x = random_floats(size_t(n_tokens * c.n_heads * c.head_dim), -1.0f, 1.0f, seed++);
      const auto ref = rope_reference(x, c.positions, c.n_heads, c.head_dim, c.base, style);
      lio::cpu::rope(x.data(), c.positions.data(), n_tokens, c.n_heads, c.head_dim, c.base,
                     style);
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_NEAR(x[i], ref[i], 1e-6)
            << "style=" << (style == RopeStyle::Normal ? "normal" : "neox")
            << " head_dim=" << c.head_dim << " i=" << i;
      }
    }
  }
}

// GGUF stores Q/K permuted so that Normal RoPE on the permuted head equals Neox RoPE on the
// original: permuted[2k] = x[k], permuted[2k+1] = x[k + d/2]. Tolerance 1e-6 absolute; the two
// paths do the same float operations, so in practice the results are bitwise equal.
TEST(CpuRope, NormalOnPermutedEqualsNeox) {
  const int64_t n_heads = 3, head_dim = 64, half = head_dim / 2;
  const std::vector<int32_t> positions = {0, 3, 42, 1000, 77777};
  const int64_t n_tokens = int64_t(positions.size());
  const auto x = random_floats(size_t(n_tokens * n_heads * head_dim), -1.0f, 1.0f, 200);
  std::vector<float> permuted(x.size());
  for (int64_t r = 0; r < n_tokens * n_heads; ++r) {
    for (int64_t k = 0; k < half; ++k) {
      permuted[r * head_dim + 2 * k] = x[r * head_dim + k];
      permuted[r * head_dim + 2 * k + 1] = x[r * head_dim + k + half];
    }
  }
  std::vector<float> neox = x;
  lio::cpu::rope(neox.data(), positions.data(), n_tokens, n_heads, head_dim, 10000.0f,
                 RopeStyle::Neox);
  lio::cpu::rope(permuted.data(), positions.data(), n_tokens, n_heads, head_dim, 10000.0f,
                 RopeStyle::Normal);
  for (int64_t r = 0; r < n_tokens * n_heads; ++r) {
    for (int64_t k = 0; k < half; ++k) {
      ASSERT_NEAR(permuted[r * head_dim + 2 * k], neox[r * head_dim + k], 1e-6);
      ASSERT_NEAR(permuted[r * head_dim + 2 * k + 1], neox[r * head_dim + k + half], 1e-6);
    }
  }
}

// cos 0 = 1 and sin 0 = 0 exactly, so position 0 must leave every value bit-identical.
TEST(CpuRope, PositionZeroIsIdentity) {
  const int64_t n_tokens = 4, n_heads = 5, head_dim = 32;
  const std::vector<int32_t> positions(n_tokens, 0);
  for (RopeStyle style : {RopeStyle::Normal, RopeStyle::Neox}) {
    const auto x = random_floats(size_t(n_tokens * n_heads * head_dim), -4.0f, 4.0f, 300);
    auto y = x;
    lio::cpu::rope(y.data(), positions.data(), n_tokens, n_heads, head_dim, 10000.0f, style);
    EXPECT_EQ(x, y);
  }
}

// A rotation keeps each pair's length. Tolerance: 4 * FLT_EPSILON relative per pair.
TEST(CpuRope, PreservesPairNorms) {
  const int64_t n_heads = 4, head_dim = 64, half = head_dim / 2;
  const std::vector<int32_t> positions = {1, 9, 123, 4095, 65536};
  const int64_t n_tokens = int64_t(positions.size());
  for (RopeStyle style : {RopeStyle::Normal, RopeStyle::Neox}) {
    const auto x = random_floats(size_t(n_tokens * n_heads * head_dim), -2.0f, 2.0f, 400);
    auto y = x;
    lio::cpu::rope(y.data(), positions.data(), n_tokens, n_heads, head_dim, 10000.0f, style);
    for (int64_t r = 0; r < n_tokens * n_heads; ++r) {
      double head_before = 0.0, head_after = 0.0;
      for (int64_t k = 0; k < half; ++k) {
        const int64_t i0 = r * head_dim + (style == RopeStyle::Normal ? 2 * k : k);
        const int64_t i1 = r * head_dim + (style == RopeStyle::Normal ? 2 * k + 1 : k + half);
        const double before = std::hypot(double(x[i0]), double(x[i1]));
        const double after = std::hypot(double(y[i0]), double(y[i1]));
        ASSERT_NEAR(after, before, 4 * FLT_EPSILON * before + 1e-30) << "r=" << r << " k=" << k;
        head_before += before * before;
        head_after += after * after;
      }
      EXPECT_NEAR(head_after, head_before, 8 * FLT_EPSILON * head_before);
    }
  }
}

TEST(CpuRope, LargeBatchParallelMatchesFormula) {
  // Enough tokens to cross the OpenMP threshold; positions deliberately not sequential.
  const int64_t n_heads = 8, head_dim = 64;
  std::vector<int32_t> positions(128);
  for (size_t t = 0; t < positions.size(); ++t) positions[t] = int32_t((t * 37) % 3001);
  const int64_t n_tokens = int64_t(positions.size());
  for (RopeStyle style : {RopeStyle::Normal, RopeStyle::Neox}) {
    auto x = random_floats(size_t(n_tokens * n_heads * head_dim), -1.0f, 1.0f, 500);
    const auto ref = rope_reference(x, positions, n_heads, head_dim, 10000.0, style);
    lio::cpu::rope(x.data(), positions.data(), n_tokens, n_heads, head_dim, 10000.0f, style);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], ref[i], 1e-6) << "i=" << i;
  }
}

TEST(CpuRope, RejectsBadArguments) {
  std::vector<float> x(16, 1.0f);
  const int32_t pos = 1;
  EXPECT_THROW(lio::cpu::rope(x.data(), &pos, 1, 1, 5, 10000.0f, RopeStyle::Normal),
               lio::InvalidArgument);  // odd head_dim
  EXPECT_THROW(lio::cpu::rope(x.data(), &pos, 1, 0, 4, 10000.0f, RopeStyle::Neox),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cpu::rope(x.data(), &pos, 1, 1, 4, 0.0f, RopeStyle::Neox),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cpu::rope(x.data(), nullptr, 1, 1, 4, 10000.0f, RopeStyle::Neox),
               lio::InvalidArgument);
}

// ---- swiglu -----------------------------------------------------------------------------

// Tolerance: expf is within 1 ulp and the op does 3 more float operations: 1e-6 relative,
// plus 1e-30 absolute for silu(g) that underflows to 0 (g below about -88).
TEST(CpuSwiglu, MatchesReference) {
  const int64_t n = 1237;
  auto gate = random_floats(size_t(n), -12.0f, 12.0f, 600);
  const auto up = random_floats(size_t(n), -3.0f, 3.0f, 601);
  gate[0] = 0.0f;
  gate[1] = -100.0f;
  gate[2] = 100.0f;
  gate[3] = 1e-20f;
  std::vector<float> out(static_cast<size_t>(n));
  lio::cpu::swiglu(gate.data(), up.data(), out.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[size_t(i)];
    const double ref = g / (1.0 + std::exp(-g)) * up[size_t(i)];
    ASSERT_NEAR(out[size_t(i)], ref, 1e-6 * std::fabs(ref) + 1e-30) << "i=" << i << " g=" << g;
  }
  // In place over gate gives the same bits.
  lio::cpu::swiglu(gate.data(), up.data(), gate.data(), n);
  EXPECT_EQ(gate, out);
}

TEST(CpuSwiglu, LargeParallelMatchesReference) {
  const int64_t n = 200003;  // crosses the OpenMP threshold, odd length
  const auto gate = random_floats(size_t(n), -8.0f, 8.0f, 602);
  const auto up = random_floats(size_t(n), -2.0f, 2.0f, 603);
  std::vector<float> out(static_cast<size_t>(n));
  lio::cpu::swiglu(gate.data(), up.data(), out.data(), n);
  for (size_t i = 0; i < size_t(n); ++i) {
    const double g = gate[i];
    const double ref = g / (1.0 + std::exp(-g)) * up[i];
    ASSERT_NEAR(out[i], ref, 1e-6 * std::fabs(ref) + 1e-30) << "i=" << i;
  }
}

// ---- embedding_row ----------------------------------------------------------------------

TEST(CpuEmbeddingRow, F32RowsAreCopiedExactly) {
  const int64_t rows = 5, cols = 19;
  const auto table = random_floats(size_t(rows * cols), -1.0f, 1.0f, 700);
  lio::WeightMatrix w;
  w.name = "token_embd.weight";
  w.dtype = lio::DType::F32;
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = cols * int64_t(sizeof(float));
  w.data = reinterpret_cast<const std::byte*>(table.data());
  std::vector<float> out(static_cast<size_t>(cols));
  for (int64_t token = 0; token < rows; ++token) {
    lio::cpu::embedding_row(w, token, out.data());
    for (int64_t j = 0; j < cols; ++j) ASSERT_EQ(out[size_t(j)], table[size_t(token * cols + j)]);
  }
}

// Q8_0 blocks are built by hand (scales that f16 holds exactly), so the expected value
// d * q is exact in float and the comparison is exact.
TEST(CpuEmbeddingRow, Q8_0RowsDequantizeExactly) {
  const int64_t rows = 3, cols = 64;
  const int64_t blocks_per_row = cols / lio::kQuantBlockElems;
  // f16 bits of 0.5, 0.25, 1.5, 2^-10, 3.0, 0.125
  const uint16_t scale_bits[] = {0x3800, 0x3400, 0x3E00, 0x1400, 0x4200, 0x3000};
  const float scales[] = {0.5f, 0.25f, 1.5f, 0.0009765625f, 3.0f, 0.125f};
  std::mt19937 rng(800);
  std::uniform_int_distribution<int> qdist(-128, 127);
  std::vector<lio::BlockQ8_0> blocks(size_t(rows * blocks_per_row));
  std::vector<float> expected(size_t(rows * cols));
  for (size_t b = 0; b < blocks.size(); ++b) {
    blocks[b].d = scale_bits[b];
    for (int64_t i = 0; i < lio::kQuantBlockElems; ++i) {
      blocks[b].qs[i] = int8_t(qdist(rng));
      expected[b * lio::kQuantBlockElems + size_t(i)] = scales[b] * float(blocks[b].qs[i]);
    }
  }
  lio::WeightMatrix w;
  w.name = "token_embd.weight";
  w.dtype = lio::DType::Q8_0;
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = blocks_per_row * int64_t(sizeof(lio::BlockQ8_0));
  w.data = reinterpret_cast<const std::byte*>(blocks.data());
  std::vector<float> out(static_cast<size_t>(cols));
  for (int64_t token = 0; token < rows; ++token) {
    lio::cpu::embedding_row(w, token, out.data());
    for (int64_t j = 0; j < cols; ++j) {
      ASSERT_EQ(out[size_t(j)], expected[size_t(token * cols + j)])
          << "token=" << token << " j=" << j;
    }
  }
}

TEST(CpuEmbeddingRow, RejectsTokenOutOfRange) {
  const std::vector<float> table(12, 1.0f);
  lio::WeightMatrix w;
  w.name = "token_embd.weight";
  w.dtype = lio::DType::F32;
  w.rows = 3;
  w.cols = 4;
  w.row_bytes = 16;
  w.data = reinterpret_cast<const std::byte*>(table.data());
  std::vector<float> out(4);
  EXPECT_THROW(lio::cpu::embedding_row(w, -2, out.data()), lio::InvalidArgument);
  EXPECT_THROW(lio::cpu::embedding_row(w, 3, out.data()), lio::InvalidArgument);
  EXPECT_NO_THROW(lio::cpu::embedding_row(w, 2, out.data()));
  // -1: a token another tensor-parallel rank's vocabulary shard holds (chapter 08): zeros.
  std::fill(out.begin(), out.end(), 7.0f);
  EXPECT_NO_THROW(lio::cpu::embedding_row(w, -1, out.data()));
  EXPECT_EQ(out, std::vector<float>(4, 0.0f));
}

}  // namespace
