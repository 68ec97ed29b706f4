// paged_attention.cu — causal grouped-query attention over the paged KV pool, for a batch that
// mixes prefill chunks and decode rows of different sequences.
//
//   out[i, h] = sum_{j <= p(i)} softmax_j(scale * q[i, h] . k[s, j, g]) v[s, j, g]
//   g = h / (n_heads / n_kv_heads),  p(i) = seq_lens[s] - query_len(s) + (i - query_start_loc[s])
//   k[s, j, g] = k_pool[slot(s, j), g],  slot(s, j) = block_tables[s][j / block_size] *
//                                                     block_size + j % block_size
// (Vaswani et al. 2017 eq. 1; GQA, Ainslie et al. 2023; PagedAttention, Kwon et al. 2023 sec. 4.1.)
//
// Optimized kernel: one block of kPagedWarps warps per (row i, head h).
//   1. every thread finds the row's sequence s by binary search over query_start_loc (the
//      same few addresses for the whole block: L1 broadcasts); q[i, h] goes to shared memory;
//   2. warp w walks key tiles w, w + kPagedWarps, ... of 32 keys, lane l owning key tile + l:
//      the lane looks up its key's slot in the block table and computes the whole dot product
//      (q broadcast from shared memory, its K row streamed as float4 when aligned);
//   3. the warp's running max m and sum l absorb the tile (online softmax, Milakov &
//      Gimelshein 2018): acc *= exp(m_old - m_new); then for each of the tile's keys, p_j and
//      the slot are shuffled to all lanes and the lanes, over head_dim, add p_j * v_j (one
//      coalesced V row per key);
//   4. the warps' (m, l, acc) meet in shared memory and combine (FlashAttention-2's split of
//      the keys across warps, Dao 2023 sec. 3.1):
//        out = sum_w acc_w e^(m_w - M) / sum_w l_w e^(m_w - M),  M = max_w m_w.
// Nothing is sized by the context, so any length runs. With one block per (row, head), a
// single decode row at a short context leaves most warps idle; splitting one row's keys across
// blocks (flash-decoding) and reading a GQA group's K/V once for all its heads are the next
// steps (chapter 07).
// Naive kernel: one thread per (row, head), binary search, then the running-max loop of
// cpu::attention_reference over positions 0 .. p — the reference.
// Sliding window (Gemma 3's local layers; `window` > 0): row p attends to positions
// max(0, p - window + 1) .. p only; both kernels start their key loop at the window's first key,
// so nothing before it is read.
// Quantized pools (chapter 03): the same kernel with another reader (F16Kv, Int8Kv) that widens
// halves or multiplies int8 codes by their per-(token, head) scale as K and V are read.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda_check.h"
#include "paged_attention.h"
#include "quantized_kv.h"
#include "lio/error.h"
#include "online_softmax.cuh"
#include "paged_args.h"
#include "paged_index.cuh"
#include "reduce.cuh"
#include "tree_mask.cuh"

