// flash_attention.cu — chapter 07's f32 attention over the paged pool: FlashAttention-2 with
// Flash-Decoding's split-KV for short queries. Its naive twin, which materializes the scores,
// is naive_attention.cu; the tensor-core bf16 variant is flash_attention_mma.cu.
//
//   out[i, h] = sum_{j in K(i)} softmax_j(scale * q[i, h] . k[s, j, g]) v[s, j, g]
//   K(i) = 0 .. p(i) (causal) or 0 .. seq_lens[s] - 1,  g = h / (n_heads / n_kv_heads)
// with p(i) and the block-table slot as in paged_attention.cu (PagedAttention, Kwon et al. 2023).
//
// Flash kernel (Dao 2023, "FlashAttention-2", Algorithm 1 and sec. 3.1-3.2): a block of 128
// threads owns kVectors query vectors = Br rows of one sequence x the query heads of one KV head
// (GQA: Ainslie et al. 2023), so a K/V tile is gathered through the block table into shared
// memory once for the whole group. kThreadsPerVector threads share a vector: in S = Q K^T each
// takes every kThreadsPerVector-th key of the 32-key tile, in O += P V every kThreadsPerVector-th
// output dimension (registers). Per tile and vector (the online softmax, Milakov & Gimelshein
// 2018; FlashAttention, Dao et al. 2022, Algorithm 1 lines 9-12):
//   m_new = max(m, max_j s_j),  l = l e^(m - m_new) + sum_j e^(s_j - m_new),
//   acc = acc e^(m - m_new) + sum_j e^(s_j - m_new) v_j;  finally out = acc / l, lse = m + log l.
// Causal: key tiles past the block's last row are never loaded; every loaded key is compared
// with its row's position, which only bites on the diagonal tiles. Sliding window (Longformer,
// Beltagy et al. 2020, sec. 3.1; Gemma 3's local layers): row p sees keys p - window + 1 .. p, so
// the block's keys start at its first row's window and the tiles before it are never loaded
// either (the split below cuts only the keys the tile sees); a key before its own row's window
// is masked like one past the diagonal.
// Flash-Decoding (Dao, Haziza, Massa, Sizov 2023): for decode batches the key range is cut into
// splits walked by different blocks (grid y = query tile x split); each block writes its partial
// (m, l, acc) and flash_merge_kernel combines them per (row, head):
//   M = max_s m_s,  out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M),  lse = M + log(...).
// The host picks how many splits (to fill the card, from the batch's shape alone); each block
// cuts the keys its tile sees into that many whole-tile ranges (flash_split.cuh), so the grid
// does not depend on the context length: a decode step launches the same grid at every length.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "flash_attention_cuda.h"
#include "flash_split.cuh"
#include "lio/error.h"
#include "paged_args.h"
#include "paged_index.cuh"
#include "reduce.cuh"
#include "tree_mask.cuh"

