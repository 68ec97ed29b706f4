// gemv_fused.cu — the decode step's matmuls with the RMSNorm before them (and SwiGLU after) in
// one launch (issue 45: fewer, faster kernels).
//
// At batch 1 a decode step is bound by kernel launches before it is bound by bandwidth: a
// SmolLM2 layer's RMSNorm, three GEMVs (Q, K, V), another RMSNorm, two GEMVs (gate, up) and
// SwiGLU are eight launches of a few microseconds each around 1.2 MB of weights. Here they are two:
//   rmsnorm_gemv_many:   y_m = W_m (rmsnorm(x) * w_norm),  m = 0 .. n_outs - 1 (Q, K, V)
//   rmsnorm_gemv_swiglu: h = silu(W_gate xn) * (W_up xn),  xn = rmsnorm(x) * w_norm
// Layout: every block first stages xn in shared memory — it sums the squares of x (block
// reduction, reduce.cuh), scales, multiplies by the norm weight — then each of its warps computes
// one output row as gemv.cu's kernel does (lane l reads the 8 weights at columns l*8 + 256*i,
// dequantized in registers, quant.cuh's dot8; 4-byte aligned Q4_1 rows through the wide reader,
// q4_1_row_partial_wide, as gemv_q4_1_wide does). The norm is recomputed by every block: d_model
// floats read from L2, against the kilobytes of weights each block streams.
// The unfused twins (cuda::rmsnorm, cuda::gemv, cuda::swiglu) are the reference these kernels are
// tested against (tests/unit/test_cuda_kernels.cpp, tests/unit/test_cuda_runner.cpp).
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "device_matrix.h"
#include "gemv.h"
#include "gemv_fused.h"
#include "lio/error.h"
#include "quant.cuh"
#include "reduce.cuh"

