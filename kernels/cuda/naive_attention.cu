// naive_attention.cu — chapter 07's naive twin of flash_attention (flash_attention.cu): standard
// attention over the paged f32 pool, the score matrix materialized (Vaswani et al. 2017, eq. 1;
// "standard attention implementation", Dao et al. 2022, Algorithm 0).
//
// For each sequence s in turn, three launches:
//   1. S[h, i, j] = scale q[i, h] . k[s, j, g]  (n_heads, query_len, n_keys) in global memory,
//      -inf above the diagonal when causal — one thread per score;
//   2. each row softmaxed in place (max subtracted) and its lse written — one block per row;
//   3. out[i, h] = sum_j P[h, i, j] v[s, j, g] — one thread per output element.
// S needs n_heads x query_len x n_keys floats: the O(N^2) memory FlashAttention removes. One
// buffer serves every sequence in turn, sized for the largest (the caller's bound, or
// max_query_len x the longest context the block tables can hold).
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "flash_attention_cuda.h"
#include "lio/error.h"
#include "paged_args.h"
#include "paged_index.cuh"
#include "reduce.cuh"
#include "tree_mask.cuh"

namespace lio::cuda {

namespace {

constexpr int kNaiveThreads = 256;

using detail::slot_of;

// ---- kernels ------------------------------------------------------------------------------------

/// What the naive kernels read: the batch and, for sequence `s`, where S lives.
struct NaiveParams {
  const float* q;                  // (n_tokens, n_heads, head_dim)
  const float* k_pool;             // (n_slots, n_kv_heads, head_dim)
  const float* v_pool;
  float* out;                      // (n_tokens, n_heads, head_dim)
  float* lse;                      // (n_tokens, n_heads) or null
  float* scores;                   // S of sequence s: (n_heads, query_len, n_keys)
  const int32_t* query_start_loc;  // (n_seqs + 1)
  const int32_t* seq_lens;         // (n_seqs)
  const int32_t* block_tables;     // (n_seqs, max_blocks_per_seq)
  int s, max_blocks_per_seq, block_size, n_heads, n_kv_heads, head_dim;
  int window;                      // sliding window (0: none): row p sees keys p - window + 1 .. p
  float scale;
  bool causal;
  DraftTrees trees;                // draft trees (null: none; tree_mask.cuh)
};

/// Grid: ceil(n_heads x max(query_len x n_keys) / kNaiveThreads). One thread per score of
/// sequence p.s: S[h, i, j] = scale q[i, h] . k[j, g], -inf above the diagonal when causal and
/// before row i's sliding window.
__global__ void naive_scores_kernel(NaiveParams p) {
  const int q_start = p.query_start_loc[p.s];
  const int query_len = p.query_start_loc[p.s + 1] - q_start;
  const int n_keys = p.seq_lens[p.s];
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(p.n_heads) * query_len * n_keys) return;
  const int j = static_cast<int>(idx % n_keys);
  const int i = static_cast<int>((idx / n_keys) % query_len);
  const int h = static_cast<int>(idx / n_keys / query_len);
  const int pos = n_keys - query_len + i;
  const detail::TreeRow tree = detail::tree_row(p.trees, p.s, q_start, query_len, i, n_keys, p.window);
  if (tree.is_tree() ? !detail::row_sees(tree, pos, p.window, j)
                     : (p.causal && j > pos) || (p.window > 0 && j <= pos - p.window)) {
    p.scores[idx] = -INFINITY;
    return;
  }
  const int g = h / (p.n_heads / p.n_kv_heads);
  const int64_t slot = slot_of(p.block_tables + static_cast<int64_t>(p.s) * p.max_blocks_per_seq, p.block_size, j);
  const float* q_row = p.q + (static_cast<int64_t>(q_start + i) * p.n_heads + h) * p.head_dim;
  const float* k_row = p.k_pool + (slot * p.n_kv_heads + g) * p.head_dim;
  float dot = 0.0f;
  for (int d = 0; d < p.head_dim; ++d) dot += q_row[d] * k_row[d];
  p.scores[idx] = dot * p.scale;
}

/// Grid: (max_query_len, n_heads). Block: kNaiveThreads. Row (h, i) of S softmaxed in place
/// (max subtracted; the row's own key is never masked, so the max is finite), and its lse.
__global__ void __launch_bounds__(kNaiveThreads) naive_softmax_kernel(NaiveParams p) {
  const int q_start = p.query_start_loc[p.s];
  const int query_len = p.query_start_loc[p.s + 1] - q_start;
  const int n_keys = p.seq_lens[p.s];
  const int i = blockIdx.x;
  const int h = blockIdx.y;
  if (i >= query_len) return;  // the whole block
  float* row = p.scores + (static_cast<int64_t>(h) * query_len + i) * n_keys;
  float local_max = -INFINITY;
  for (int j = threadIdx.x; j < n_keys; j += kNaiveThreads) local_max = fmaxf(local_max, row[j]);
  const float row_max = detail::block_max<kNaiveThreads>(local_max);
  float local_sum = 0.0f;
  for (int j = threadIdx.x; j < n_keys; j += kNaiveThreads) {
    const float e = expf(row[j] - row_max);
    row[j] = e;
    local_sum += e;
  }
  const float row_sum = detail::block_sum<kNaiveThreads>(local_sum);
  for (int j = threadIdx.x; j < n_keys; j += kNaiveThreads) row[j] /= row_sum;  // own elements
  if (threadIdx.x == 0 && p.lse != nullptr) {
    p.lse[static_cast<int64_t>(q_start + i) * p.n_heads + h] = row_max + logf(row_sum);
  }
}

/// Grid: ceil(max_query_len x n_heads x head_dim / kNaiveThreads). One thread per output
/// element: out[i, h, d] = sum_j P[h, i, j] v[j, g, d] over the keys row i may see.
__global__ void naive_pv_kernel(NaiveParams p) {
  const int q_start = p.query_start_loc[p.s];
  const int query_len = p.query_start_loc[p.s + 1] - q_start;
  const int n_keys = p.seq_lens[p.s];
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(query_len) * p.n_heads * p.head_dim) return;
  const int d = static_cast<int>(idx % p.head_dim);
  const int h = static_cast<int>((idx / p.head_dim) % p.n_heads);
  const int i = static_cast<int>(idx / p.head_dim / p.n_heads);
  const int g = h / (p.n_heads / p.n_kv_heads);
  const int key_end = p.causal ? n_keys - query_len + i + 1 : n_keys;  // P is 0 past it
  int key_begin = p.window > 0 ? max(0, key_end - p.window) : 0;  // ... and before it
  const detail::TreeRow tree = detail::tree_row(p.trees, p.s, q_start, query_len, i, n_keys, p.window);
  if (tree.is_tree()) key_begin = tree.first_key();  // a tree row's window: from its real position
  const float* p_row = p.scores + (static_cast<int64_t>(h) * query_len + i) * n_keys;
  const int32_t* table = p.block_tables + static_cast<int64_t>(p.s) * p.max_blocks_per_seq;
  float o = 0.0f;
  for (int j = key_begin; j < key_end; ++j) {
    o += p_row[j] * p.v_pool[(slot_of(table, p.block_size, j) * p.n_kv_heads + g) * p.head_dim + d];
  }
  p.out[(static_cast<int64_t>(q_start + i) * p.n_heads + h) * p.head_dim + d] = o;
}