namespace lio::cuda {

namespace {

constexpr int kFlashThreads = 128;                // 4 warps
constexpr int kKeyTile = static_cast<int>(kFlashKeyTile);  // Bc: keys per shared-memory tile
// (row, head) query vectors per block: prefill 64 (32 past head_dim 128, so a thread's share of a
// row's accumulators stays in registers and the Q tile in shared memory), decode 8 (4 when the
// group's heads times the rows fit in 4: a decode row of a GQA-3 or MQA-4 model fills 3-4 of the
// block's vectors, so 4 vectors of a warp each keep 3/4 of the threads busy instead of 3/8).
constexpr int kPrefillVectors = 64;
constexpr int kPrefillVectorsWide = 32;
constexpr int kDecodeVectors = 8;
constexpr int kDecodeVectorsSmall = 4;
constexpr int kMaxHeadDim = static_cast<int>(kFlashAttentionMaxHeadDim);
constexpr int kSlotBytes = kKeyTile * static_cast<int>(sizeof(int64_t));  // the tile's slots
constexpr int kMergeThreads = 128;
static_assert(kMaxHeadDim == 256, "launch_flash instantiates accumulators for head_dim <= 64, 128 and 256");
static_assert(kSlotBytes % 16 == 0, "the float tiles after the slots stay 16-byte aligned");

/// How a block of kFlashThreads threads divides kVectors query vectors and a key tile.
template <int kVectors>
struct FlashConfig {
  static constexpr int kThreadsPerVector = kFlashThreads / kVectors;
  static constexpr int kKeysPerThread = kKeyTile / kThreadsPerVector;
  static_assert(kFlashThreads % kVectors == 0, "whole threads per vector");
  static_assert(detail::kWarpSize % kThreadsPerVector == 0 &&
                    (kThreadsPerVector & (kThreadsPerVector - 1)) == 0,
                "a vector's threads are a power-of-two group of lanes inside one warp");
  static_assert(kKeyTile % kThreadsPerVector == 0, "whole keys per thread");
};

// ---- device helpers -----------------------------------------------------------------------------

using detail::slot_of;

/// Where the flash kernel's tiles live in its dynamic shared memory, in floats after the tile's
/// kKeyTile int64 slots. Q and K rows are padded by one float so the kThreadsPerVector-strided
/// reads of different rows fall in different banks; P rows likewise.
struct FlashSmemLayout {
  int q_stride, k_stride, v_stride, p_stride;  // floats per row
  int q_offset, k_offset, v_offset, p_offset;  // floats from the first float
  int n_floats;
  __host__ __device__ constexpr size_t bytes() const {
    return static_cast<size_t>(kSlotBytes) + static_cast<size_t>(n_floats) * sizeof(float);
  }
};

/// The layout for kVectors query vectors (Q: kVectors rows, K and V: kKeyTile rows, P: kVectors
/// rows of kKeyTile) at this head_dim.
__host__ __device__ constexpr FlashSmemLayout flash_smem_layout(int n_vectors, int head_dim) {
  FlashSmemLayout s{};
  s.q_stride = head_dim + 1;
  s.k_stride = head_dim + 1;
  s.v_stride = head_dim;
  s.p_stride = kKeyTile + 1;
  s.q_offset = 0;
  s.k_offset = s.q_offset + n_vectors * s.q_stride;
  s.v_offset = s.k_offset + kKeyTile * s.k_stride;
  s.p_offset = s.v_offset + kKeyTile * s.v_stride;
  s.n_floats = s.p_offset + n_vectors * s.p_stride;
  return s;
}

/// Maximum of v over an aligned group of kGroup lanes (a power of two dividing 32); every lane of
/// the group gets it. All 32 lanes of the warp must call it.
template <int kGroup>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int offset = kGroup / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

/// Sum of v over an aligned group of kGroup lanes; as group_max.
template <int kGroup>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int offset = kGroup / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// Everything the flash kernel reads, checked by the launcher.
struct FlashParams {
  const float* q;                  // (n_tokens, n_heads, head_dim)
  const float* k_pool;             // (n_slots, n_kv_heads, head_dim)
  const float* v_pool;             // (n_slots, n_kv_heads, head_dim)
  float* out;                      // (n_tokens, n_heads, head_dim); unused when split
  float* lse;                      // (n_tokens, n_heads) or null; unused when split
  float* partial_acc;              // split: (n_splits, n_tokens, n_heads, head_dim)
  float* partial_ml;               // split: (n_splits, n_tokens, n_heads, 2) = (m, l)
  const int32_t* query_start_loc;  // (n_seqs + 1)
  const int32_t* seq_lens;         // (n_seqs)
  const int32_t* block_tables;     // (n_seqs, max_blocks_per_seq)
  int n_tokens, max_blocks_per_seq, block_size, n_heads, n_kv_heads, head_dim;
  int heads_per_block;  // query heads of one KV head's group in a block: min(group, kVectors)
  int head_chunks;      // blocks per group: ceil(group / heads_per_block)
  int rows_per_block;   // Br = kVectors / heads_per_block
  int n_splits;         // key splits (1: none); each block cuts its keys with flash_split_range
  int window;           // sliding window (0: none): row p sees keys p - window + 1 .. p
  float scale;
  bool causal;
  DraftTrees trees;     // draft trees (null: none): a tree row sees the prefix and its ancestors
};

// ---- kernels ------------------------------------------------------------------------------------

/// Grid: (n_seqs, query tiles x n_splits, n_kv_heads x head_chunks). Block: kFlashThreads.
/// Dynamic shared memory: flash_smem_layout(kVectors, head_dim).bytes().
/// Vector r = threadIdx.x / kThreadsPerVector is (row r / heads_per_block, head r % heads_per_block)
/// of the tile: a row's heads are adjacent, as in q, so the Q tile loads coalesce.
/// kMaxDim (64, 128 or 256) >= head_dim bounds the register accumulator. kSplit: write the
/// partial (m, l, acc) of split `split`'s keys (detail::flash_split_range of the keys the tile
/// sees) instead of out and lse; a split with no keys writes only m = -inf.
template <int kVectors, int kMaxDim, bool kSplit>
__global__ void __launch_bounds__(kFlashThreads) flash_attention_kernel(FlashParams p) {
  using Config = FlashConfig<kVectors>;
  constexpr int kTpv = Config::kThreadsPerVector;
  constexpr int kKpt = Config::kKeysPerThread;
  constexpr int kDimsPerThread = kMaxDim / kTpv;
  static_assert(kMaxDim % kTpv == 0, "whole output dimensions per thread");
  extern __shared__ __align__(16) unsigned char flash_smem[];
  const int head_dim = p.head_dim;
  const FlashSmemLayout layout = flash_smem_layout(kVectors, head_dim);
  int64_t* slots = reinterpret_cast<int64_t*>(flash_smem);  // (kKeyTile) slot of each key, -1 past the end
  float* smem = reinterpret_cast<float*>(flash_smem + kSlotBytes);
  float* q_s = smem + layout.q_offset;  // (kVectors, q_stride)
  float* k_s = smem + layout.k_offset;  // (kKeyTile, k_stride)
  float* v_s = smem + layout.v_offset;  // (kKeyTile, v_stride)
  float* p_s = smem + layout.p_offset;  // (kVectors, p_stride)

  const int s = blockIdx.x;
  const int tile = blockIdx.y / p.n_splits;
  const int split = blockIdx.y % p.n_splits;
  const int g = blockIdx.z / p.head_chunks;
  const int chunk = blockIdx.z % p.head_chunks;
  const int q_start = p.query_start_loc[s];
  const int query_len = p.query_start_loc[s + 1] - q_start;
  const int row0 = tile * p.rows_per_block;  // first row of the tile, within the sequence
  if (row0 >= query_len) return;             // the whole block: the grid covers max_query_len
  const int seq_len = p.seq_lens[s];
  const int rows_here = min(p.rows_per_block, query_len - row0);
  const int group = p.n_heads / p.n_kv_heads;
  const int h_first = g * group + chunk * p.heads_per_block;
  const int heads_here = min(p.heads_per_block, group - chunk * p.heads_per_block);
  const int32_t* table = p.block_tables + static_cast<int64_t>(s) * p.max_blocks_per_seq;

  // This thread's vector. Padding vectors (no row or head) run on a zero query at the tile's
  // first position, so they see key 0 and stay finite; they write nothing.
  const int r = threadIdx.x / kTpv;
  const int sub = threadIdx.x % kTpv;
  const int row_local = r / p.heads_per_block;
  const int h_local = r % p.heads_per_block;
  const bool valid = row_local < rows_here && h_local < heads_here;
  const int pos_first = seq_len - query_len + row0;  // position of the tile's first row
  const int pos = pos_first + (valid ? row_local : 0);
  const int row_key_end = p.causal ? pos + 1 : seq_len;  // this vector sees keys < row_key_end
  const int row_key_begin = p.window > 0 ? max(0, pos - p.window + 1) : 0;  // ... and >= this
  // A draft tree's row (tree_mask.cuh): the causal rule on its linear position above is a
  // superset of what it sees; the tree mask (and its window, from its real position) decides.
  const detail::TreeRow tree =
      detail::tree_row(p.trees, s, q_start, query_len, row0 + (valid ? row_local : 0), seq_len, p.window);
  // Keys any row of the tile sees: tiles past the last row's position are skipped (causal), and
  // with a window the tiles before the first row's window (a tree row's window starts from its
  // real position, at least the tree's first key).
  const int block_key_end = p.causal ? pos_first + rows_here : seq_len;
  const int window_from = p.trees.lens != nullptr ? min(pos_first, seq_len - p.trees.lens[s]) : pos_first;
  const int block_key_begin = p.window > 0 ? max(0, window_from - p.window + 1) : 0;
  int key_begin = block_key_begin;
  int key_end = block_key_end;
  if constexpr (kSplit) {
    detail::flash_split_range(block_key_end - block_key_begin, p.n_splits, split, kKeyTile, &key_begin, &key_end);
    key_begin += block_key_begin;
    key_end += block_key_begin;
    if (key_begin >= key_end) {  // past the last key (block-uniform): nothing to load or add
      if (valid && sub == 0) {
        const int64_t vec = static_cast<int64_t>(q_start + row0 + row_local) * p.n_heads + h_first + h_local;
        p.partial_ml[2 * (static_cast<int64_t>(split) * p.n_tokens * p.n_heads + vec)] = -INFINITY;
      }
      return;
    }
  }

  for (int idx = threadIdx.x; idx < kVectors * head_dim; idx += kFlashThreads) {
    const int v = idx / head_dim;
    const int d = idx % head_dim;
    const int rl = v / p.heads_per_block;
    const int hl = v % p.heads_per_block;
    float x = 0.0f;
    if (rl < rows_here && hl < heads_here) {
      x = p.q[(static_cast<int64_t>(q_start + row0 + rl) * p.n_heads + h_first + hl) * head_dim + d];
    }
    q_s[v * layout.q_stride + d] = x;
  }

  float m = -INFINITY;  // running max of this vector's scaled scores
  float l = 0.0f;       // running sum of e^(s_j - m)
  float acc[kDimsPerThread];  // dims sub, sub + kTpv, ... of sum_j e^(s_j - m) v_j
#pragma unroll
  for (int c = 0; c < kDimsPerThread; ++c) acc[c] = 0.0f;
  const float* q_row = q_s + r * layout.q_stride;
  float* p_row = p_s + r * layout.p_stride;

  // Block-uniform loop (key_begin, key_end are the same for every thread): the barriers inside
  // are reached by all threads.
  for (int k0 = key_begin; k0 < key_end; k0 += kKeyTile) {
    __syncthreads();  // the previous tile's slots, K, V and P are no longer read (and Q is stored)
    if (threadIdx.x < kKeyTile) {
      const int key = k0 + static_cast<int>(threadIdx.x);
      slots[threadIdx.x] = key < key_end ? slot_of(table, p.block_size, key) : -1;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < kKeyTile * head_dim; idx += kFlashThreads) {
      const int j = idx / head_dim;
      const int d = idx % head_dim;
      const int64_t slot = slots[j];
      float kx = 0.0f;
      float vx = 0.0f;
      if (slot >= 0) {
        const int64_t at = (slot * p.n_kv_heads + g) * head_dim + d;
        kx = p.k_pool[at];
        vx = p.v_pool[at];
      }
      k_s[j * layout.k_stride + d] = kx;
      v_s[j * layout.v_stride + d] = vx;
    }
    __syncthreads();

    // S: this thread's keys sub, sub + kTpv, ... of the tile, dot products in index order.
    float score[kKpt];
#pragma unroll
    for (int jj = 0; jj < kKpt; ++jj) score[jj] = 0.0f;
    for (int d = 0; d < head_dim; ++d) {
      const float qd = q_row[d];
#pragma unroll
      for (int jj = 0; jj < kKpt; ++jj) score[jj] += qd * k_s[(sub + kTpv * jj) * layout.k_stride + d];
    }
    float tile_max = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < kKpt; ++jj) {
      const int key = k0 + sub + kTpv * jj;
      const bool seen = key < key_end && key < row_key_end && (tree.is_tree() ? tree.sees(key) : key >= row_key_begin);
      score[jj] = seen ? score[jj] * p.scale : -INFINITY;
      tile_max = fmaxf(tile_max, score[jj]);
    }
    tile_max = group_max<kTpv>(tile_max);
    const float m_new = fmaxf(m, tile_max);
    // A vector that has seen no key yet (a split past its position) keeps m = -inf: shift by 0
    // so that e^(-inf - shift) = 0 instead of e^(-inf + inf) = NaN (FlashAttention-2's Check_inf).
    const float shift = m_new == -INFINITY ? 0.0f : m_new;
    const float correction = expf(m - shift);
    float tile_sum = 0.0f;
#pragma unroll
    for (int jj = 0; jj < kKpt; ++jj) {
      const float pj = expf(score[jj] - shift);
      tile_sum += pj;
      p_row[sub + kTpv * jj] = pj;
    }
    l = l * correction + group_sum<kTpv>(tile_sum);
    m = m_new;
#pragma unroll
    for (int c = 0; c < kDimsPerThread; ++c) acc[c] *= correction;
    __syncwarp();  // P of vector r was written by its kTpv lanes, all in this warp

    // O += P V over the tile's keys; this thread's dims sub, sub + kTpv, ...
    const int n_tile_keys = min(kKeyTile, key_end - k0);
    for (int j = 0; j < n_tile_keys; ++j) {
      const float pj = p_row[j];
      const float* v_row = v_s + j * layout.v_stride;
#pragma unroll
      for (int c = 0; c < kDimsPerThread; ++c) {
        const int d = sub + kTpv * c;
        if (d < head_dim) acc[c] += pj * v_row[d];
      }
    }
  }

