// test_cuda_ops.cpp — the CUDA operators of the forward pass beyond RMSNorm/RoPE (embedding,
// dequantize, gemv, cuBLAS matmul, SwiGLU, attention) against kernels/cpu on fresh random
// inputs (fixed seeds, never all zeros), every weight dtype, ragged sizes included.
// GPU tests skip without a usable GPU; the argument checks run everywhere (launchers validate
// on the host before touching the device).
//
// Tolerances, stated per test, cover f32 accumulation in another order than the CPU's (dot
// products: 2e-6 x sum_j |w_j x_j|, ~16 roundings of a 512-long sum) and expf differing from
// glibc's exp by a few ulp. Dequantization is exact on both sides, so it is compared bitwise.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "attention_reference.h"
#include "cpu_ops.h"
#include "cublas_handle.h"
#include "cuda_check.h"
#include "attention.h"
#include "dequant.h"
#include "device_matrix.h"
#include "elementwise.h"
#include "gemv.h"
#include "gemv_batched.h"
#include "gemv_fused.h"
#include "matmul.h"
#include "rope.h"
#include "cuda_runtime_info.h"
#include "device_buffer.h"
#include "lio/dtype.h"
#include "lio/error.h"
#include "lio/tensor.h"
#include "random_inputs.h"

namespace {

using lio::DType;
using lio::RopeStyle;
using lio::cuda::DeviceBuffer;
using lio::cuda::DeviceMatrix;

constexpr DType kAllDtypes[] = {DType::F32, DType::F16, DType::BF16,
                                DType::Q8_0, DType::Q4_0, DType::Q4_1};

using lio::testing::random_floats;

std::string dtype_name(DType t) { return std::string(lio::dtype_info(t).name); }

/// A random (rows, cols) matrix stored in `dtype`, on the host and the device.
struct TestMatrix {
  std::vector<std::byte> bytes;   // host copy, (rows, row_bytes)
  std::vector<float> dequant;     // (rows, cols) what the bytes mean, via lio::dequantize_row
  lio::WeightMatrix host;         // view of `bytes` for kernels/cpu
  DeviceBuffer<std::byte> device_bytes;
  DeviceMatrix device;            // view of device_bytes for kernels/cuda

  TestMatrix(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
    const int64_t row_bytes = lio::dtype_row_bytes(dtype, cols);
    const auto values = random_floats(size_t(rows * cols), -1.0f, 1.0f, seed);
    bytes.resize(size_t(rows * row_bytes));
    dequant.resize(values.size());
    for (int64_t r = 0; r < rows; ++r) {
      lio::quantize_row(dtype, values.data() + r * cols, bytes.data() + r * row_bytes, cols);
      lio::dequantize_row(dtype, bytes.data() + r * row_bytes, dequant.data() + r * cols, cols);
    }
    host = lio::WeightMatrix{"test", dtype, rows, cols, row_bytes, bytes.data()};
    if (lio::cuda::cuda_available()) {
      device_bytes = DeviceBuffer<std::byte>(rows * row_bytes);
      device_bytes.copy_from_host(bytes.data(), rows * row_bytes);
      device = DeviceMatrix{dtype, rows, cols, row_bytes, device_bytes.data()};
    }
  }

  /// sum_j |W[r][j] x[j]|: the scale of the rounding error of row r's dot product.
  double abs_dot(int64_t r, const float* x) const {
    double s = 0;
    for (int64_t j = 0; j < host.cols; ++j) s += std::fabs(double(dequant[r * host.cols + j]) * x[j]);
    return s;
  }
};

/// |got - want| <= rel * |want| + abs_tol, elementwise, with a message naming the case.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                  double abs_tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * std::fabs(want[i]) + abs_tol) << what << " i=" << i;
  }
}

// ---- embedding and dequantize -------------------------------------------------------------

TEST(CudaEmbedding, MatchesCpuEveryDtype) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t vocab = 37, cols = 96;
  const std::vector<int32_t> tokens = {0, 36, 5, 5, 17, 1, 30};
  auto d_tokens = DeviceBuffer<int32_t>::from_host(tokens);
  for (DType t : kAllDtypes) {
    TestMatrix m(t, vocab, cols, 11);
    DeviceBuffer<float> d_out(int64_t(tokens.size()) * cols);
    lio::cuda::embedding(m.device, d_tokens.data(), d_out.data(), int64_t(tokens.size()), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> want(tokens.size() * cols);
    for (size_t i = 0; i < tokens.size(); ++i)
      lio::cpu::embedding_row(m.host, tokens[i], want.data() + i * cols);
    EXPECT_EQ(d_out.to_host(), want) << "embedding " << dtype_name(t);  // exact: see dequant.h
  }
}

