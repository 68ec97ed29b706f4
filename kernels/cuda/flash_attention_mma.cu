// flash_attention_mma.cu — chapter 07's tensor-core FlashAttention-2 forward for the kernel
// benchmark: one sequence, contiguous bf16 Q, K, V, f32 output (Dao 2023, Algorithm 1).
//
// A block of 4 warps owns 64 query rows of one head; warp w owns rows 16w .. 16w + 15 and keeps
// their Q as wmma A-fragments in registers. For each tile of 64 keys (K and V staged in shared
// memory by the whole block):
//   1. S (16 x 64) = Q K^T with nvcuda::wmma 16x16x16, bf16 in, f32 accumulate, stored to the
//      warp's shared scratch;
//   2. lanes 2r and 2r + 1 own row r: every other column each (keys half, half + 2, ...); the
//      online softmax in f32 registers, in base 2 (scores pre-multiplied by scale log2 e, so
//      exp2f; lse converts back): m_new = max(m, max_j s_j), l = l 2^(m - m_new) + sum_j p_j,
//      P rounded to bf16 into shared memory;
//   3. P V (16 x head_dim) with wmma into the scratch, and the lanes fold it into their
//      register accumulator: o = o 2^(m - m_new) + (P V)[r].
// wmma's fragment layout is opaque, so the row-wise rescaling goes through shared memory (steps
// 1 -> 2 and 3 -> o): clarity over the last factor of speed (no cp.async, no ldmatrix swizzle).
// Causal: key tiles past the query tile are never loaded; the diagonal tile masks per key.
// Causal query tiles are launched heaviest first (blockIdx.x reversed) to shorten the tail.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "flash_attention_mma.h"
#include "lio/error.h"
#include "reduce.cuh"

namespace lio::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kMmaWarps = 4;
constexpr int kMmaThreads = kMmaWarps * detail::kWarpSize;  // 128
constexpr int kWmma = 16;                                   // wmma tile: m = n = k = 16
constexpr int kQueryTile = kMmaWarps * kWmma;               // Br = 64 rows, 16 per warp
constexpr int kKeyTile = 64;                                // Bc = 64 keys
constexpr int kKeySubtiles = kKeyTile / kWmma;              // 4
constexpr int kBf16Pad = 8;  // bf16 row padding: 16 bytes, rows start in different banks
constexpr int kF32Pad = 4;   // float row padding: wmma wants ldm % 4 == 0 for float
constexpr int kBf16PerVec = 8;  // one uint4 load = 8 bf16
static_assert(kWmma * 2 == detail::kWarpSize, "two lanes per row of a warp's 16-row slice");
static_assert(kQueryTile == kKeyTile, "load_tile stages Q, K and V tiles of the same row count");
static_assert(kKeyTile % kWmma == 0 && kKeyTile % 2 == 0, "whole wmma tiles; two lanes per row");
static_assert(kBf16Pad % 8 == 0 && kF32Pad % 4 == 0, "wmma ldm: multiple of 16 bytes");

/// Shared-memory layout for one head_dim (bytes). Every region and every warp's slice of it is
/// a multiple of 32 bytes, as wmma::load/store_matrix_sync require of their pointers.
template <int kHeadDim>
struct MmaLayout {
  static constexpr int kLdQkv = kHeadDim + kBf16Pad;                                  // bf16 per Q/K/V row
  static constexpr int kLdP = kKeyTile + kBf16Pad;                                    // bf16 per P row
  static constexpr int kLdS = (kKeyTile > kHeadDim ? kKeyTile : kHeadDim) + kF32Pad;  // floats per scratch row
  static constexpr int kTileBytes = kKeyTile * kLdQkv * 2;
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kTileBytes;
  static constexpr int kVOffset = kKOffset + kTileBytes;
  static constexpr int kPOffset = kVOffset + kTileBytes;
  static constexpr int kScratchOffset = kPOffset + kQueryTile * kLdP * 2;
  static constexpr int kBytes = kScratchOffset + kQueryTile * kLdS * 4;
  static_assert(kHeadDim % kWmma == 0 && kHeadDim % kBf16PerVec == 0, "whole wmma tiles and uint4 loads");
  static_assert((kWmma * kLdQkv * 2) % 32 == 0 && (kWmma * kLdP * 2) % 32 == 0 && (kWmma * kLdS * 4) % 32 == 0,
                "every warp's 16-row slice starts 32-byte aligned");
};