  if (!valid) return;
  const int64_t vec = static_cast<int64_t>(q_start + row0 + row_local) * p.n_heads + h_first + h_local;
  if constexpr (kSplit) {
    const int64_t part = static_cast<int64_t>(split) * p.n_tokens * p.n_heads + vec;
    float* part_acc = p.partial_acc + part * head_dim;
#pragma unroll
    for (int c = 0; c < kDimsPerThread; ++c) {
      const int d = sub + kTpv * c;
      if (d < head_dim) part_acc[d] = acc[c];
    }
    if (sub == 0) {
      p.partial_ml[2 * part] = m;
      p.partial_ml[2 * part + 1] = l;
    }
  } else {
    float* out_row = p.out + vec * head_dim;
#pragma unroll
    for (int c = 0; c < kDimsPerThread; ++c) {
      const int d = sub + kTpv * c;
      if (d < head_dim) out_row[d] = acc[c] / l;
    }
    if (sub == 0 && p.lse != nullptr) p.lse[vec] = m + logf(l);
  }
}

/// Grid: (n_tokens * n_heads). Block: kMergeThreads. Flash-Decoding's reduction of one (row, head)
/// over its n_splits partials; a split that saw no key has m = -inf and weight 0, and is skipped
/// (an empty split writes only m). The split holding the row's own position has a finite m, so M
/// is finite.
__global__ void __launch_bounds__(kMergeThreads)
flash_merge_kernel(const float* partial_acc,  // (n_splits, n_vectors, head_dim)
                   const float* partial_ml,   // (n_splits, n_vectors, 2)
                   float* out,                // (n_vectors, head_dim)
                   float* lse,                // (n_vectors) or null
                   int64_t n_vectors, int n_splits, int head_dim) {
  const int64_t vec = blockIdx.x;
  float big_m = -INFINITY;
  for (int sp = 0; sp < n_splits; ++sp) big_m = fmaxf(big_m, partial_ml[2 * (sp * n_vectors + vec)]);
  float big_l = 0.0f;
  for (int sp = 0; sp < n_splits; ++sp) {
    const int64_t part = sp * n_vectors + vec;
    const float m = partial_ml[2 * part];
    if (m != -INFINITY) big_l += partial_ml[2 * part + 1] * expf(m - big_m);
  }
  for (int d = threadIdx.x; d < head_dim; d += kMergeThreads) {
    float o = 0.0f;
    for (int sp = 0; sp < n_splits; ++sp) {
      const int64_t part = sp * n_vectors + vec;
      const float m = partial_ml[2 * part];
      if (m != -INFINITY) o += partial_acc[part * head_dim + d] * expf(m - big_m);
    }
    out[vec * head_dim + d] = o / big_l;
  }
  if (threadIdx.x == 0 && lse != nullptr) lse[vec] = big_m + logf(big_l);
}

// ---- host launchers -----------------------------------------------------------------------------

/// Dynamic shared memory a kernel may use without opting in (CUDA C++ Programming Guide,
/// "Shared Memory": 48 KiB; sm_80 / sm_90 allow up to 163 / 227 KiB per block after opting in).
constexpr size_t kDefaultSmemBytes = 48 * 1024;

/// Every (vectors, accumulator width) the launcher instantiates, with the head_dims it serves.
/// Prefill: 64 vectors up to head_dim 128, 32 beyond; decode: 4 or 8 vectors at every width.
template <int kVectors, int kMaxDim>
constexpr bool kFlashInstantiated = (kVectors == kPrefillVectors && kMaxDim <= 128) ||
                                    (kVectors == kPrefillVectorsWide && kMaxDim == 256) ||
                                    kVectors == kDecodeVectors || kVectors == kDecodeVectorsSmall;

/// Opts kernel<kVectors, kMaxDim, *> in to the dynamic shared memory of its widest head_dim (a
/// function attribute, set once per workspace by configure_flash_kernels, never per launch).
template <int kVectors, int kMaxDim>
void opt_in_smem(FlashWorkspace& ws, int device_max_bytes) {
  if constexpr (kFlashInstantiated<kVectors, kMaxDim>) {
    // A GPU with less shared memory per block than the widest head_dim needs still runs the
    // narrower ones: opt in to what it has (launch_flash_kernel refuses a tile past it).
    const size_t bytes = std::min(flash_smem_layout(kVectors, kMaxDim).bytes(), static_cast<size_t>(device_max_bytes));
    if (bytes <= kDefaultSmemBytes) return;
    for (const auto kernel : {flash_attention_kernel<kVectors, kMaxDim, true>,
                              flash_attention_kernel<kVectors, kMaxDim, false>}) {
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
      ++ws.attribute_sets;
    }
  }
}

/// First use of a workspace (or configure_flash_attention): reads the device's SM count (the
/// split rule's input) and sets the shared-memory attribute of every kernel that needs more than
/// 48 KiB, so no launch (and no step a CUDA graph captures) calls cudaFuncSetAttribute.
void configure_flash_kernels(FlashWorkspace& ws) {
  if (ws.configured) return;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&ws.sm_count, cudaDevAttrMultiProcessorCount, device));
  int max_smem = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  ws.max_smem_bytes = std::max<int64_t>(max_smem, static_cast<int64_t>(kDefaultSmemBytes));
  opt_in_smem<kPrefillVectors, 64>(ws, max_smem);
  opt_in_smem<kPrefillVectors, 128>(ws, max_smem);
  opt_in_smem<kPrefillVectorsWide, 256>(ws, max_smem);
  opt_in_smem<kDecodeVectors, 64>(ws, max_smem);
  opt_in_smem<kDecodeVectors, 128>(ws, max_smem);
  opt_in_smem<kDecodeVectors, 256>(ws, max_smem);
  opt_in_smem<kDecodeVectorsSmall, 64>(ws, max_smem);
  opt_in_smem<kDecodeVectorsSmall, 128>(ws, max_smem);
  opt_in_smem<kDecodeVectorsSmall, 256>(ws, max_smem);
  ws.configured = true;
}