TEST(CudaDequantize, MatchesDequantizeRowEveryDtype) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (DType t : kAllDtypes) {
    TestMatrix m(t, 13, 160, 21);
    DeviceBuffer<float> d_out(13 * 160);
    lio::cuda::dequantize(m.device, d_out.data(), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(d_out.to_host(), m.dequant) << "dequantize " << dtype_name(t);
  }
}

// ---- gemv and matmul ------------------------------------------------------------------------

/// Runs a gemv launcher on (rows, cols) random weights of `t`, with and without accumulate,
/// and compares with cpu::matmul (n = 1): |gpu - cpu| <= 2e-6 * sum_j |w_j x_j| + 1e-6.
template <typename Launch>
void check_gemv(Launch launch, DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const std::string what = dtype_name(t) + " " + std::to_string(rows) + "x" + std::to_string(cols);
  TestMatrix m(t, rows, cols, seed);
  const auto x = random_floats(size_t(cols), -2.0f, 2.0f, seed + 1);
  const auto y0 = random_floats(size_t(rows), -5.0f, 5.0f, seed + 2);
  std::vector<float> want(static_cast<size_t>(rows));
  lio::cpu::matmul(m.host, x.data(), want.data(), 1);
  const auto d_x = DeviceBuffer<float>::from_host(x);
  for (bool accumulate : {false, true}) {
    auto d_y = DeviceBuffer<float>::from_host(y0);
    launch(m.device, d_x.data(), d_y.data(), accumulate, cudaStream_t{nullptr});
    CUDA_CHECK(cudaDeviceSynchronize());
    const auto got = d_y.to_host();
    for (int64_t r = 0; r < rows; ++r) {
      const double expected = want[r] + (accumulate ? y0[r] : 0.0f);
      ASSERT_NEAR(got[r], expected, 2e-6 * m.abs_dot(r, x.data()) + 1e-6 + (accumulate ? 1e-6 * std::fabs(y0[r]) : 0))
          << what << " accumulate=" << accumulate << " row=" << r;
    }
  }
}

// rows = 75: the last block has 3 of 8 warps busy; cols = 320: one full 256-column warp step
// plus a partial one; cols = 70 (float dtypes): a ragged tail inside a lane's 8 elements.
TEST(CudaGemv, MatchesCpuEveryDtype) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 31;
  for (DType t : kAllDtypes) {
    check_gemv(lio::cuda::gemv, t, 75, 320, seed);
    check_gemv(lio::cuda::gemv, t, 8, 576, seed + 3);
    if (lio::dtype_info(t).block_elems == 1) check_gemv(lio::cuda::gemv, t, 9, 70, seed + 5);
    seed += 10;
  }
}

// Issue 45's wide Q4_1 reader (32-bit loads, each byte once) against the CPU, as gemv is tested:
// rows = 75 (a partial last block of warps), cols = 320 and 576 (a partial warp step).
TEST(CudaGemv, Q4_1WideMatchesCpu) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_gemv(lio::cuda::gemv_q4_1_wide, DType::Q4_1, 75, 320, 151);
  check_gemv(lio::cuda::gemv_q4_1_wide, DType::Q4_1, 8, 576, 157);
  check_gemv(lio::cuda::gemv_q4_1_wide, DType::Q4_1, 3, lio::cuda::kGemvMaxSharedCols, 163);
}

TEST(CudaGemv, NaiveMatchesCpuEveryDtype) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 131;
  for (DType t : kAllDtypes) {
    check_gemv(lio::cuda::gemv_naive, t, 75, 320, seed);
    seed += 10;
  }
}

// cols == kGemvMaxSharedCols: x fills the whole 48 KiB; one more block of columns: x is read
// from global memory instead of shared memory.
TEST(CudaGemv, WideRowsAtAndPastSharedStagingLimit) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t at_limit = lio::cuda::kGemvMaxSharedCols;
  check_gemv(lio::cuda::gemv, DType::Q8_0, 3, at_limit, 227);
  check_gemv(lio::cuda::gemv, DType::Q4_1, 5, at_limit + 32, 231);
  check_gemv(lio::cuda::gemv, DType::F32, 3, at_limit + 64, 233);
}

