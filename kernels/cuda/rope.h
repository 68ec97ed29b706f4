// rope.h — rotary position embedding on the GPU (rope.cu): one tensor, a layer's Q and K in one
// launch (issue 45's fused rope_qk), and the naive twin.
//
// Launcher conventions (README.md in this folder): device pointers, an explicit stream, shapes
// checked on the host (lio::InvalidArgument), launches checked (lio::cuda::CudaError).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lio/rope_style.h"

namespace lio::cuda {

/// Largest head_dim rope() accepts: its cos/sin table for one token lives in shared memory
/// (kRopeMaxHeadDim / 2 pairs x 2 floats = 4 KiB). Real models use 64..256.
inline constexpr int64_t kRopeMaxHeadDim = 1024;

/// Rotary position embedding in place (Su et al. 2021, RoFormer eq. 34), pair k of each head
/// rotated by positions[t] * theta_base^(-2k/head_dim); `style` picks the pairing
/// (RopeStyle::Normal (x[2k], x[2k+1]), RopeStyle::Neox (x[k], x[k + head_dim/2])).
/// x: (n_tokens, n_heads, head_dim) device pointer; positions: (n_tokens) int32 device pointer.
/// Angles and their cos/sin are computed in double and rounded to float once, like the CPU op,
/// so results agree with cpu::rope to ~1 ulp.
/// Preconditions (throw InvalidArgument): pointers non-null, n_tokens >= 0 (0 launches
/// nothing), n_heads > 0, head_dim even, 0 < head_dim <= kRopeMaxHeadDim,
/// n_tokens <= INT32_MAX, n_heads <= INT32_MAX / head_dim, theta_base finite and > 0.
/// Throws CudaError if the launch fails.
void rope(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads,
          int64_t head_dim, float theta_base, RopeStyle style, cudaStream_t stream);

/// rope() on a layer's queries and keys in one launch (issue 45): q (n_tokens, n_heads, head_dim)
/// and k (n_tokens, n_kv_heads, head_dim), both rotated in place at `positions`. Each pair is
/// rotated exactly as rope() rotates it (the same cos/sin, the same arithmetic), so results equal
/// two rope() calls bit for bit. Preconditions as rope() for both tensors (throw
/// InvalidArgument); CudaError if the launch fails.
void rope_qk(float* q, float* k, const int32_t* positions, int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads,
             int64_t head_dim, float theta_base, RopeStyle style, cudaStream_t stream);

/// Same contract as rope(); one thread per (token, head, pair), recomputing its angle.
void rope_naive(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads,
                int64_t head_dim, float theta_base, RopeStyle style, cudaStream_t stream);

}  // namespace lio::cuda