namespace lio::cuda {

namespace {

constexpr int kPagedWarps = 4;
constexpr int kPagedThreads = kPagedWarps * detail::kWarpSize;  // 128
constexpr int kKeysPerTile = detail::kWarpSize;                 // one key per lane
constexpr int kMaxHeadDim = static_cast<int>(kPagedAttentionMaxHeadDim);
constexpr int kMaxDimsPerLane = kMaxHeadDim / detail::kWarpSize;  // 8 accumulators per lane
constexpr int kNaiveBlockThreads = 64;
static_assert(kMaxHeadDim % detail::kWarpSize == 0, "lanes split head_dim evenly at the maximum");
static_assert(kMaxHeadDim % 4 == 0, "q is staged as float4");

// ---- device helpers -----------------------------------------------------------------------------

using detail::check_paged_attention_args;
using detail::find_sequence;
using detail::PagedShape;
using detail::slot_of;

/// q . k over head_dim floats, in index order. kVec4: head_dim % 4 == 0 and k 16-byte aligned.
template <bool kVec4>
__device__ __forceinline__ float dot_q_k(const float* q_shared, const float* k, int head_dim) {
  float dot = 0.0f;
  if constexpr (kVec4) {
    const float4* q4 = reinterpret_cast<const float4*>(q_shared);
    const float4* k4 = reinterpret_cast<const float4*>(k);
#pragma unroll 4
    for (int d4 = 0; d4 < head_dim / 4; ++d4) {
      const float4 a = q4[d4];
      const float4 b = k4[d4];
      dot += a.x * b.x;
      dot += a.y * b.y;
      dot += a.z * b.z;
      dot += a.w * b.w;
    }
  } else {
#pragma unroll 4
    for (int d = 0; d < head_dim; ++d) dot += q_shared[d] * k[d];
  }
  return dot;
}

/// How the kernel reads one layer of the pool. An f32 pool: K rows through dot_q_k, V
/// elements as they are. v_scale() is 1, so p_j * v_scale * v is p_j * v bit for bit.
template <bool kVec4>
struct F32Kv {
  const float* k;  // (n_slots, n_kv_heads, head_dim)
  const float* v;
  __device__ __forceinline__ float score(const float* q_shared, int64_t slot, int g, int n_kv_heads,
                                         int head_dim) const {
    return dot_q_k<kVec4>(q_shared, k + (slot * n_kv_heads + g) * head_dim, head_dim);
  }
  __device__ __forceinline__ float v_scale(int64_t, int, int) const { return 1.0f; }
  __device__ __forceinline__ float v_elem(int64_t slot, int g, int n_kv_heads, int head_dim, int d) const {
    return v[(slot * n_kv_heads + g) * head_dim + d];
  }
};

/// An f16 pool (chapter 03): halves widened to f32 as they are read; kVec4 reads four halves
/// (8 bytes) at a time.
template <bool kVec4>
struct F16Kv {
  const __half* k;  // (n_slots, n_kv_heads, head_dim)
  const __half* v;
  __device__ __forceinline__ float score(const float* q_shared, int64_t slot, int g, int n_kv_heads,
                                         int head_dim) const {
    const __half* row = k + (slot * n_kv_heads + g) * head_dim;
    float dot = 0.0f;
    if constexpr (kVec4) {
      const float4* q4 = reinterpret_cast<const float4*>(q_shared);
      const uint2* k4 = reinterpret_cast<const uint2*>(row);
#pragma unroll 4
      for (int d4 = 0; d4 < head_dim / 4; ++d4) {
        const float4 a = q4[d4];
        const uint2 bits = k4[d4];
        const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&bits.x));
        const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&bits.y));
        dot += a.x * lo.x;
        dot += a.y * lo.y;
        dot += a.z * hi.x;
        dot += a.w * hi.y;
      }
    } else {
      for (int d = 0; d < head_dim; ++d) dot += q_shared[d] * __half2float(row[d]);
    }
    return dot;
  }
  __device__ __forceinline__ float v_scale(int64_t, int, int) const { return 1.0f; }
  __device__ __forceinline__ float v_elem(int64_t slot, int g, int n_kv_heads, int head_dim, int d) const {
    return __half2float(v[(slot * n_kv_heads + g) * head_dim + d]);
  }
};

/// An int8 pool (chapter 03): q . k = k_scale * (q . codes), one multiply per key; the value
/// scale is folded into p_j once per key. kVec4 reads four codes (4 bytes) at a time.
template <bool kVec4>
struct Int8Kv {
  const int8_t* k;  // (n_slots, n_kv_heads, head_dim)
  const int8_t* v;
  const float* k_scales;  // (n_slots, n_kv_heads)
  const float* v_scales;
  __device__ __forceinline__ float score(const float* q_shared, int64_t slot, int g, int n_kv_heads,
                                         int head_dim) const {
    const int8_t* row = k + (slot * n_kv_heads + g) * head_dim;
    float dot = 0.0f;
    if constexpr (kVec4) {
      const float4* q4 = reinterpret_cast<const float4*>(q_shared);
      const char4* k4 = reinterpret_cast<const char4*>(row);
#pragma unroll 4
      for (int d4 = 0; d4 < head_dim / 4; ++d4) {
        const float4 a = q4[d4];
        const char4 c = k4[d4];
        dot += a.x * static_cast<float>(c.x);
        dot += a.y * static_cast<float>(c.y);
        dot += a.z * static_cast<float>(c.z);
        dot += a.w * static_cast<float>(c.w);
      }
    } else {
      for (int d = 0; d < head_dim; ++d) dot += q_shared[d] * static_cast<float>(row[d]);
    }
    return dot * k_scales[slot * n_kv_heads + g];
  }
  __device__ __forceinline__ float v_scale(int64_t slot, int g, int n_kv_heads) const {
    return v_scales[slot * n_kv_heads + g];
  }
  __device__ __forceinline__ float v_elem(int64_t slot, int g, int n_kv_heads, int head_dim, int d) const {
    return static_cast<float>(v[(slot * n_kv_heads + g) * head_dim + d]);
  }
};