// n > kGemvBatchedMaxRows goes through dequantize + cublasSgemm (full f32): the same bound as
// gemv. (2 .. kGemvBatchedMaxRows rows: gemv_batched, tests/unit/test_cuda_gemv_batched.cpp.)
TEST(CudaMatmul, CublasPrefillMatchesCpu) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  lio::cuda::CublasHandle cublas;
  const int64_t rows = 96, cols = 192, n = lio::cuda::kGemvBatchedMaxRows + 7;
  for (DType t : kAllDtypes) {
    TestMatrix m(t, rows, cols, 301);
    const auto x = random_floats(size_t(n * cols), -2.0f, 2.0f, 302);
    const auto y0 = random_floats(size_t(n * rows), -5.0f, 5.0f, 303);
    std::vector<float> want(static_cast<size_t>(n * rows));
    lio::cpu::matmul(m.host, x.data(), want.data(), n);
    const auto d_x = DeviceBuffer<float>::from_host(x);
    DeviceBuffer<float> scratch(rows * cols);
    for (bool accumulate : {false, true}) {
      auto d_y = DeviceBuffer<float>::from_host(y0);
      lio::cuda::matmul(cublas, m.device, d_x.data(), d_y.data(), n, accumulate, scratch.data(),
                        scratch.n_elems(), nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      const auto got = d_y.to_host();
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t r = 0; r < rows; ++r) {
          const size_t at = size_t(i * rows + r);
          const double expected = want[at] + (accumulate ? y0[at] : 0.0f);
          ASSERT_NEAR(got[at], expected, 2e-6 * m.abs_dot(r, x.data() + i * cols) + 1e-5)
              << dtype_name(t) << " accumulate=" << accumulate << " token=" << i << " row=" << r;
        }
      }
    }
    // Too small a scratch for a quantized matrix is an argument error, not a fault.
    if (t != DType::F32) {
      EXPECT_THROW(lio::cuda::matmul(cublas, m.device, d_x.data(), scratch.data(), n, false,
                                     scratch.data(), rows * cols - 1, nullptr),
                   lio::InvalidArgument);
    }
  }
}

// Issue 60, defect 2: cublasSetStream resets the handle's workspace to cuBLAS's default pool. A
// matmul on a new stream must set our workspace again, and a cuBLAS matmul captured into a graph
// on that stream (global capture: an allocation inside it invalidates the capture) must replay
// what the eager call computes.
TEST(CudaMatmul, StreamChangeKeepsOwnWorkspaceAndCapturesIntoAGraph) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  lio::cuda::CublasHandle cublas;
  EXPECT_TRUE(cublas.own_workspace_bound());
  const int64_t rows = 64, cols = 128, n = lio::cuda::kGemvBatchedMaxRows + 16;
  TestMatrix m(DType::Q4_1, rows, cols, 311);
  const auto x = random_floats(size_t(n * cols), -2.0f, 2.0f, 312);
  const auto d_x = DeviceBuffer<float>::from_host(x);
  DeviceBuffer<float> scratch(rows * cols), eager(n * rows), replayed(n * rows);
  cudaStream_t a = nullptr, b = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  lio::cuda::matmul(cublas, m.device, d_x.data(), eager.data(), n, false, scratch.data(), scratch.n_elems(), a);
  EXPECT_EQ(cublas.bound_stream(), a);
  EXPECT_TRUE(cublas.own_workspace_bound());
  CUDA_CHECK(cudaStreamSynchronize(a));
  CUDA_CHECK(cudaStreamBeginCapture(b, cudaStreamCaptureModeGlobal));
  lio::cuda::matmul(cublas, m.device, d_x.data(), replayed.data(), n, false, scratch.data(), scratch.n_elems(), b);
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(b, &graph));
  EXPECT_EQ(cublas.bound_stream(), b);
  EXPECT_TRUE(cublas.own_workspace_bound());
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, b));
  CUDA_CHECK(cudaStreamSynchronize(b));
  EXPECT_EQ(replayed.to_host(), eager.to_host());  // the same kernels on the same inputs
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(a));
  CUDA_CHECK(cudaStreamDestroy(b));
}

// ---- SwiGLU -----------------------------------------------------------------------------------