// ---- host launcher ------------------------------------------------------------------------------

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int64_t naive_attention(const float* q, const float* k_pool, const float* v_pool, float* out, float* lse,
                        const int32_t* query_start_loc, const int32_t* seq_lens, const int32_t* block_tables,
                        int64_t n_tokens, int64_t n_seqs, int64_t max_blocks_per_seq, int64_t block_size,
                        int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, bool causal,
                        int64_t max_query_len, DeviceBuffer<float>& scores, cudaStream_t stream,
                        int64_t max_scores_per_head, int64_t window, DraftTrees trees) {
  const detail::PagedShape shape{n_tokens, n_seqs, max_blocks_per_seq, block_size, n_heads, n_kv_heads, head_dim};
  detail::check_paged_attention_args("naive_attention", q, k_pool, v_pool, out, query_start_loc, seq_lens,
                                     block_tables, shape, kFlashAttentionMaxHeadDim, scale);
  detail::check_flash_attention_args("naive_attention", shape, max_query_len);
  detail::check_window("naive_attention", window, causal);
  detail::check_trees("naive_attention", trees, causal);
  if (n_tokens == 0) return 0;
  const int64_t max_context = max_blocks_per_seq * block_size;
  if (max_query_len > INT64_MAX / 4 / max_context / n_heads) {
    throw InvalidArgument("cuda::naive_attention: the score matrix (n_heads x max_query_len x max_context) "
                          "overflows int64 bytes");
  }
  const int64_t bound = max_query_len * max_context;  // per head
  if (max_scores_per_head < 0 || max_scores_per_head > bound) {
    throw InvalidArgument("cuda::naive_attention: max_scores_per_head must be in [0, max_query_len x max_context = " +
                          std::to_string(bound) + "], got " + std::to_string(max_scores_per_head));
  }
  const int64_t score_floats = n_heads * (max_scores_per_head > 0 ? max_scores_per_head : bound);
  const int64_t score_blocks = ceil_div(score_floats, kNaiveThreads);
  const int64_t pv_blocks = ceil_div(max_query_len * n_heads * head_dim, kNaiveThreads);
  if (score_blocks > INT_MAX || pv_blocks > INT_MAX) {
    throw InvalidArgument("cuda::naive_attention: " + std::to_string(score_floats) +
                          " scores exceed one launch");
  }
  ensure(scores, score_floats, stream);
  NaiveParams p{q,
                k_pool,
                v_pool,
                out,
                lse,
                scores.data(),
                query_start_loc,
                seq_lens,
                block_tables,
                0,
                static_cast<int>(max_blocks_per_seq),
                static_cast<int>(block_size),
                static_cast<int>(n_heads),
                static_cast<int>(n_kv_heads),
                static_cast<int>(head_dim),
                static_cast<int>(window),
                scale,
                causal,
                trees};
  for (int64_t s = 0; s < n_seqs; ++s) {  // one S at a time: the buffer holds the largest
    p.s = static_cast<int>(s);
    naive_scores_kernel<<<static_cast<unsigned>(score_blocks), kNaiveThreads, 0, stream>>>(p);
    CUDA_CHECK(cudaGetLastError());
    naive_softmax_kernel<<<dim3(static_cast<unsigned>(max_query_len), static_cast<unsigned>(n_heads)),
                           kNaiveThreads, 0, stream>>>(p);
    CUDA_CHECK(cudaGetLastError());
    naive_pv_kernel<<<static_cast<unsigned>(pv_blocks), kNaiveThreads, 0, stream>>>(p);
    CUDA_CHECK(cudaGetLastError());
  }
  return score_floats * static_cast<int64_t>(sizeof(float));
}

}  // namespace lio::cuda