// ---- kernels ------------------------------------------------------------------------------------

/// Grid: (n_tokens, n_heads). Block: (kPagedThreads). Static shared memory: q (head_dim floats,
/// 1 KiB at most) and the warps' partial results (kPagedWarps x (head_dim + 2) floats).
/// kDimsPerLane = ceil(head_dim / 32) rounded up to a power of two (1, 2, 4, 8): output elements
/// lane, lane + 32, ... of a warp's accumulator live in registers.
/// Kv: F32Kv, F16Kv or Int8Kv — how K scores and V elements are read from the pool.
template <int kDimsPerLane, class Kv>
__global__ void __launch_bounds__(kPagedThreads)
paged_attention_kernel(const float* q,                  // (n_tokens, n_heads, head_dim)
                       Kv kv,                           // the pool's layer
                       float* out,                      // (n_tokens, n_heads, head_dim)
                       const int32_t* query_start_loc,  // (n_seqs + 1)
                       const int32_t* seq_lens,         // (n_seqs)
                       const int32_t* block_tables,     // (n_seqs, max_blocks_per_seq)
                       int n_seqs,
                       int max_blocks_per_seq,
                       int block_size,                  // tokens per block
                       int n_heads,
                       int n_kv_heads,                  // divides n_heads
                       int head_dim,                    // <= 32 * kDimsPerLane
                       float scale,
                       int window,                      // 0, or row p sees keys p - window + 1 .. p
                       DraftTrees trees) {              // draft trees (null: none; tree_mask.cuh)
  static_assert(kDimsPerLane >= 1 && kDimsPerLane <= kMaxDimsPerLane, "head_dim <= 256");
  __shared__ float4 q_shared4[kMaxHeadDim / 4];  // float4: 16-byte aligned for dot_q_k
  __shared__ float acc_shared[kPagedWarps][kMaxHeadDim];
  __shared__ float max_shared[kPagedWarps];
  __shared__ float sum_shared[kPagedWarps];
  float* q_shared = reinterpret_cast<float*>(q_shared4);

  const int row = blockIdx.x;
  const int h = blockIdx.y;
  const int lane = threadIdx.x % detail::kWarpSize;
  const int warp = threadIdx.x / detail::kWarpSize;
  const int g = h / (n_heads / n_kv_heads);
  const int s = find_sequence(query_start_loc, n_seqs, row);
  const int q_start = query_start_loc[s];
  const int query_len = query_start_loc[s + 1] - q_start;
  const int n_keys = seq_lens[s] - query_len + (row - q_start) + 1;  // positions 0 .. p
  // A draft tree's row sees the prefix and its ancestors among keys 0 .. p (its window counted
  // from its real position); other rows every key of 0 .. p in their window.
  const detail::TreeRow tree = detail::tree_row(trees, s, q_start, query_len, row - q_start, seq_lens[s], window);
  const int key_first = tree.is_tree() ? tree.first_key() : window > 0 ? max(0, n_keys - window) : 0;
  const int32_t* table = block_tables + static_cast<int64_t>(s) * max_blocks_per_seq;

  const float* q_row = q + (static_cast<int64_t>(row) * n_heads + h) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += kPagedThreads) q_shared[d] = q_row[d];
  __syncthreads();

  float running_max = -INFINITY;
  float running_sum = 0.0f;
  float acc[kDimsPerLane];