// Same formula as the CPU; expf (<= 2 ulp) and glibc's exp differ by up to ~3 ulp, plus three
// roundings: 8 ulp relative, 1e-30 absolute.
TEST(CudaSwiglu, MatchesCpu) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 3001;
  const auto gate = random_floats(size_t(n), -12.0f, 12.0f, 401);
  const auto up = random_floats(size_t(n), -3.0f, 3.0f, 402);
  std::vector<float> want(static_cast<size_t>(n));
  lio::cpu::swiglu(gate.data(), up.data(), want.data(), n);
  auto d_gate = DeviceBuffer<float>::from_host(gate);
  const auto d_up = DeviceBuffer<float>::from_host(up);
  lio::cuda::swiglu(d_gate.data(), d_up.data(), d_gate.data(), n, nullptr);  // in place
  CUDA_CHECK(cudaDeviceSynchronize());
  expect_close(d_gate.to_host(), want, 8 * FLT_EPSILON, 1e-30, "swiglu");
}

// ---- fused decode kernels (issue 45) -----------------------------------------------------------

/// x (dim) and the norm's weight for a fused test, and cpu::rmsnorm's xn of them.
struct NormedRow {
  std::vector<float> x, weight, xn;
  NormedRow(int64_t dim, uint32_t seed)
      : x(random_floats(size_t(dim), -3.0f, 3.0f, seed)), weight(random_floats(size_t(dim), 0.5f, 1.5f, seed + 1)),
        xn(size_t(dim)) {
    lio::cpu::rmsnorm(x.data(), weight.data(), xn.data(), 1, dim, 1e-5f);
  }
};

// RMSNorm + Q/K/V in one launch against cpu::rmsnorm then cpu::matmul per matrix. dim 576
// (SmolLM2's d_model: two full 256-column warp steps and a partial one); 75 + 20 + 13 rows, so
// warps of one block straddle the matrices; one and two outputs too.
TEST(CudaFused, RmsnormGemvManyMatchesCpuEveryDtype) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t rows[] = {75, 20, 13};
  uint32_t seed = 601;
  for (const int64_t dim : {int64_t{576}, lio::cuda::kFusedGemvMaxDim})  // and the widest row (defect 3)
  for (DType t : kAllDtypes) {
    if (dim % lio::dtype_info(t).block_elems != 0) continue;
    const NormedRow in(dim, seed);
    const auto d_x = DeviceBuffer<float>::from_host(in.x);
    const auto d_w = DeviceBuffer<float>::from_host(in.weight);
    std::vector<TestMatrix> mats;
    mats.reserve(3);
    for (int64_t r : rows) mats.emplace_back(t, r, dim, seed += 3);
    for (size_t n_outs = 1; n_outs <= mats.size(); ++n_outs) {
      std::vector<DeviceBuffer<float>> ys;
      std::vector<lio::cuda::FusedGemvOut> outs;
      for (size_t m = 0; m < n_outs; ++m) {
        ys.emplace_back(mats[m].host.rows);
        CUDA_CHECK(cudaMemset(ys.back().data(), 0xFF, ys.back().size_bytes()));  // NaN: a skipped row fails
        outs.push_back({mats[m].device, ys.back().data()});
      }
      lio::cuda::rmsnorm_gemv_many(d_x.data(), d_w.data(), dim, 1e-5f, outs, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      for (size_t m = 0; m < n_outs; ++m) {
        std::vector<float> want(size_t(mats[m].host.rows));
        lio::cpu::matmul(mats[m].host, in.xn.data(), want.data(), 1);
        const auto got = ys[m].to_host();
        for (int64_t r = 0; r < mats[m].host.rows; ++r) {
          ASSERT_NEAR(got[r], want[r], 4e-6 * mats[m].abs_dot(r, in.xn.data()) + 1e-6)
              << dtype_name(t) << " dim " << dim << " " << n_outs << " outputs, matrix " << m << " row " << r;
        }
      }
    }
  }
}