/// Launches flash_attention_kernel<kVectors, kMaxDim, split> on `grid` (the attribute it may
/// need was set by configure_flash_kernels). Throws UnsupportedError when the tile needs more
/// shared memory than the GPU gives a block.
template <int kVectors, int kMaxDim>
void launch_flash_kernel(const FlashParams& p, dim3 grid, bool split, int64_t max_smem_bytes, cudaStream_t stream) {
  static_assert(kFlashInstantiated<kVectors, kMaxDim>, "launch_flash picks only configured kernels");
  const size_t smem_bytes = flash_smem_layout(kVectors, p.head_dim).bytes();
  if (static_cast<int64_t>(smem_bytes) > max_smem_bytes) {
    throw UnsupportedError("cuda::flash_attention: a tile of " + std::to_string(kVectors) + " query vectors at head_dim " +
                           std::to_string(p.head_dim) + " needs " + std::to_string(smem_bytes) +
                           " bytes of shared memory; this GPU gives a block " + std::to_string(max_smem_bytes) +
                           " (use --attention-backend paged)");
  }
  if (split) {
    flash_attention_kernel<kVectors, kMaxDim, true><<<grid, kFlashThreads, smem_bytes, stream>>>(p);
  } else {
    flash_attention_kernel<kVectors, kMaxDim, false><<<grid, kFlashThreads, smem_bytes, stream>>>(p);
  }
  CUDA_CHECK(cudaGetLastError());
}

