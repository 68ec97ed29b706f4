// rope.cu — rotary position embedding on the GPU, in place (Su et al. 2021, RoFormer eq. 34).
//
// Pair k of a head at position p is rotated by angle = p * theta_base^(-2k/head_dim):
//   (a, b) -> (a cos - b sin, a sin + b cos)
// RopeStyle::Normal pairs (x[2k], x[2k+1]); RopeStyle::Neox pairs (x[k], x[k + head_dim/2]).
//
// Optimized kernel: grid (n_tokens, ceil(n_heads / kRopeHeadsPerBlock)). A block first builds
// the token's cos/sin table (head_dim/2 entries) in shared memory, then rotates its heads with
// one thread per pair; consecutive threads touch consecutive pairs, so loads coalesce.
// Naive kernel: one thread per (token, head, pair), computing its own angle.
//
// Numerics: both kernels compute theta_k, the angle and its sincos in double and round cos/sin
// to float once, exactly as cpu::rope does, so the three agree to ~1 ulp. FP64 is full rate on
// the sm_80/sm_90 parts we target; the table is head_dim/2 sincos per block, a few per thread.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "rope.h"
#include "lio/error.h"

namespace lio::cuda {

namespace {

constexpr int kRopeBlockThreads = 256;
// Heads rotated per block: a decode step (1 token, 9..32 heads) still spreads over several
// blocks, while each block's cos/sin table is reused by up to 8 heads.
constexpr int kRopeHeadsPerBlock = 8;
constexpr int kRopeMaxPairs = static_cast<int>(kRopeMaxHeadDim / 2);
constexpr int kNaiveBlockThreads = 256;

static_assert(kRopeMaxHeadDim % 2 == 0, "head_dim is even");
static_assert(kRopeBlockThreads % 32 == 0 && kRopeBlockThreads <= 1024, "whole warps");

// ---- device helpers -------------------------------------------------------------------------

/// cos and sin of pair k's angle at position `pos`, computed in double, rounded to float.
__device__ __forceinline__ void rope_cos_sin(int32_t pos, int k, int head_dim, double theta_base,
                                             float* cos_out, float* sin_out) {
  const double theta_k =
      pow(theta_base, -2.0 * static_cast<double>(k) / static_cast<double>(head_dim));
  double s, c;
  sincos(static_cast<double>(pos) * theta_k, &s, &c);
  *cos_out = static_cast<float>(c);
  *sin_out = static_cast<float>(s);
}

/// Rotates pair k of one head (xh: head_dim floats) by (c, s).
template <RopeStyle kStyle>
__device__ __forceinline__ void rotate_pair(float* xh, int k, int half, float c, float s) {
  const int i0 = kStyle == RopeStyle::Normal ? 2 * k : k;
  const int i1 = kStyle == RopeStyle::Normal ? 2 * k + 1 : k + half;
  const float a = xh[i0];
  const float b = xh[i1];
  xh[i0] = a * c - b * s;
  xh[i1] = a * s + b * c;
}

// ---- kernels --------------------------------------------------------------------------------

/// One block's work for one token: its cos/sin table (head_dim/2 entries, in shared memory), then
/// heads head_begin .. + kRopeHeadsPerBlock - 1 of x (n_tokens, n_heads, head_dim) rotated, one
/// thread per pair. Every thread of the block calls it (it has a barrier).
template <RopeStyle kStyle>
__device__ __forceinline__ void rope_block(float* x, int64_t token, int32_t pos, int n_heads, int head_begin,
                                           int head_dim, double theta_base) {
  __shared__ float cos_table[kRopeMaxPairs];
  __shared__ float sin_table[kRopeMaxPairs];
  const int half = head_dim / 2;
  for (int k = threadIdx.x; k < half; k += kRopeBlockThreads) {
    rope_cos_sin(pos, k, head_dim, theta_base, &cos_table[k], &sin_table[k]);
  }
  __syncthreads();
  const int heads_here = min(kRopeHeadsPerBlock, n_heads - head_begin);
  float* x_heads = x + (token * n_heads + head_begin) * head_dim;
  for (int idx = threadIdx.x; idx < heads_here * half; idx += kRopeBlockThreads) {
    const int h = idx / half;
    const int k = idx - h * half;
    rotate_pair<kStyle>(x_heads + static_cast<int64_t>(h) * head_dim, k, half, cos_table[k], sin_table[k]);
  }
}

/// Grid: (n_tokens, ceil(n_heads / kRopeHeadsPerBlock)). Block: (kRopeBlockThreads).
template <RopeStyle kStyle>
__global__ void __launch_bounds__(kRopeBlockThreads)
rope_kernel(float* x,                  // (n_tokens, n_heads, head_dim), rotated in place
            const int32_t* positions,  // (n_tokens)
            int n_heads,
            int head_dim,              // even, <= kRopeMaxHeadDim
            double theta_base) {
  const int64_t token = blockIdx.x;
  rope_block<kStyle>(x, token, positions[token], n_heads, static_cast<int>(blockIdx.y) * kRopeHeadsPerBlock, head_dim,
                     theta_base);
}

/// rope_kernel over two tensors at once (rope_qk): blocks y < q_blocks rotate q's heads,
/// the rest k's. Grid: (n_tokens, q_blocks + ceil(n_kv_heads / kRopeHeadsPerBlock)).
template <RopeStyle kStyle>
__global__ void __launch_bounds__(kRopeBlockThreads)
rope_qk_kernel(float* q,                  // (n_tokens, n_heads, head_dim), rotated in place
               float* k,                  // (n_tokens, n_kv_heads, head_dim), rotated in place
               const int32_t* positions,  // (n_tokens)
               int n_heads, int n_kv_heads, int head_dim, double theta_base, int q_blocks) {
  const int64_t token = blockIdx.x;
  const bool is_q = static_cast<int>(blockIdx.y) < q_blocks;
  const int block = is_q ? static_cast<int>(blockIdx.y) : static_cast<int>(blockIdx.y) - q_blocks;
  rope_block<kStyle>(is_q ? q : k, token, positions[token], is_q ? n_heads : n_kv_heads, block * kRopeHeadsPerBlock,
                     head_dim, theta_base);
}

/// Grid: (ceil(n_tokens * n_heads * head_dim/2 / kNaiveBlockThreads)). Block:
/// (kNaiveBlockThreads). One thread per (token, head, pair); the scalar equivalent of
/// rope_kernel.
template <RopeStyle kStyle>
__global__ void rope_naive_kernel(float* x,                  // (n_tokens, n_heads, head_dim)
                                  const int32_t* positions,  // (n_tokens)
                                  int64_t n_pairs_total,     // n_tokens * n_heads * head_dim/2
                                  int n_heads,
                                  int head_dim,
                                  double theta_base) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_pairs_total) return;
  const int half = head_dim / 2;
  const int k = static_cast<int>(idx % half);
  const int64_t head_row = idx / half;  // token * n_heads + head
  const int64_t token = head_row / n_heads;
  float c, s;
  rope_cos_sin(positions[token], k, head_dim, theta_base, &c, &s);
  rotate_pair<kStyle>(x + head_row * head_dim, k, half, c, s);
}