// RMSNorm + gate + up + SwiGLU in one launch against the CPU's four ops: SmolLM2's width, and
// the widest row the fused kernels take (kFusedGemvMaxDim: xn and the block reduction's static
// scratch in 48 KiB of shared memory; issue 60, defect 3: 12,288 was accepted and failed to
// launch) in every dtype whose blocks divide it.
TEST(CudaFused, RmsnormGemvSwigluMatchesCpuEveryDtype) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 701;
  for (const auto& [dim, rows] : {std::pair<int64_t, int64_t>{576, 99}, {lio::cuda::kFusedGemvMaxDim, 9}})
  for (DType t : kAllDtypes) {
    if (dim % lio::dtype_info(t).block_elems != 0) continue;
    const NormedRow in(dim, seed);
    const TestMatrix gate(t, rows, dim, seed + 3), up(t, rows, dim, seed + 5);
    seed += 10;
    const auto d_x = DeviceBuffer<float>::from_host(in.x);
    const auto d_w = DeviceBuffer<float>::from_host(in.weight);
    DeviceBuffer<float> d_out(rows);
    CUDA_CHECK(cudaMemset(d_out.data(), 0xFF, d_out.size_bytes()));
    lio::cuda::rmsnorm_gemv_swiglu(d_x.data(), d_w.data(), dim, 1e-5f, gate.device, up.device, d_out.data(), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> g(static_cast<size_t>(rows)), u(static_cast<size_t>(rows)), want(static_cast<size_t>(rows));
    lio::cpu::matmul(gate.host, in.xn.data(), g.data(), 1);
    lio::cpu::matmul(up.host, in.xn.data(), u.data(), 1);
    lio::cpu::swiglu(g.data(), u.data(), want.data(), rows);
    const auto got = d_out.to_host();
    for (int64_t r = 0; r < rows; ++r) {
      // d silu / dg <= 1.1: an error eg in g moves h by <= 1.1 eg |u|, an error eu in u by |silu(g)| eu.
      const double eg = 4e-6 * gate.abs_dot(r, in.xn.data()) + 1e-6;
      const double eu = 4e-6 * up.abs_dot(r, in.xn.data()) + 1e-6;
      ASSERT_NEAR(got[r], want[r], 1.1 * eg * (std::fabs(u[r]) + eu) + (std::fabs(g[r]) + eg) * eu + 1e-6)
          << dtype_name(t) << " dim " << dim << " row " << r;
    }
  }
}

// RoPE of Q and K in one launch: bit for bit two cuda::rope calls (the same cos/sin, the same
// arithmetic), both pairings, more heads than one block rotates.
TEST(CudaFused, RopeQkEqualsTwoRopesBitwise) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t n_tokens = 3, n_heads = 9, n_kv_heads = 3, head_dim = 64;
  const std::vector<int32_t> positions = {0, 17, 4095};
  const auto d_pos = DeviceBuffer<int32_t>::from_host(positions);
  for (RopeStyle style : {RopeStyle::Normal, RopeStyle::Neox}) {
    const auto q = random_floats(size_t(n_tokens * n_heads * head_dim), -1.0f, 1.0f, 801);
    const auto k = random_floats(size_t(n_tokens * n_kv_heads * head_dim), -1.0f, 1.0f, 802);
    auto q1 = DeviceBuffer<float>::from_host(q), k1 = DeviceBuffer<float>::from_host(k);
    auto q2 = DeviceBuffer<float>::from_host(q), k2 = DeviceBuffer<float>::from_host(k);
    lio::cuda::rope(q1.data(), d_pos.data(), n_tokens, n_heads, head_dim, 10000.0f, style, nullptr);
    lio::cuda::rope(k1.data(), d_pos.data(), n_tokens, n_kv_heads, head_dim, 10000.0f, style, nullptr);
    lio::cuda::rope_qk(q2.data(), k2.data(), d_pos.data(), n_tokens, n_heads, n_kv_heads, head_dim, 10000.0f, style,
                       nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(q2.to_host(), q1.to_host()) << "q, style " << int(style);
    EXPECT_EQ(k2.to_host(), k1.to_host()) << "k, style " << int(style);
  }
}