// ---- device helpers -----------------------------------------------------------------------------

/// Copies rows row0 .. row0 + kKeyTile - 1 of src (n rows of kHeadDim bf16) into dst (row stride
/// ld), 16 bytes per load; rows at or past n become zeros. Called by the whole block.
template <int kHeadDim>
__device__ __forceinline__ void load_tile(bf16* dst, const bf16* src, int row0, int n, int ld) {
  constexpr int kVecsPerRow = kHeadDim / kBf16PerVec;
  for (int idx = threadIdx.x; idx < kKeyTile * kVecsPerRow; idx += kMmaThreads) {
    const int r = idx / kVecsPerRow;
    const int c = idx % kVecsPerRow;
    uint4 x = make_uint4(0u, 0u, 0u, 0u);
    if (row0 + r < n) {
      x = *reinterpret_cast<const uint4*>(src + static_cast<int64_t>(row0 + r) * kHeadDim + c * kBf16PerVec);
    }
    *reinterpret_cast<uint4*>(dst + r * ld + c * kBf16PerVec) = x;
  }
}

// ---- kernels ------------------------------------------------------------------------------------

/// Grid: (ceil(n / kQueryTile), n_heads). Block: kMmaThreads. Dynamic shared memory:
/// MmaLayout<kHeadDim>::kBytes. scale_log2 = scale * log2(e).
template <int kHeadDim>
__global__ void __launch_bounds__(kMmaThreads)
flash_attention_mma_kernel(const bf16* q,  // (n_heads, n, kHeadDim)
                           const bf16* k,  // (n_kv_heads, n, kHeadDim)
                           const bf16* v,  // (n_kv_heads, n, kHeadDim)
                           float* out,     // (n_heads, n, kHeadDim)
                           float* lse,     // (n_heads, n) or null
                           int n, int n_heads, int n_kv_heads, float scale_log2, bool causal) {
  // bf16 wmma exists from sm_80 on; the launcher refuses older GPUs, so an older image is never
  // run (this guard only keeps a build for such an architecture compiling).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  namespace wmma = nvcuda::wmma;
  using Layout = MmaLayout<kHeadDim>;
  constexpr int kDimTiles = kHeadDim / kWmma;
  constexpr int kColsPerLane = kKeyTile / 2;
  constexpr int kDimsPerLane = kHeadDim / 2;
  extern __shared__ __align__(128) unsigned char mma_smem[];
  bf16* q_s = reinterpret_cast<bf16*>(mma_smem + Layout::kQOffset);  // (kQueryTile, kLdQkv)
  bf16* k_s = reinterpret_cast<bf16*>(mma_smem + Layout::kKOffset);  // (kKeyTile, kLdQkv)
  bf16* v_s = reinterpret_cast<bf16*>(mma_smem + Layout::kVOffset);  // (kKeyTile, kLdQkv)
  bf16* p_s = reinterpret_cast<bf16*>(mma_smem + Layout::kPOffset);  // (kQueryTile, kLdP)
  float* scratch = reinterpret_cast<float*>(mma_smem + Layout::kScratchOffset);  // (kQueryTile, kLdS)

  const int warp = threadIdx.x / detail::kWarpSize;
  const int lane = threadIdx.x % detail::kWarpSize;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kQueryTile;
  const int h = blockIdx.y;
  const int g = h / (n_heads / n_kv_heads);
  const bf16* k_g = k + static_cast<int64_t>(g) * n * kHeadDim;
  const bf16* v_g = v + static_cast<int64_t>(g) * n * kHeadDim;

  load_tile<kHeadDim>(q_s, q + static_cast<int64_t>(h) * n * kHeadDim, q0, n, Layout::kLdQkv);
  __syncthreads();
  wmma::fragment<wmma::matrix_a, kWmma, kWmma, kWmma, bf16, wmma::row_major> q_frag[kDimTiles];
#pragma unroll
  for (int dk = 0; dk < kDimTiles; ++dk) {
    wmma::load_matrix_sync(q_frag[dk], q_s + warp * kWmma * Layout::kLdQkv + dk * kWmma, Layout::kLdQkv);
  }

  const int row = lane / 2;   // of the warp's 16
  const int half = lane % 2;  // columns half, half + 2, ...
  const int query = q0 + warp * kWmma + row;
  float* s_w = scratch + warp * kWmma * Layout::kLdS;  // the warp's (16, kLdS) floats
  bf16* p_w = p_s + warp * kWmma * Layout::kLdP;       // the warp's (16, kLdP) P
  float m = -INFINITY;  // running max, base-2 units
  float l = 0.0f;
  float o[kDimsPerLane];
#pragma unroll
  for (int c = 0; c < kDimsPerLane; ++c) o[c] = 0.0f;

  const int key_end = causal ? min(n, q0 + kQueryTile) : n;  // block-uniform
  for (int k0 = 0; k0 < key_end; k0 += kKeyTile) {
    __syncthreads();  // every warp is done with the previous K and V tiles
    load_tile<kHeadDim>(k_s, k_g, k0, n, Layout::kLdQkv);
    load_tile<kHeadDim>(v_s, v_g, k0, n, Layout::kLdQkv);
    __syncthreads();

    // 1. S = Q K^T: K^T as a column-major B operand is K row-major.
#pragma unroll
    for (int kt = 0; kt < kKeySubtiles; ++kt) {
      wmma::fragment<wmma::accumulator, kWmma, kWmma, kWmma, float> s_frag;
      wmma::fill_fragment(s_frag, 0.0f);
#pragma unroll
      for (int dk = 0; dk < kDimTiles; ++dk) {
        wmma::fragment<wmma::matrix_b, kWmma, kWmma, kWmma, bf16, wmma::col_major> k_frag;
        wmma::load_matrix_sync(k_frag, k_s + kt * kWmma * Layout::kLdQkv + dk * kWmma, Layout::kLdQkv);
        wmma::mma_sync(s_frag, q_frag[dk], k_frag, s_frag);
      }
      wmma::store_matrix_sync(s_w + kt * kWmma, s_frag, Layout::kLdS, wmma::mem_row_major);
    }
    __syncwarp();

    // 2. Online softmax of row `row` over this tile; the two lanes of a row meet by shuffle.
    float score[kColsPerLane];
    float tile_max = -INFINITY;
#pragma unroll
    for (int c = 0; c < kColsPerLane; ++c) {
      const int col = half + 2 * c;
      const int key = k0 + col;
      const bool visible = key < n && (!causal || key <= query);
      score[c] = visible ? s_w[row * Layout::kLdS + col] * scale_log2 : -INFINITY;
      tile_max = fmaxf(tile_max, score[c]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    const float shift = m_new == -INFINITY ? 0.0f : m_new;  // no key seen yet: avoid -inf + inf
    const float correction = exp2f(m - shift);
    float tile_sum = 0.0f;
#pragma unroll
    for (int c = 0; c < kColsPerLane; ++c) {
      const float p = exp2f(score[c] - shift);
      tile_sum += p;
      p_w[row * Layout::kLdP + half + 2 * c] = __float2bfloat16(p);
    }
    tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 1);
    l = l * correction + tile_sum;
    m = m_new;
    __syncwarp();  // P is complete and S is read: the scratch may take P V

    // 3. P V (16 x kHeadDim) into the scratch, then o = o * correction + P V. P's fragments are
    // loaded once for all kDimTiles column tiles.
    wmma::fragment<wmma::matrix_a, kWmma, kWmma, kWmma, bf16, wmma::row_major> p_frag[kKeySubtiles];
#pragma unroll
    for (int kk = 0; kk < kKeySubtiles; ++kk) wmma::load_matrix_sync(p_frag[kk], p_w + kk * kWmma, Layout::kLdP);
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt) {
      wmma::fragment<wmma::accumulator, kWmma, kWmma, kWmma, float> pv_frag;
      wmma::fill_fragment(pv_frag, 0.0f);
#pragma unroll
      for (int kk = 0; kk < kKeySubtiles; ++kk) {
        wmma::fragment<wmma::matrix_b, kWmma, kWmma, kWmma, bf16, wmma::row_major> v_frag;
        wmma::load_matrix_sync(v_frag, v_s + kk * kWmma * Layout::kLdQkv + dt * kWmma, Layout::kLdQkv);
        wmma::mma_sync(pv_frag, p_frag[kk], v_frag, pv_frag);
      }
      wmma::store_matrix_sync(s_w + dt * kWmma, pv_frag, Layout::kLdS, wmma::mem_row_major);
    }
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kDimsPerLane; ++c) o[c] = o[c] * correction + s_w[row * Layout::kLdS + half + 2 * c];
    __syncwarp();  // the scratch is read before the next tile's S overwrites it
  }

  if (query < n) {
    float* out_row = out + (static_cast<int64_t>(h) * n + query) * kHeadDim;
#pragma unroll
    for (int c = 0; c < kDimsPerLane; ++c) out_row[half + 2 * c] = o[c] / l;
    if (half == 0 && lse != nullptr) lse[static_cast<int64_t>(h) * n + query] = m * 0.6931471805599453f + logf(l);
  }