#pragma unroll
  for (int c = 0; c < kDimsPerLane; ++c) acc[c] = 0.0f;

  // Warp-uniform loop: every tile holds at least one key (tile < n_keys), so outside a tree the
  // tile's max is finite for finite inputs and exp(running_max - new_max) is 0 on the warp's
  // first tile. A tree row may have every key of a tile masked: the shift below keeps that NaN-free.
  for (int tile = key_first + warp * kKeysPerTile; tile < n_keys; tile += kPagedWarps * kKeysPerTile) {
    const int j = tile + lane;
    int64_t slot = 0;
    float score = -INFINITY;
    if (j < n_keys) {
      slot = slot_of(table, block_size, j);
      if (!tree.is_tree() || tree.sees(j)) score = kv.score(q_shared, slot, g, n_kv_heads, head_dim) * scale;
    }
    const float new_max = fmaxf(running_max, detail::warp_max(score));
    // No key seen yet (only a tree row's masked keys): shift by 0, e^(-inf - 0) = 0, never NaN.
    const float shift = new_max == -INFINITY ? 0.0f : new_max;
    const float correction = expf(running_max - shift);
    const float p = expf(score - shift);  // 0 for lanes past the last key and masked keys
    running_sum = running_sum * correction + detail::warp_sum(p);
#pragma unroll
    for (int c = 0; c < kDimsPerLane; ++c) acc[c] *= correction;
    const int n_valid = min(kKeysPerTile, n_keys - tile);
    for (int jj = 0; jj < n_valid; ++jj) {
      const int64_t slot_j = __shfl_sync(0xffffffffu, slot, jj);
      const float p_j = __shfl_sync(0xffffffffu, p, jj) * kv.v_scale(slot_j, g, n_kv_heads);
#pragma unroll
      for (int c = 0; c < kDimsPerLane; ++c) {
        const int d = lane + c * detail::kWarpSize;
        if (d < head_dim) acc[c] += p_j * kv.v_elem(slot_j, g, n_kv_heads, head_dim, d);
      }
    }
    running_max = new_max;
  }

  // Combine the warps. A warp that had no tile holds (-inf, 0, 0): weight e^(-inf - M) = 0.
  if (lane == 0) {
    max_shared[warp] = running_max;
    sum_shared[warp] = running_sum;
  }
#pragma unroll
  for (int c = 0; c < kDimsPerLane; ++c) {
    const int d = lane + c * detail::kWarpSize;
    if (d < head_dim) acc_shared[warp][d] = acc[c];
  }
  __syncthreads();
  float block_max = max_shared[0];  // warp 0 has the first key (a tree row's: maybe masked, -inf)
#pragma unroll
  for (int w = 1; w < kPagedWarps; ++w) block_max = fmaxf(block_max, max_shared[w]);
  float weight[kPagedWarps];
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kPagedWarps; ++w) {
    weight[w] = expf(max_shared[w] - block_max);
    total += sum_shared[w] * weight[w];
  }
  const float inv_total = 1.0f / total;
  float* out_row = out + (static_cast<int64_t>(row) * n_heads + h) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += kPagedThreads) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kPagedWarps; ++w) o += acc_shared[w][d] * weight[w];
    out_row[d] = o * inv_total;
  }
}

/// Grid: (ceil(n_tokens * n_heads / kNaiveBlockThreads)). Block: (kNaiveBlockThreads).
/// One thread per (row, head), walking positions 0 .. p in order; `out` doubles as the
/// running accumulator.
__global__ void paged_attention_naive_kernel(const float* q, const float* k_pool,
                                             const float* v_pool, float* out,
                                             const int32_t* query_start_loc,
                                             const int32_t* seq_lens,
                                             const int32_t* block_tables, int n_tokens,
                                             int n_seqs, int max_blocks_per_seq, int block_size,
                                             int n_heads, int n_kv_heads, int head_dim,
                                             float scale, int window, DraftTrees trees) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(n_tokens) * n_heads) return;
  const int row = static_cast<int>(idx / n_heads);
  const int h = static_cast<int>(idx % n_heads);
  const int g = h / (n_heads / n_kv_heads);
  const int s = find_sequence(query_start_loc, n_seqs, row);
  const int query_len = query_start_loc[s + 1] - query_start_loc[s];
  const int pos = seq_lens[s] - query_len + (row - query_start_loc[s]);
  const int32_t* table = block_tables + static_cast<int64_t>(s) * max_blocks_per_seq;
  const int64_t kv_stride = static_cast<int64_t>(n_kv_heads) * head_dim;
  const detail::TreeRow tree =
      detail::tree_row(trees, s, query_start_loc[s], query_len, row - query_start_loc[s], seq_lens[s], window);
  if (tree.is_tree()) {  // the prefix keys first .. key0 - 1, then the ancestors it sees, in key order
    const int first = tree.first_key(), n_prefix = tree.key0 - first;
    uint64_t seen = 0;
    for (int a = 0; a < 64 && tree.key0 + a <= pos; ++a)
      if (tree.sees(tree.key0 + a)) seen |= uint64_t{1} << a;
    const auto key = [&](int j) {
      if (j < n_prefix) return first + j;
      uint64_t b = seen;
      for (int k = 0; k < j - n_prefix; ++k) b &= b - 1;  // drop the lower set bits
      return tree.key0 + __ffsll(static_cast<long long>(b)) - 1;
    };
    online_softmax_attend(q + idx * head_dim, k_pool + static_cast<int64_t>(g) * head_dim,
                          v_pool + static_cast<int64_t>(g) * head_dim, kv_stride, n_prefix + __popcll(seen),
                          [&](int j) { return slot_of(table, block_size, key(j)); }, head_dim, scale,
                          out + idx * head_dim);
    return;
  }
  const int first = window > 0 ? max(0, pos + 1 - window) : 0;  // keys first .. pos
  online_softmax_attend(q + idx * head_dim, k_pool + static_cast<int64_t>(g) * head_dim,
                        v_pool + static_cast<int64_t>(g) * head_dim, kv_stride, pos + 1 - first,
                        [&](int j) { return slot_of(table, block_size, first + j); }, head_dim, scale,
                        out + idx * head_dim);
}