// The fused launchers' host-side checks (no GPU needed: every call throws before launching).
TEST(CudaFused, LaunchersRejectBadArgumentsBeforeLaunching) {
  auto* fake = reinterpret_cast<float*>(uintptr_t{256});
  const auto* fake_bytes = reinterpret_cast<const std::byte*>(uintptr_t{256});
  const auto* fake_ids = reinterpret_cast<const int32_t*>(uintptr_t{256});
  const DeviceMatrix w576{DType::Q4_1, 8, 576, lio::dtype_row_bytes(DType::Q4_1, 576), fake_bytes};
  const DeviceMatrix w320{DType::Q4_1, 8, 320, lio::dtype_row_bytes(DType::Q4_1, 320), fake_bytes};
  const DeviceMatrix q8{DType::Q8_0, 8, 576, lio::dtype_row_bytes(DType::Q8_0, 576), fake_bytes};
  EXPECT_TRUE(lio::cuda::fused_gemv_supports(576));
  EXPECT_FALSE(lio::cuda::fused_gemv_supports(70));  // not whole 32-element blocks
  EXPECT_FALSE(lio::cuda::fused_gemv_supports(lio::cuda::kGemvMaxSharedCols + 32));
  // Issue 60, defect 3: 12,288 floats of xn fill the 48 KiB a launch gets, and the block
  // reduction's static scratch does not fit beside them: that width must fall back, not fail.
  EXPECT_FALSE(lio::cuda::fused_gemv_supports(lio::cuda::kGemvMaxSharedCols));
  EXPECT_FALSE(lio::cuda::fused_gemv_supports(12288));
  EXPECT_TRUE(lio::cuda::fused_gemv_supports(12256));
  EXPECT_EQ(lio::cuda::kFusedGemvMaxDim, 12256);
  const lio::cuda::FusedGemvOut one[] = {{w576, fake}};
  const lio::cuda::FusedGemvOut four[] = {{w576, fake}, {w576, fake}, {w576, fake}, {w576, fake}};
  const lio::cuda::FusedGemvOut mixed_cols[] = {{w576, fake}, {w320, fake}};
  const lio::cuda::FusedGemvOut mixed_dtype[] = {{w576, fake}, {q8, fake}};
  const lio::cuda::FusedGemvOut null_y[] = {{w576, nullptr}};
  using lio::cuda::rmsnorm_gemv_many;
  EXPECT_THROW(rmsnorm_gemv_many(nullptr, fake, 576, 1e-5f, one, nullptr), lio::InvalidArgument);
  EXPECT_THROW(rmsnorm_gemv_many(fake, fake, 70, 1e-5f, one, nullptr), lio::InvalidArgument);
  EXPECT_THROW(rmsnorm_gemv_many(fake, fake, 576, NAN, one, nullptr), lio::InvalidArgument);
  EXPECT_THROW(rmsnorm_gemv_many(fake, fake, 576, 1e-5f, {}, nullptr), lio::InvalidArgument);
  EXPECT_THROW(rmsnorm_gemv_many(fake, fake, 576, 1e-5f, four, nullptr), lio::InvalidArgument);
  EXPECT_THROW(rmsnorm_gemv_many(fake, fake, 576, 1e-5f, mixed_cols, nullptr), lio::InvalidArgument);
  EXPECT_THROW(rmsnorm_gemv_many(fake, fake, 576, 1e-5f, mixed_dtype, nullptr), lio::InvalidArgument);
  EXPECT_THROW(rmsnorm_gemv_many(fake, fake, 576, 1e-5f, null_y, nullptr), lio::InvalidArgument);
  using lio::cuda::rmsnorm_gemv_swiglu;
  const DeviceMatrix w576_9{DType::Q4_1, 9, 576, lio::dtype_row_bytes(DType::Q4_1, 576), fake_bytes};
  EXPECT_THROW(rmsnorm_gemv_swiglu(fake, fake, 576, 1e-5f, w576, w576_9, fake, nullptr), lio::InvalidArgument);
  EXPECT_THROW(rmsnorm_gemv_swiglu(fake, fake, 576, 1e-5f, w576, q8, fake, nullptr), lio::InvalidArgument);
  EXPECT_THROW(rmsnorm_gemv_swiglu(fake, fake, 576, 1e-5f, w576, w576, nullptr, nullptr), lio::InvalidArgument);
  EXPECT_THROW(rmsnorm_gemv_swiglu(fake, nullptr, 576, 1e-5f, w576, w576, fake, nullptr), lio::InvalidArgument);
  // The wide Q4_1 GEMV: Q4_1 only, 4-byte aligned, rows staged in shared memory.
  EXPECT_TRUE(lio::cuda::gemv_wide_supports(w576));
  EXPECT_FALSE(lio::cuda::gemv_wide_supports(q8));
  const DeviceMatrix odd{DType::Q4_1, 8, 576, lio::dtype_row_bytes(DType::Q4_1, 576),
                         reinterpret_cast<const std::byte*>(uintptr_t{258})};
  EXPECT_FALSE(lio::cuda::gemv_wide_supports(odd));
  const int64_t too_wide = lio::cuda::kGemvMaxSharedCols + 32;
  const DeviceMatrix wide{DType::Q4_1, 8, too_wide, lio::dtype_row_bytes(DType::Q4_1, too_wide), fake_bytes};
  EXPECT_FALSE(lio::cuda::gemv_wide_supports(wide));
  EXPECT_THROW(lio::cuda::gemv_q4_1_wide(q8, fake, fake, false, nullptr), lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::gemv_q4_1_wide(odd, fake, fake, false, nullptr), lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::gemv_q4_1_wide(w576, nullptr, fake, false, nullptr), lio::InvalidArgument);
  using lio::cuda::rope_qk;
  EXPECT_THROW(rope_qk(fake, nullptr, fake_ids, 1, 9, 3, 64, 1e4f, RopeStyle::Normal, nullptr), lio::InvalidArgument);
  EXPECT_THROW(rope_qk(fake, fake, fake_ids, 1, 9, 0, 64, 1e4f, RopeStyle::Normal, nullptr), lio::InvalidArgument);
  EXPECT_THROW(rope_qk(fake, fake, fake_ids, 1, 9, 3, 63, 1e4f, RopeStyle::Normal, nullptr), lio::InvalidArgument);
}

