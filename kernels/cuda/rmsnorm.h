// rmsnorm.h — RMSNorm on the GPU (rmsnorm.cu) and its naive twin.
//
// Launcher conventions (README.md in this folder): device pointers, an explicit stream, shapes
// checked on the host (lio::InvalidArgument), launches checked (lio::cuda::CudaError).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lio::cuda {

/// RMSNorm (Zhang & Sennrich 2019, eq. 4): out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight.
/// x, out: (n_rows, dim) device pointers, may alias; weight: (dim) device pointer.
/// One block per row; the sum of squares is accumulated in float, strided per thread and then
/// combined by warp shuffles: about dim/256 + 8 roundings deep, so relative error <~ 1e-6 for
/// dim <= 4096 (the CPU op sums in double).
/// Preconditions (throw InvalidArgument): pointers non-null, n_rows >= 0 (0 launches
/// nothing), 0 < dim <= INT32_MAX, n_rows <= INT32_MAX, eps finite and >= 0.
/// Throws CudaError if the launch fails.
void rmsnorm(const float* x, const float* weight, float* out, int64_t n_rows, int64_t dim,
             float eps, cudaStream_t stream);

/// Same contract as rmsnorm(); one thread per row, sequential double-precision sum
/// (the CPU algorithm, verbatim). The reference the optimized kernel is tested against.
void rmsnorm_naive(const float* x, const float* weight, float* out, int64_t n_rows,
                   int64_t dim, float eps, cudaStream_t stream);

}  // namespace lio::cuda
