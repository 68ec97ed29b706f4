// gemv_fused.h — issue 45's fused decode kernels (gemv_fused.cu): RMSNorm + up to three GEMVs, and
// RMSNorm + gate/up GEMVs + SwiGLU, one launch each. Whether a backend runs them is decided in one
// place: fused_kernels.h.
//
// Launcher conventions (README.md in this folder): device pointers, an explicit stream, shapes
// checked on the host (lio::InvalidArgument), launches checked (lio::cuda::CudaError).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "device_matrix.h"

namespace lio::cuda {

/// Most matrices one rmsnorm_gemv_many() launch computes (Q, K and V).
inline constexpr int kMaxFusedGemvOuts = 3;

/// One output of rmsnorm_gemv_many(): y (w.rows floats, device) = w xn.
struct FusedGemvOut {
  DeviceMatrix w;       ///< the weight, (rows, dim)
  float* y = nullptr;   ///< (w.rows) f32 device output
};

/// Bytes of static shared memory a fused kernel's block reduction of the sum of squares keeps
/// (reduce.cuh's block_reduce: one float per warp of its 8-warp block).
inline constexpr int64_t kFusedStaticSharedBytes = 8 * 4;

/// Widest row the fused kernels take: the staged xn (dim floats, dynamic shared memory) plus the
/// static reduction scratch must fit the 48 KiB a launch gets without opting in, rounded down to
/// whole 32-element blocks: (49,152 - 32) / 4 = 12,280 -> 12,256 floats. A 12,288-wide row
/// (kGemvMaxSharedCols) would ask for 48 KiB + 32 B and fail to launch (issue 60, defect 3).
inline constexpr int64_t kFusedGemvMaxDim = (48 * 1024 - kFusedStaticSharedBytes) / 4 / 32 * 32;

/// Whether the fused kernels take rows of `dim` floats: a positive multiple of 32 (whole
/// quantized blocks) up to kFusedGemvMaxDim (xn and the reduction scratch in 48 KiB of shared
/// memory). Host-only, no GPU needed; the backend runs the unfused ops for any other width.
bool fused_gemv_supports(int64_t dim);

/// One decode row through RMSNorm (Zhang & Sennrich 2019, eq. 4) and up to kMaxFusedGemvOuts
/// matrices in one launch: xn = x / sqrt(mean(x^2) + eps) * norm_weight, then
/// outs[m].y = outs[m].w xn for every m. x, norm_weight: (dim) f32 device pointers; every
/// outs[m].w: (rows_m, dim), all of one dtype (any gemv() takes). Equals cuda::rmsnorm then
/// cuda::gemv per matrix up to summation order (~1e-6 relative). Throws InvalidArgument for null
/// pointers, 0 or more than kMaxFusedGemvOuts outputs, a dim fused_gemv_supports() refuses, a
/// matrix whose cols differ from dim or whose dtype differs from the first's, a negative or
/// non-finite eps; CudaError if the launch fails.
void rmsnorm_gemv_many(const float* x, const float* norm_weight, int64_t dim, float eps,
                       std::span<const FusedGemvOut> outs, cudaStream_t stream);

/// One decode row through RMSNorm, the gate and up projections and SwiGLU (Shazeer 2020, eq. 6)
/// in one launch: xn as rmsnorm_gemv_many(), then out[i] = silu(gate_i . xn) * (up_i . xn), silu(g) =
/// g / (1 + exp(-g)) (cuda::swiglu's formula). gate, up: (rows, dim) of one dtype; out: (rows)
/// f32 device pointer, not overlapping x. Equals cuda::rmsnorm, two cuda::gemv and cuda::swiglu
/// up to summation order. Throws as rmsnorm_gemv_many(), and InvalidArgument if gate and up
/// differ in rows or out is null.
void rmsnorm_gemv_swiglu(const float* x, const float* norm_weight, int64_t dim, float eps, const DeviceMatrix& gate,
                         const DeviceMatrix& up, float* out, cudaStream_t stream);

}  // namespace lio::cuda