// ---- attention --------------------------------------------------------------------------------

struct AttentionCase {
  int64_t n_q, start_pos, n_heads, n_kv_heads, head_dim;
};

/// Compares an attention launcher with cpu::attention_reference on random q/K/V. Outputs are convex
/// combinations of V rows (|v| <= 1): absolute tolerance 2e-5.
template <typename Launch>
void check_attention(Launch launch, const AttentionCase& c, uint32_t seed) {
  const int64_t n_ctx = c.start_pos + c.n_q;
  const auto q = random_floats(size_t(c.n_q * c.n_heads * c.head_dim), -1.0f, 1.0f, seed);
  const auto k = random_floats(size_t(n_ctx * c.n_kv_heads * c.head_dim), -1.0f, 1.0f, seed + 1);
  const auto v = random_floats(size_t(n_ctx * c.n_kv_heads * c.head_dim), -1.0f, 1.0f, seed + 2);
  const float scale = 1.0f / std::sqrt(float(c.head_dim));
  std::vector<float> want(q.size());
  lio::cpu::attention_reference(q.data(), k.data(), v.data(), want.data(), c.n_q, c.start_pos,
                                c.n_heads, c.n_kv_heads, c.head_dim, scale);
  const auto d_q = DeviceBuffer<float>::from_host(q);
  const auto d_k = DeviceBuffer<float>::from_host(k);
  const auto d_v = DeviceBuffer<float>::from_host(v);
  DeviceBuffer<float> d_out(int64_t(q.size()));
  launch(d_q.data(), d_k.data(), d_v.data(), d_out.data(), c.n_q, c.start_pos, c.n_heads,
         c.n_kv_heads, c.head_dim, scale, cudaStream_t{nullptr});
  CUDA_CHECK(cudaDeviceSynchronize());
  expect_close(d_out.to_host(), want, 0.0, 2e-5,
               "n_q=" + std::to_string(c.n_q) + " start=" + std::to_string(c.start_pos) +
                   " heads=" + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) +
                   " head_dim=" + std::to_string(c.head_dim));
}

// SmolLM2's shape (9 heads over 3 KV heads, head_dim 64) in prefill and decode; head_dim 48
// (128 threads = 2 groups + 32 idle) and 160 (> 128 threads: the loop path); MHA; 1 key.
constexpr AttentionCase kAttentionCases[] = {
    {7, 0, 9, 3, 64}, {5, 11, 9, 3, 64}, {1, 300, 9, 3, 64}, {3, 4, 4, 2, 48},
    {2, 9, 2, 1, 160}, {4, 2, 4, 4, 32}, {1, 0, 6, 2, 64}};

TEST(CudaAttention, MatchesCpuPrefillAndDecode) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 501;
  for (const auto& c : kAttentionCases) check_attention(lio::cuda::attention, c, seed += 3);
}

TEST(CudaAttention, NaiveMatchesCpu) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 601;
  for (const auto& c : kAttentionCases) check_attention(lio::cuda::attention_naive, c, seed += 3);
}