// ---- host launchers -------------------------------------------------------------------------

/// Throws InvalidArgument unless the arguments meet rope()'s preconditions.
void check_rope_args(const char* op, const float* x, const int32_t* positions, int64_t n_tokens,
                     int64_t n_heads, int64_t head_dim, float theta_base) {
  const auto where = [op] { return std::string("cuda::") + op + ": "; };  // built only to throw
  if (x == nullptr || positions == nullptr) {
    throw InvalidArgument(where() + "null device pointer (x or positions)");
  }
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > kRopeMaxHeadDim) {
    throw InvalidArgument(where() + "head_dim must be even and in (0, " +
                          std::to_string(kRopeMaxHeadDim) + "], got " + std::to_string(head_dim));
  }
  if (n_tokens < 0 || n_tokens > INT_MAX || n_heads <= 0 || n_heads > INT_MAX / head_dim) {
    throw InvalidArgument(where() + "need 0 <= n_tokens <= INT32_MAX and 0 < n_heads * head_dim "
                          "<= INT32_MAX, got n_tokens=" + std::to_string(n_tokens) +
                          " n_heads=" + std::to_string(n_heads) +
                          " head_dim=" + std::to_string(head_dim));
  }
  if (!(theta_base > 0.0f) || !std::isfinite(theta_base)) {
    throw InvalidArgument(where() + "theta_base must be finite and > 0, got " +
                          std::to_string(theta_base));
  }
}

}  // namespace

