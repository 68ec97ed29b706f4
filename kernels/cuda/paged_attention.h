// paged_attention.h — chapter 04's paged attention on the GPU (paged_attention.cu): a batch of
// prefill chunks and decode rows over the block tables, f32 or quantized pools (quantized_kv.h),
// and the naive twin.
//
// Launcher conventions (README.md in this folder): device pointers, an explicit stream, shapes
// checked on the host (lio::InvalidArgument), launches checked (lio::cuda::CudaError).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "draft_tree.h"
#include "quantized_kv.h"

namespace lio::cuda {

/// Largest head_dim paged_attention() accepts: a lane keeps head_dim / 32 output elements in
/// registers (8 at 256) and q lives in static shared memory. Real models use 64..256.
inline constexpr int64_t kPagedAttentionMaxHeadDim = 256;

/// Paged causal grouped-query attention over a batch mixing prefill chunks and decode rows
/// (PagedAttention, Kwon et al. 2023, sec. 4.1; the varlen layout of vLLM v1 /
/// FlashAttention's flash_attn_varlen_func):
///   q, out: (n_tokens, n_heads, head_dim); k_pool, v_pool: one layer,
///   (n_slots, n_kv_heads, head_dim) = (n_blocks, block_size, n_kv_heads, head_dim);
///   query_start_loc: (n_seqs + 1) row offsets, [0] = 0, ascending, [n_seqs] = n_tokens;
///   seq_lens: (n_seqs) cached + new tokens of each sequence;
///   block_tables: (n_seqs, max_blocks_per_seq) block ids; all device pointers, int32.
/// Row i of sequence s (query_start_loc[s] <= i < query_start_loc[s+1]) is at position
/// p = seq_lens[s] - query_len(s) + (i - query_start_loc[s]) and attends to positions 0 .. p of
/// s; position j lives at slot block_tables[s * max_blocks_per_seq + j / block_size] *
/// block_size + j % block_size. Head h reads KV head h / (n_heads / n_kv_heads) (GQA, Ainslie
/// et al. 2023). out = softmax(scale * q.k) v, max-subtracted, in f32. The K/V of the batch's own
/// rows must already be in the pool (kv_append first). out must not overlap q or the pool.
/// Work layout: one block of 4 warps per (row, head); warp w takes key tiles w, w + 4, ... of 32
/// keys, lane = key: each lane computes its key's full score (q broadcast from shared memory),
/// the warp updates a running max / sum (online softmax, Milakov & Gimelshein 2018), then adds
/// p_j v_j with lanes over head_dim (coalesced V rows). The four warps' (max, sum, acc) merge in
/// shared memory at the end (FlashAttention-2's split over keys, Dao 2023, sec. 3.1). Nothing
/// grows with the context: no shared-memory limit on its length.
/// The index arrays' contents are NOT checked on the device (ForwardBatch::validate checks
/// them on the host: ascending query_start_loc, query_len(s) <= seq_lens[s], block ids in the
/// pool, tables long enough).
/// Preconditions (throw InvalidArgument): non-null pointers; 0 <= n_tokens <= INT32_MAX (0
/// launches nothing); n_seqs >= 1 when n_tokens > 0; max_blocks_per_seq >= 1; block_size >= 1;
/// max_blocks_per_seq * block_size <= INT32_MAX; n_kv_heads > 0; n_heads a multiple of
/// n_kv_heads and <= 65535; 0 < head_dim <= kPagedAttentionMaxHeadDim; scale finite.
/// Sliding window (Longformer, Beltagy et al. 2020, sec. 3.1; Gemma 3's local layers): with
/// window > 0, row p attends to positions max(0, p - window + 1) .. p only, and the key loop
/// starts at the window's first key (nothing before it is read); 0 = every earlier position.
/// InvalidArgument for window < 0 or > INT32_MAX.
/// Draft trees (`trees`, DraftTrees; tree verification, issue 63): a tree row sees the keys
/// before its tree and its ancestors' only, its window counted from its real position.
/// Throws CudaError if the launch fails.
void paged_attention(const float* q, const float* k_pool, const float* v_pool, float* out,
                     const int32_t* query_start_loc, const int32_t* seq_lens,
                     const int32_t* block_tables, int64_t n_tokens, int64_t n_seqs,
                     int64_t max_blocks_per_seq, int64_t block_size, int64_t n_heads,
                     int64_t n_kv_heads, int64_t head_dim, float scale, cudaStream_t stream,
                     int64_t window = 0, DraftTrees trees = {});

/// Same contract as paged_attention() (any head_dim > 0); one thread per (row, head): it finds
/// its sequence by binary search over query_start_loc, then walks positions 0 .. p in order
/// with the running-max softmax of cpu::attention_reference, `out` doubling as the accumulator —
/// the literal loop (a draft tree's row: over the keys it sees, in key order). The reference
/// paged_attention() is tested against.
void paged_attention_naive(const float* q, const float* k_pool, const float* v_pool, float* out,
                           const int32_t* query_start_loc, const int32_t* seq_lens,
                           const int32_t* block_tables, int64_t n_tokens, int64_t n_seqs,
                           int64_t max_blocks_per_seq, int64_t block_size, int64_t n_heads,
                           int64_t n_kv_heads, int64_t head_dim, float scale,
                           cudaStream_t stream, int64_t window = 0, DraftTrees trees = {});

/// paged_attention() over an f16 or int8 pool: the same rows, heads, index arrays and work
/// layout, with K and V dequantized as they are read (vLLM's fp8 KV cache and its
/// kv_cache_dtype do the same in their paged attention kernels). For Int8 the key scale
/// multiplies the q . codes dot product once per key and the value scale p_j once per key.
/// Same preconditions (and sliding `window`, draft `trees`) as paged_attention() plus a non-null pool (pool.k,
/// pool.v, and the scales for Int8); throws InvalidArgument otherwise, CudaError if the launch
/// fails.
void paged_attention_quantized(const float* q, const QuantizedKvLayer& pool, float* out,
                               const int32_t* query_start_loc, const int32_t* seq_lens,
                               const int32_t* block_tables, int64_t n_tokens, int64_t n_seqs,
                               int64_t max_blocks_per_seq, int64_t block_size, int64_t n_heads,
                               int64_t n_kv_heads, int64_t head_dim, float scale, cudaStream_t stream,
                               int64_t window = 0, DraftTrees trees = {});

}  // namespace lio::cuda