namespace lio::cuda {

namespace {

constexpr int kFusedWarps = 8;
constexpr int kFusedThreads = kFusedWarps * detail::kWarpSize;

/// The matrices of one rmsnorm_gemv_many launch (kernel parameters: passed by value).
struct FusedOuts {
  const std::byte* w[kMaxFusedGemvOuts];  // (rows[m], row_bytes[m])
  int64_t row_bytes[kMaxFusedGemvOuts];
  float* y[kMaxFusedGemvOuts];            // (rows[m])
  int rows[kMaxFusedGemvOuts];
  int n_outs;
};

/// xs (dim floats, shared) = x / sqrt(mean(x^2) + eps) * weight: cuda::rmsnorm's formula (IEEE
/// sqrt and division), its sum in another order. Every thread of the block calls it; the
/// trailing barrier makes xs visible to all warps.
__device__ __forceinline__ void stage_rmsnorm(const float* x, const float* weight, int dim, float eps, float* xs) {
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kFusedThreads) {
    const float v = x[i];
    xs[i] = v;
    sum_sq += v * v;
  }
  sum_sq = detail::block_sum<kFusedThreads>(sum_sq);
  const float scale = 1.0f / sqrtf(sum_sq / static_cast<float>(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += kFusedThreads) xs[i] = xs[i] * scale * weight[i];
  __syncthreads();
}

/// One row's dot product with the staged xs (cols a multiple of 32: whole dot8 groups, none
/// straddling a quantized block), summed over the warp: every lane gets it. kWide (Q4_1 rows,
/// 4-byte aligned): the wide reader, each weight byte read once (detail::q4_1_row_partial_wide).
template <DType kType, bool kWide>
__device__ __forceinline__ float row_dot(const std::byte* w_row, int cols, const float* xs, int lane) {
  if constexpr (kWide) {
    static_assert(kType == DType::Q4_1, "the wide reader is Q4_1's");
    return detail::warp_sum(detail::q4_1_row_partial_wide(w_row, cols, xs, lane));
  }
  float acc = 0.0f;
  for (int e0 = lane * detail::kDot8Elems; e0 < cols; e0 += detail::kDot8Elems * detail::kWarpSize) {
    float x8[detail::kDot8Elems];
    detail::load_x8<true>(xs, e0, x8);
    acc += detail::dot8<kType>(w_row, e0, x8);
  }
  return detail::warp_sum(acc);
}

/// Grid: (ceil(sum of rows / kFusedWarps)). Block: (kFusedThreads). Dynamic shared memory: dim
/// floats. Warp w of block b computes row b * kFusedWarps + w of the outputs laid end to end.
template <DType kType, bool kWide>
__global__ void __launch_bounds__(kFusedThreads)
rmsnorm_gemv_many_kernel(const float* x,            // (dim)
                         const float* norm_weight,  // (dim)
                         int dim, float eps, FusedOuts o) {
  extern __shared__ float4 xs4[];  // float4: 16-byte aligned for load_x8
  float* xs = reinterpret_cast<float*>(xs4);
  stage_rmsnorm(x, norm_weight, dim, eps, xs);
  const int lane = threadIdx.x % detail::kWarpSize;
  int row = static_cast<int>(blockIdx.x) * kFusedWarps + static_cast<int>(threadIdx.x) / detail::kWarpSize;
  int m = 0;
  while (m < o.n_outs && row >= o.rows[m]) {
    row -= o.rows[m];
    ++m;
  }
  if (m == o.n_outs) return;  // whole warps leave together
  const float acc = row_dot<kType, kWide>(o.w[m] + static_cast<int64_t>(row) * o.row_bytes[m], dim, xs, lane);
  if (lane == 0) o.y[m][row] = acc;
}

/// Grid: (ceil(rows / kFusedWarps)). Block: (kFusedThreads). Dynamic shared memory: dim floats.
/// Warp w of block b computes feature b * kFusedWarps + w: its gate and up rows, then SwiGLU
/// (cuda::swiglu's formula, g / (1 + exp(-g)) * u).
template <DType kType, bool kWide>
__global__ void __launch_bounds__(kFusedThreads)
rmsnorm_gemv_swiglu_kernel(const float* x, const float* norm_weight, int dim, float eps,
                           const std::byte* gate,  // (rows, row_bytes)
                           const std::byte* up,    // (rows, row_bytes)
                           int64_t row_bytes, int rows,
                           float* out) {           // (rows)
  extern __shared__ float4 xs4[];
  float* xs = reinterpret_cast<float*>(xs4);
  stage_rmsnorm(x, norm_weight, dim, eps, xs);
  const int lane = threadIdx.x % detail::kWarpSize;
  const int row = static_cast<int>(blockIdx.x) * kFusedWarps + static_cast<int>(threadIdx.x) / detail::kWarpSize;
  if (row >= rows) return;
  float g = 0.0f, u = 0.0f;
  if constexpr (kWide) {  // gate and up rows share each x load (q4_1_two_rows_partial_wide)
    detail::q4_1_two_rows_partial_wide(gate + static_cast<int64_t>(row) * row_bytes,
                                       up + static_cast<int64_t>(row) * row_bytes, dim, xs, lane, &g, &u);
    g = detail::warp_sum(g);
    u = detail::warp_sum(u);
  } else {
    g = row_dot<kType, kWide>(gate + static_cast<int64_t>(row) * row_bytes, dim, xs, lane);
    u = row_dot<kType, kWide>(up + static_cast<int64_t>(row) * row_bytes, dim, xs, lane);
  }
  if (lane == 0) out[row] = g / (1.0f + expf(-g)) * u;
}

/// The checks both launchers share: the input, the norm and one matrix against dim.
void check_fused_matrix(const char* op, const DeviceMatrix& w, int64_t dim, DType dtype) {
  detail::check_matrix(op, w);
  if (w.cols != dim || w.dtype != dtype) {
    throw InvalidArgument(std::string("cuda::") + op + ": every matrix must have cols == dim (" + std::to_string(dim) +
                          ") and one dtype, got cols " + std::to_string(w.cols));
  }
}

void check_fused_input(const char* op, const float* x, const float* norm_weight, int64_t dim, float eps) {
  if (x == nullptr || norm_weight == nullptr) {
    throw InvalidArgument(std::string("cuda::") + op + ": null device pointer (x or norm_weight)");
  }
  if (!fused_gemv_supports(dim)) {
    throw InvalidArgument(std::string("cuda::") + op + ": dim " + std::to_string(dim) +
                          " must be a positive multiple of 32 up to kFusedGemvMaxDim (" +
                          std::to_string(kFusedGemvMaxDim) + ")");
  }
  if (!(eps >= 0.0f) || !std::isfinite(eps)) {
    throw InvalidArgument(std::string("cuda::") + op + ": eps must be finite and >= 0");
  }
}

}  // namespace

static_assert(kFusedStaticSharedBytes == kFusedWarps * static_cast<int64_t>(sizeof(float)),
              "kFusedStaticSharedBytes is block_reduce's per-warp scratch of a kFusedThreads block");

bool fused_gemv_supports(int64_t dim) {
  return dim > 0 && dim % 32 == 0 && dim <= kFusedGemvMaxDim;  // whole 32-element blocks
}

void rmsnorm_gemv_many(const float* x, const float* norm_weight, int64_t dim, float eps,
                       std::span<const FusedGemvOut> outs, cudaStream_t stream) {
  check_fused_input("rmsnorm_gemv_many", x, norm_weight, dim, eps);
  if (outs.empty() || outs.size() > static_cast<size_t>(kMaxFusedGemvOuts)) {
    throw InvalidArgument("cuda::rmsnorm_gemv_many: 1 .. " + std::to_string(kMaxFusedGemvOuts) +
                          " outputs, got " + std::to_string(outs.size()));
  }
  FusedOuts o{};
  int64_t total_rows = 0;
  for (size_t m = 0; m < outs.size(); ++m) {
    check_fused_matrix("rmsnorm_gemv_many", outs[m].w, dim, outs[0].w.dtype);
    if (outs[m].y == nullptr) throw InvalidArgument("cuda::rmsnorm_gemv_many: null output pointer");
    o.w[m] = outs[m].w.data;
    o.row_bytes[m] = outs[m].w.row_bytes;
    o.y[m] = outs[m].y;
    o.rows[m] = static_cast<int>(outs[m].w.rows);
    total_rows += outs[m].w.rows;
  }
  o.n_outs = static_cast<int>(outs.size());
  if (total_rows > INT32_MAX) throw InvalidArgument("cuda::rmsnorm_gemv_many: more than INT32_MAX rows");
  const unsigned n_blocks = static_cast<unsigned>((total_rows + kFusedWarps - 1) / kFusedWarps);
  const size_t shared_bytes = static_cast<size_t>(dim) * sizeof(float);
  const int dim_i = static_cast<int>(dim);
  bool wide = true;  // every matrix Q4_1 and 4-byte aligned: the wide reader
  for (const FusedGemvOut& out : outs) wide &= gemv_wide_supports(out.w);
  if (wide) {
    rmsnorm_gemv_many_kernel<DType::Q4_1, true><<<n_blocks, kFusedThreads, shared_bytes, stream>>>(x, norm_weight, dim_i,
                                                                                                    eps, o);
  } else {
    detail::dispatch_dtype(outs[0].w.dtype, [&]<DType kType>() {
      rmsnorm_gemv_many_kernel<kType, false><<<n_blocks, kFusedThreads, shared_bytes, stream>>>(x, norm_weight, dim_i,
                                                                                                 eps, o);
    });
  }
  CUDA_CHECK(cudaGetLastError());
}

void rmsnorm_gemv_swiglu(const float* x, const float* norm_weight, int64_t dim, float eps, const DeviceMatrix& gate,
                         const DeviceMatrix& up, float* out, cudaStream_t stream) {
  check_fused_input("rmsnorm_gemv_swiglu", x, norm_weight, dim, eps);
  check_fused_matrix("rmsnorm_gemv_swiglu", gate, dim, gate.dtype);
  check_fused_matrix("rmsnorm_gemv_swiglu", up, dim, gate.dtype);
  if (gate.rows != up.rows) {
    throw InvalidArgument("cuda::rmsnorm_gemv_swiglu: gate has " + std::to_string(gate.rows) + " rows, up " +
                          std::to_string(up.rows));
  }
  if (out == nullptr) throw InvalidArgument("cuda::rmsnorm_gemv_swiglu: null output pointer");
  const unsigned n_blocks = static_cast<unsigned>((gate.rows + kFusedWarps - 1) / kFusedWarps);
  const size_t shared_bytes = static_cast<size_t>(dim) * sizeof(float);
  const int dim_i = static_cast<int>(dim);
  const int rows = static_cast<int>(gate.rows);
  if (gemv_wide_supports(gate) && gemv_wide_supports(up)) {
    rmsnorm_gemv_swiglu_kernel<DType::Q4_1, true><<<n_blocks, kFusedThreads, shared_bytes, stream>>>(
        x, norm_weight, dim_i, eps, gate.data, up.data, gate.row_bytes, rows, out);
  } else {
    detail::dispatch_dtype(gate.dtype, [&]<DType kType>() {
      rmsnorm_gemv_swiglu_kernel<kType, false><<<n_blocks, kFusedThreads, shared_bytes, stream>>>(
          x, norm_weight, dim_i, eps, gate.data, up.data, gate.row_bytes, rows, out);
    });
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace lio::cuda