// ---- host launchers -----------------------------------------------------------------------------

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

/// Launches paged_attention_kernel for one layer of the pool: kv(std::true_type{}) and
/// kv(std::false_type{}) make the reader with and without 4-wide loads; kDimsPerLane from
/// head_dim. The arguments were checked by check_paged_attention_args.
template <class MakeKv>
void launch_paged(MakeKv kv, bool vec4, const float* q, float* out, const int32_t* query_start_loc,
                  const int32_t* seq_lens, const int32_t* block_tables, const PagedShape& p, float scale,
                  int64_t window, DraftTrees trees, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.n_tokens), static_cast<unsigned>(p.n_heads));
  const auto launch = [&]<int kDimsPerLane>() {
    const auto args = [&](auto reader) {
      paged_attention_kernel<kDimsPerLane, decltype(reader)><<<grid, kPagedThreads, 0, stream>>>(
          q, reader, out, query_start_loc, seq_lens, block_tables, static_cast<int>(p.n_seqs),
          static_cast<int>(p.max_blocks_per_seq), static_cast<int>(p.block_size), static_cast<int>(p.n_heads),
          static_cast<int>(p.n_kv_heads), static_cast<int>(p.head_dim), scale, static_cast<int>(window), trees);
    };
    if (vec4) {
      args(kv(std::true_type{}));
    } else {
      args(kv(std::false_type{}));
    }
  };
  if (p.head_dim <= 32) {
    launch.template operator()<1>();
  } else if (p.head_dim <= 64) {
    launch.template operator()<2>();
  } else if (p.head_dim <= 128) {
    launch.template operator()<4>();
  } else {
    launch.template operator()<8>();
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void paged_attention(const float* q, const float* k_pool, const float* v_pool, float* out,
                     const int32_t* query_start_loc, const int32_t* seq_lens,
                     const int32_t* block_tables, int64_t n_tokens, int64_t n_seqs,
                     int64_t max_blocks_per_seq, int64_t block_size, int64_t n_heads,
                     int64_t n_kv_heads, int64_t head_dim, float scale, cudaStream_t stream, int64_t window,
                     DraftTrees trees) {
  const PagedShape shape{n_tokens, n_seqs, max_blocks_per_seq, block_size,
                         n_heads,  n_kv_heads, head_dim};
  check_paged_attention_args("paged_attention", q, k_pool, v_pool, out, query_start_loc,
                             seq_lens, block_tables, shape, kPagedAttentionMaxHeadDim, scale);
  detail::check_window("paged_attention", window);
  detail::check_trees("paged_attention", trees);
  if (n_tokens == 0) return;
  // Every K row starts at (slot * n_kv_heads + g) * head_dim floats: 16-byte aligned when the
  // pool is and head_dim % 4 == 0.
  const bool vec4 = head_dim % 4 == 0 && aligned16(k_pool);
  const auto kv = [&]<bool kVec4>(std::bool_constant<kVec4>) { return F32Kv<kVec4>{k_pool, v_pool}; };
  launch_paged(kv, vec4, q, out, query_start_loc, seq_lens, block_tables, shape, scale, window, trees, stream);
}

void paged_attention_quantized(const float* q, const QuantizedKvLayer& pool, float* out,
                               const int32_t* query_start_loc, const int32_t* seq_lens,
                               const int32_t* block_tables, int64_t n_tokens, int64_t n_seqs,
                               int64_t max_blocks_per_seq, int64_t block_size, int64_t n_heads,
                               int64_t n_kv_heads, int64_t head_dim, float scale, cudaStream_t stream,
                               int64_t window, DraftTrees trees) {
  const PagedShape shape{n_tokens, n_seqs, max_blocks_per_seq, block_size, n_heads, n_kv_heads, head_dim};
  const bool int8 = pool.type == KvQuant::Int8;
  if (int8 && (pool.k_scales == nullptr || pool.v_scales == nullptr)) {
    throw InvalidArgument("cuda::paged_attention_quantized: an int8 pool needs its K and V scales (null device pointer)");
  }
  // The f32 checks read the K / V pointers only for null-ness.
  check_paged_attention_args("paged_attention_quantized", q, static_cast<const float*>(pool.k),
                             static_cast<const float*>(pool.v), out, query_start_loc, seq_lens, block_tables, shape,
                             kPagedAttentionMaxHeadDim, scale);
  detail::check_window("paged_attention_quantized", window);
  detail::check_trees("paged_attention_quantized", trees);
  if (n_tokens == 0) return;
  // A K row starts at (slot * n_kv_heads + g) * head_dim elements: aligned for 4-code (4-byte) or
  // 4-half (8-byte) loads when head_dim % 4 == 0 and the pool is 8-byte aligned.
  const bool vec4 = head_dim % 4 == 0 && reinterpret_cast<uintptr_t>(pool.k) % 8 == 0;
  if (int8) {
    const auto kv = [&]<bool kVec4>(std::bool_constant<kVec4>) {
      return Int8Kv<kVec4>{static_cast<const int8_t*>(pool.k), static_cast<const int8_t*>(pool.v), pool.k_scales,
                           pool.v_scales};
    };
    launch_paged(kv, vec4, q, out, query_start_loc, seq_lens, block_tables, shape, scale, window, trees, stream);
  } else {
    const auto kv = [&]<bool kVec4>(std::bool_constant<kVec4>) {
      return F16Kv<kVec4>{static_cast<const __half*>(pool.k), static_cast<const __half*>(pool.v)};
    };
    launch_paged(kv, vec4, q, out, query_start_loc, seq_lens, block_tables, shape, scale, window, trees, stream);
  }
}

void paged_attention_naive(const float* q, const float* k_pool, const float* v_pool, float* out,
                           const int32_t* query_start_loc, const int32_t* seq_lens,
                           const int32_t* block_tables, int64_t n_tokens, int64_t n_seqs,
                           int64_t max_blocks_per_seq, int64_t block_size, int64_t n_heads,
                           int64_t n_kv_heads, int64_t head_dim, float scale,
                           cudaStream_t stream, int64_t window, DraftTrees trees) {
  const PagedShape shape{n_tokens, n_seqs, max_blocks_per_seq, block_size,
                         n_heads,  n_kv_heads, head_dim};
  check_paged_attention_args("paged_attention_naive", q, k_pool, v_pool, out, query_start_loc,
                             seq_lens, block_tables, shape, INT_MAX, scale);
  detail::check_window("paged_attention_naive", window);
  detail::check_trees("paged_attention_naive", trees);
  if (n_tokens == 0) return;
  const int64_t n_threads = n_tokens * n_heads;
  const int64_t n_blocks = (n_threads + kNaiveBlockThreads - 1) / kNaiveBlockThreads;
  if (n_blocks > INT_MAX) {
    throw InvalidArgument("cuda::paged_attention_naive: " + std::to_string(n_threads) +
                          " (row, head) pairs exceed one launch");
  }
  paged_attention_naive_kernel<<<static_cast<unsigned>(n_blocks), kNaiveBlockThreads, 0, stream>>>(
      q, k_pool, v_pool, out, query_start_loc, seq_lens, block_tables, static_cast<int>(n_tokens),
      static_cast<int>(n_seqs), static_cast<int>(max_blocks_per_seq), static_cast<int>(block_size),
      static_cast<int>(n_heads), static_cast<int>(n_kv_heads), static_cast<int>(head_dim), scale,
      static_cast<int>(window), trees);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace lio::cuda