#endif
}

// ---- host launcher ------------------------------------------------------------------------------

template <int kHeadDim>
void launch_mma(const bf16* q, const bf16* k, const bf16* v, float* out, float* lse, int64_t n, int64_t n_heads,
                int64_t n_kv_heads, float scale, bool causal, cudaStream_t stream) {
  constexpr int kBytes = MmaLayout<kHeadDim>::kBytes;
  const auto kernel = flash_attention_mma_kernel<kHeadDim>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
  const dim3 grid(static_cast<unsigned>((n + kQueryTile - 1) / kQueryTile), static_cast<unsigned>(n_heads));
  const float scale_log2 = scale * 1.4426950408889634f;  // log2(e)
  kernel<<<grid, kMmaThreads, kBytes, stream>>>(q, k, v, out, lse, static_cast<int>(n), static_cast<int>(n_heads),
                                                static_cast<int>(n_kv_heads), scale_log2, causal);
  CUDA_CHECK(cudaGetLastError());
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void flash_attention_bf16(const uint16_t* q, const uint16_t* k, const uint16_t* v, float* out, float* lse,
                          int64_t n, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale,
                          bool causal, cudaStream_t stream) {
  const std::string where = "cuda::flash_attention_bf16: ";
  if (q == nullptr || k == nullptr || v == nullptr || out == nullptr) {
    throw InvalidArgument(where + "null device pointer (q, k, v or out)");
  }
  if (!aligned16(q) || !aligned16(k) || !aligned16(v)) {
    throw InvalidArgument(where + "q, k and v must be 16-byte aligned (rows are read as uint4)");
  }
  if (n < 0 || n > INT_MAX) throw InvalidArgument(where + "need 0 <= n <= INT32_MAX, got " + std::to_string(n));
  if (head_dim != 64 && head_dim != 128) {
    throw InvalidArgument(where + "head_dim must be 64 or 128, got " + std::to_string(head_dim));
  }
  if (n_kv_heads <= 0 || n_heads <= 0 || n_heads % n_kv_heads != 0 || n_heads > 65535) {
    throw InvalidArgument(where + "need n_heads a positive multiple of n_kv_heads > 0 and <= 65535, got n_heads=" +
                          std::to_string(n_heads) + " n_kv_heads=" + std::to_string(n_kv_heads));
  }
  if (!std::isfinite(scale)) throw InvalidArgument(where + "scale must be finite");
  if (n == 0) return;
  int device = 0;
  int major = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 8) {
    throw UnsupportedError(where + "bf16 tensor-core MMA needs sm_80 or newer, device has sm_" +
                           std::to_string(major) + "x");
  }
  const auto* qb = reinterpret_cast<const bf16*>(q);
  const auto* kb = reinterpret_cast<const bf16*>(k);
  const auto* vb = reinterpret_cast<const bf16*>(v);
  if (head_dim == 64) {
    launch_mma<64>(qb, kb, vb, out, lse, n, n_heads, n_kv_heads, scale, causal, stream);
  } else {
    launch_mma<128>(qb, kb, vb, out, lse, n, n_heads, n_kv_heads, scale, causal, stream);
  }
}

double flash_attention_bf16_flops(int64_t n, int64_t n_heads, int64_t head_dim, bool causal) {
  if (n < 0 || n_heads < 0 || head_dim < 0) {
    throw InvalidArgument("cuda::flash_attention_bf16_flops: n, n_heads and head_dim must be >= 0");
  }
  const double flops = 4.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(head_dim) *
                       static_cast<double>(n_heads);
  return causal ? flops / 2 : flops;
}

}  // namespace lio::cuda