/// launch_flash_kernel with the register accumulator sized for head_dim (<= 64, 128 or 256).
template <int kVectors>
void launch_flash(const FlashParams& p, dim3 grid, bool split, int64_t max_smem_bytes, cudaStream_t stream) {
  if (p.head_dim <= 64) {
    launch_flash_kernel<kVectors, 64>(p, grid, split, max_smem_bytes, stream);
  } else if (p.head_dim <= 128) {
    launch_flash_kernel<kVectors, 128>(p, grid, split, max_smem_bytes, stream);
  } else {
    launch_flash_kernel<kVectors, 256>(p, grid, split, max_smem_bytes, stream);
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check_heads(const char* op, int64_t n_heads, int64_t n_kv_heads) {
  if (n_kv_heads <= 0 || n_heads <= 0 || n_heads % n_kv_heads != 0) {
    throw InvalidArgument(std::string("cuda::") + op + ": need n_heads a positive multiple of n_kv_heads > 0, got " +
                          std::to_string(n_heads) + " and " + std::to_string(n_kv_heads));
  }
}

void check_rule_args(const char* op, int64_t max_query_len, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim) {
  check_heads(op, n_heads, n_kv_heads);
  if (max_query_len < 1 || head_dim < 1 || head_dim > kFlashAttentionMaxHeadDim) {
    throw InvalidArgument(std::string("cuda::") + op + ": need max_query_len >= 1 and 0 < head_dim <= " +
                          std::to_string(kFlashAttentionMaxHeadDim) + ", got " + std::to_string(max_query_len) +
                          " and " + std::to_string(head_dim));
  }
}

/// The tiling of one launch, from the batch's shape alone.
struct FlashTiling {
  int64_t vectors, heads_per_block, head_chunks, rows_per_block;
};

FlashTiling flash_tiling(int64_t max_query_len, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim) {
  FlashTiling t{};
  t.vectors = flash_attention_vectors_per_block(max_query_len, n_heads, n_kv_heads, head_dim);
  const int64_t group = n_heads / n_kv_heads;
  t.heads_per_block = std::min(group, t.vectors);
  t.head_chunks = ceil_div(group, t.heads_per_block);
  t.rows_per_block = t.vectors / t.heads_per_block;
  return t;
}

}  // namespace

void configure_flash_attention(FlashWorkspace& workspace) { configure_flash_kernels(workspace); }

int64_t flash_attention_vectors_per_block(int64_t max_query_len, int64_t n_heads, int64_t n_kv_heads,
                                          int64_t head_dim) {
  check_rule_args("flash_attention_vectors_per_block", max_query_len, n_heads, n_kv_heads, head_dim);
  if (max_query_len <= kFlashDecodeMaxQueryLen) {
    return (n_heads / n_kv_heads) * max_query_len <= kDecodeVectorsSmall ? kDecodeVectorsSmall : kDecodeVectors;
  }
  return head_dim > 128 ? kPrefillVectorsWide : kPrefillVectors;
}

int64_t flash_attention_rows_per_block(int64_t max_query_len, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim) {
  check_rule_args("flash_attention_rows_per_block", max_query_len, n_heads, n_kv_heads, head_dim);
  return flash_tiling(max_query_len, n_heads, n_kv_heads, head_dim).rows_per_block;
}

int64_t flash_attention_splits(int64_t max_query_len, int64_t n_seqs, int64_t n_heads, int64_t n_kv_heads,
                               int64_t head_dim, int64_t sm_count) {
  check_rule_args("flash_attention_splits", max_query_len, n_heads, n_kv_heads, head_dim);
  if (n_seqs < 1 || sm_count < 1) {
    throw InvalidArgument("cuda::flash_attention_splits: n_seqs and sm_count must be >= 1, got " +
                          std::to_string(n_seqs) + " and " + std::to_string(sm_count));
  }
  if (max_query_len > kFlashDecodeMaxQueryLen) return 1;
  const FlashTiling t = flash_tiling(max_query_len, n_heads, n_kv_heads, head_dim);
  const int64_t blocks = n_seqs * ceil_div(max_query_len, t.rows_per_block) * n_kv_heads * t.head_chunks;
  return std::clamp<int64_t>(ceil_div(2 * sm_count, blocks), 1, kFlashMaxSplits);
}

int64_t flash_attention_workspace_floats(int64_t n_splits, int64_t n_tokens, int64_t n_heads, int64_t head_dim) {
  if (n_splits < 1 || n_tokens < 0 || n_heads < 1 || head_dim < 1) {
    throw InvalidArgument("cuda::flash_attention_workspace_floats: need n_splits, n_heads, head_dim >= 1 and "
                          "n_tokens >= 0");
  }
  return n_splits > 1 ? n_splits * n_tokens * n_heads * (head_dim + 2) : 0;
}

void flash_attention(const float* q, const float* k_pool, const float* v_pool, float* out, float* lse,
                     const int32_t* query_start_loc, const int32_t* seq_lens, const int32_t* block_tables,
                     int64_t n_tokens, int64_t n_seqs, int64_t max_blocks_per_seq, int64_t block_size,
                     int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, bool causal,
                     int64_t max_query_len, FlashWorkspace& workspace, cudaStream_t stream, bool split_kv,
                     int64_t window, DraftTrees trees) {
  const detail::PagedShape shape{n_tokens, n_seqs, max_blocks_per_seq, block_size, n_heads, n_kv_heads, head_dim};
  detail::check_paged_attention_args("flash_attention", q, k_pool, v_pool, out, query_start_loc, seq_lens,
                                     block_tables, shape, kFlashAttentionMaxHeadDim, scale);
  detail::check_flash_attention_args("flash_attention", shape, max_query_len);
  detail::check_window("flash_attention", window, causal);
  detail::check_trees("flash_attention", trees, causal);
  if (n_tokens == 0) return;

  configure_flash_kernels(workspace);
  const FlashTiling t = flash_tiling(max_query_len, n_heads, n_kv_heads, head_dim);
  const int64_t n_tiles = ceil_div(max_query_len, t.rows_per_block);
  const int64_t n_splits = split_kv ? flash_attention_splits(max_query_len, n_seqs, n_heads, n_kv_heads, head_dim,
                                                             workspace.sm_count)
                                    : 1;
  if (n_tiles * n_splits > 65535 || n_kv_heads * t.head_chunks > 65535) {
    throw InvalidArgument("cuda::flash_attention: the grid's y (query tiles x splits = " +
                          std::to_string(n_tiles * n_splits) + ") or z (KV heads x head chunks = " +
                          std::to_string(n_kv_heads * t.head_chunks) + ") exceeds 65535");
  }

  FlashParams p{};
  p.q = q;
  p.k_pool = k_pool;
  p.v_pool = v_pool;
  p.out = out;
  p.lse = lse;
  p.query_start_loc = query_start_loc;
  p.seq_lens = seq_lens;
  p.block_tables = block_tables;
  p.n_tokens = static_cast<int>(n_tokens);
  p.max_blocks_per_seq = static_cast<int>(max_blocks_per_seq);
  p.block_size = static_cast<int>(block_size);
  p.n_heads = static_cast<int>(n_heads);
  p.n_kv_heads = static_cast<int>(n_kv_heads);
  p.head_dim = static_cast<int>(head_dim);
  p.heads_per_block = static_cast<int>(t.heads_per_block);
  p.head_chunks = static_cast<int>(t.head_chunks);
  p.rows_per_block = static_cast<int>(t.rows_per_block);
  p.n_splits = static_cast<int>(n_splits);
  p.window = static_cast<int>(window);
  p.scale = scale;
  p.causal = causal;
  p.trees = trees;
  const bool split = n_splits > 1;
  const int64_t n_vectors = n_tokens * n_heads;
  if (split) {
    // Sized at start-up by the owner (CudaBackend::reserve) so a step does not allocate; grows
    // here (synchronizing the stream) only past that size.
    const int64_t floats = flash_attention_workspace_floats(n_splits, n_tokens, n_heads, head_dim);
    if (workspace.partials.n_elems() < floats) ++workspace.grows;
    ensure(workspace.partials, floats, stream);
    p.partial_acc = workspace.partials.data();
    p.partial_ml = p.partial_acc + n_splits * n_vectors * head_dim;
  }
  const dim3 grid(static_cast<unsigned>(n_seqs), static_cast<unsigned>(n_tiles * n_splits),
                  static_cast<unsigned>(n_kv_heads * t.head_chunks));
  const int64_t smem = workspace.max_smem_bytes;
  switch (t.vectors) {
    case kDecodeVectorsSmall:
      launch_flash<kDecodeVectorsSmall>(p, grid, split, smem, stream);
      break;
    case kDecodeVectors:
      launch_flash<kDecodeVectors>(p, grid, split, smem, stream);
      break;
    case kPrefillVectorsWide:
      launch_flash_kernel<kPrefillVectorsWide, 256>(p, grid, split, smem, stream);
      break;
    default:
      if (head_dim <= 64) {
        launch_flash_kernel<kPrefillVectors, 64>(p, grid, split, smem, stream);
      } else {
        launch_flash_kernel<kPrefillVectors, 128>(p, grid, split, smem, stream);
      }
  }
  if (split) {
    flash_merge_kernel<<<static_cast<unsigned>(n_vectors), kMergeThreads, 0, stream>>>(
        p.partial_acc, p.partial_ml, out, lse, n_vectors, p.n_splits, p.head_dim);
    CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace lio::cuda