// Past the 48 KiB default the launcher opts in to more shared memory: 13000 keys (52 KB of
// scores), and 12151 keys, where scores + q fit 48 KiB but not once the kernel's own static
// shared memory is counted (the window a dynamic-only check gets wrong).
TEST(CudaAttention, LongContextOptsIntoLargerSharedMemory) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  // Every sm_80+ part opts in to >= 99 KiB per block (~25K keys at head_dim 64).
  EXPECT_GE(lio::cuda::attention_max_keys(64), 13000);
  // The window cases first: the opt-in attribute, once raised, stays raised for the process.
  check_attention(lio::cuda::attention, {1, 12150, 2, 1, 64}, 703);
  check_attention(lio::cuda::attention, {2, 12100, 2, 1, 64}, 705);
  check_attention(lio::cuda::attention, {1, 12999, 2, 1, 64}, 701);
  const int64_t too_many = lio::cuda::attention_max_keys(64) + 1;
  DeviceBuffer<float> tiny(64);
  EXPECT_THROW(lio::cuda::attention(tiny.data(), tiny.data(), tiny.data(), tiny.data(), 1,
                                    too_many - 1, 1, 1, 64, 0.125f, nullptr),
               lio::InvalidArgument);
}

TEST(CudaAttention, DecodeEqualsOneQueryAttention) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t n_ctx = 37, n_heads = 9, n_kv = 3, hd = 64;
  const auto q = random_floats(size_t(n_heads * hd), -1.0f, 1.0f, 801);
  const auto kv = random_floats(size_t(n_ctx * n_kv * hd), -1.0f, 1.0f, 802);
  const auto d_q = DeviceBuffer<float>::from_host(q);
  const auto d_kv = DeviceBuffer<float>::from_host(kv);
  DeviceBuffer<float> a(n_heads * hd), b(n_heads * hd);
  lio::cuda::decode_attention(d_q.data(), d_kv.data(), d_kv.data(), a.data(), n_ctx, n_heads, n_kv,
                              hd, 0.125f, nullptr);
  lio::cuda::attention(d_q.data(), d_kv.data(), d_kv.data(), b.data(), 1, n_ctx - 1, n_heads, n_kv,
                       hd, 0.125f, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(a.to_host(), b.to_host());  // the same kernel: bitwise equal
}

// ---- argument checks (host side: these run without a GPU) -----------------------------------

TEST(CudaOpsArguments, LaunchersRejectBadShapesBeforeLaunching) {
  // Never dereferenced: every call below must throw in its host-side check.
  auto* fake = reinterpret_cast<float*>(uintptr_t{256});
  const auto* fake_bytes = reinterpret_cast<const std::byte*>(uintptr_t{256});
  const auto* fake_ids = reinterpret_cast<const int32_t*>(uintptr_t{256});
  const DeviceMatrix q41{DType::Q4_1, 4, 40, lio::dtype_row_bytes(DType::F32, 40), fake_bytes};
  EXPECT_THROW(lio::cuda::gemv(q41, fake, fake, false, nullptr), lio::InvalidArgument);  // 40 % 32
  const DeviceMatrix wrong_bytes{DType::Q8_0, 4, 64, 64, fake_bytes};
  EXPECT_THROW(lio::cuda::gemv(wrong_bytes, fake, fake, false, nullptr), lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::gemv_naive(wrong_bytes, fake, fake, false, nullptr), lio::InvalidArgument);
  const DeviceMatrix ok{DType::Q8_0, 4, 64, lio::dtype_row_bytes(DType::Q8_0, 64), fake_bytes};
  EXPECT_THROW(lio::cuda::gemv(ok, nullptr, fake, false, nullptr), lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::embedding(ok, fake_ids, fake, -1, nullptr), lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::dequantize(DeviceMatrix{}, fake, nullptr), lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::swiglu(fake, fake, fake, -1, nullptr), lio::InvalidArgument);
  // 9 heads do not share 2 KV heads evenly; n_ctx 0 has no key to attend to.
  EXPECT_THROW(lio::cuda::attention(fake, fake, fake, fake, 1, 0, 9, 2, 64, 0.125f, nullptr),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::attention(fake, fake, fake, fake, 1, -1, 9, 3, 64, 0.125f, nullptr),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::attention_naive(fake, fake, fake, fake, 1, 0, 9, 3, 64, NAN, nullptr),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::decode_attention(fake, fake, fake, fake, 0, 9, 3, 64, 0.125f, nullptr),
               lio::InvalidArgument);
}

}  // namespace