void rope(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads,
          int64_t head_dim, float theta_base, RopeStyle style, cudaStream_t stream) {
  check_rope_args("rope", x, positions, n_tokens, n_heads, head_dim, theta_base);
  if (n_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(n_tokens),
                  static_cast<unsigned>((n_heads + kRopeHeadsPerBlock - 1) / kRopeHeadsPerBlock));
  const dim3 block(kRopeBlockThreads);
  // grid.y <= ceil(INT32_MAX / 2 / 8) could still exceed the 65535 limit for absurd n_heads.
  if (grid.y > 65535) {
    throw InvalidArgument("cuda::rope: n_heads=" + std::to_string(n_heads) + " is too many");
  }
  const int n_heads_i = static_cast<int>(n_heads);
  const int head_dim_i = static_cast<int>(head_dim);
  const double base = theta_base;
  if (style == RopeStyle::Normal) {
    rope_kernel<RopeStyle::Normal>
        <<<grid, block, 0, stream>>>(x, positions, n_heads_i, head_dim_i, base);
  } else {
    rope_kernel<RopeStyle::Neox>
        <<<grid, block, 0, stream>>>(x, positions, n_heads_i, head_dim_i, base);
  }
  CUDA_CHECK(cudaGetLastError());
}

void rope_qk(float* q, float* k, const int32_t* positions, int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads,
             int64_t head_dim, float theta_base, RopeStyle style, cudaStream_t stream) {
  check_rope_args("rope_qk", q, positions, n_tokens, n_heads, head_dim, theta_base);
  check_rope_args("rope_qk", k, positions, n_tokens, n_kv_heads, head_dim, theta_base);
  if (n_tokens == 0) return;
  const int64_t q_blocks = (n_heads + kRopeHeadsPerBlock - 1) / kRopeHeadsPerBlock;
  const int64_t k_blocks = (n_kv_heads + kRopeHeadsPerBlock - 1) / kRopeHeadsPerBlock;
  if (q_blocks + k_blocks > 65535) {
    throw InvalidArgument("cuda::rope_qk: n_heads=" + std::to_string(n_heads) + " and n_kv_heads=" +
                          std::to_string(n_kv_heads) + " are too many");
  }
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(q_blocks + k_blocks));
  const int nh = static_cast<int>(n_heads), nkv = static_cast<int>(n_kv_heads), hd = static_cast<int>(head_dim);
  const int qb = static_cast<int>(q_blocks);
  const double base = theta_base;
  if (style == RopeStyle::Normal) {
    rope_qk_kernel<RopeStyle::Normal><<<grid, kRopeBlockThreads, 0, stream>>>(q, k, positions, nh, nkv, hd, base, qb);
  } else {
    rope_qk_kernel<RopeStyle::Neox><<<grid, kRopeBlockThreads, 0, stream>>>(q, k, positions, nh, nkv, hd, base, qb);
  }
  CUDA_CHECK(cudaGetLastError());
}

void rope_naive(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads,
                int64_t head_dim, float theta_base, RopeStyle style, cudaStream_t stream) {
  check_rope_args("rope_naive", x, positions, n_tokens, n_heads, head_dim, theta_base);
  if (n_tokens == 0) return;
  const int64_t n_pairs_total = n_tokens * n_heads * (head_dim / 2);
  const int64_t n_blocks = (n_pairs_total + kNaiveBlockThreads - 1) / kNaiveBlockThreads;
  if (n_blocks > INT_MAX) {
    throw InvalidArgument("cuda::rope_naive: " + std::to_string(n_pairs_total) +
                          " pairs exceed one launch");
  }
  const dim3 grid(static_cast<unsigned>(n_blocks));
  const dim3 block(kNaiveBlockThreads);
  const int n_heads_i = static_cast<int>(n_heads);
  const int head_dim_i = static_cast<int>(head_dim);
  const double base = theta_base;
  if (style == RopeStyle::Normal) {
    rope_naive_kernel<RopeStyle::Normal>
        <<<grid, block, 0, stream>>>(x, positions, n_pairs_total, n_heads_i, head_dim_i, base);
  } else {
    rope_naive_kernel<RopeStyle::Neox>
        <<<grid, block, 0, stream>>>(x, positions, n_pairs_total, n_heads_i, head_dim_i, base);
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace lio::cuda
