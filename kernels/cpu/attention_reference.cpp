// attention_reference.cpp — the reference causal grouped-query attention on the CPU (see
// attention_reference.h: the oracle of the attention kernels, not the engine's path): over a
// contiguous KV cache (attention_reference) and over a paged KV pool through block tables
// (paged_attention_reference).
//
// For query row i at absolute position p and head h (KV head g = h / group):
//   s_j = scale * q[i,h] . k[j,g]   for j = 0 .. p        (causal: no future keys)
//   out[i,h] = sum_j softmax(s)_j v[j,g]
// Softmax subtracts the running maximum (Milakov & Gimelshein 2018, "Online normalizer
// calculation for softmax") so exp never overflows; here the two passes are explicit, the
// one-pass tiled form is chapter 07 (FlashAttention). Both kernels run the same per-(row, head)
// routine; they differ only in where key j lives (its "slot"): j itself in a contiguous cache,
// block_table[j / block_size] * block_size + j % block_size in a paged pool (Kwon et al. 2023).
#include "attention_reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "lio/error.h"

namespace lio::cpu {
namespace {

/// One (row, head): o (head_dim) = softmax_j(scale * qv . K[slot(j)]) V[slot(j)] over j < n_keys.
/// k, v: the head's column of the cache, slot s at k + s * kv_stride. scores: (>= n_keys) scratch.
template <typename SlotOf>
void attend_row_head(const float* qv, const float* k, const float* v, int64_t kv_stride,
                     int64_t n_keys, SlotOf slot_of, int64_t head_dim, float scale, float* scores,
                     float* o) {
  float max_s = -INFINITY;
  for (int64_t j = 0; j < n_keys; ++j) {
    const float* kv = k + slot_of(j) * kv_stride;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t d = 0; d < head_dim; ++d) s += qv[d] * kv[d];
    s *= scale;
    scores[j] = s;
    max_s = std::max(max_s, s);
  }
  float denom = 0.0f;
  for (int64_t j = 0; j < n_keys; ++j) {
    const float e = std::exp(scores[j] - max_s);
    scores[j] = e;
    denom += e;
  }
  const float inv = 1.0f / denom;
  std::fill_n(o, head_dim, 0.0f);
  for (int64_t j = 0; j < n_keys; ++j) {
    const float p = scores[j] * inv;
    const float* vv = v + slot_of(j) * kv_stride;
#pragma omp simd
    for (int64_t d = 0; d < head_dim; ++d) o[d] += p * vv[d];
  }
}

void check_heads(const char* op, int64_t n_heads, int64_t n_kv_heads) {
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0) {
    throw InvalidArgument(std::string(op) + ": n_heads must be a multiple of n_kv_heads");
  }
}

}  // namespace

void attention_reference(const float* q, const float* k_cache, const float* v_cache, float* out,
                         int64_t n_q, int64_t start_pos, int64_t n_heads, int64_t n_kv_heads,
                         int64_t head_dim, float scale) {
  check_heads("attention_reference", n_heads, n_kv_heads);
  const int64_t group = n_heads / n_kv_heads;  // query heads per KV head
  const int64_t q_stride = n_heads * head_dim;
  const int64_t kv_stride = n_kv_heads * head_dim;
  const auto identity = [](int64_t j) { return j; };
#pragma omp parallel
  {
    std::vector<float> scores(static_cast<size_t>(start_pos + n_q));
#pragma omp for schedule(dynamic, 1) collapse(2)
    for (int64_t i = 0; i < n_q; ++i) {
      for (int64_t h = 0; h < n_heads; ++h) {
        const int64_t g = h / group;
        attend_row_head(q + i * q_stride + h * head_dim, k_cache + g * head_dim,
                        v_cache + g * head_dim, kv_stride, start_pos + i + 1, identity, head_dim,
                        scale, scores.data(), out + i * q_stride + h * head_dim);
      }
    }
  }
}

void paged_attention_reference(const float* q, const float* k_pool, const float* v_pool, float* out,
                               const int32_t* query_start_loc, const int32_t* seq_lens,
                               const int32_t* block_tables, int64_t n_seqs,
                               int64_t max_blocks_per_seq, int64_t block_size, int64_t n_heads,
                               int64_t n_kv_heads, int64_t head_dim, float scale,
                               const uint8_t* row_mask) {
  check_heads("paged_attention_reference", n_heads, n_kv_heads);
  if (n_seqs <= 0) return;
  const int64_t n_tokens = query_start_loc[n_seqs];
  const int64_t group = n_heads / n_kv_heads;
  const int64_t q_stride = n_heads * head_dim;
  const int64_t kv_stride = n_kv_heads * head_dim;
  // Row -> (sequence, position), once per call.
  std::vector<int32_t> row_seq(static_cast<size_t>(n_tokens)),
      row_pos(static_cast<size_t>(n_tokens));
  int64_t max_keys = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int64_t q0 = query_start_loc[s], q1 = query_start_loc[s + 1];
    const int64_t first_pos = seq_lens[s] - (q1 - q0);
    for (int64_t i = q0; i < q1; ++i) {
      row_seq[static_cast<size_t>(i)] = static_cast<int32_t>(s);
      row_pos[static_cast<size_t>(i)] = static_cast<int32_t>(first_pos + (i - q0));
    }
    max_keys = std::max<int64_t>(max_keys, seq_lens[s]);
  }
#pragma omp parallel
  {
    std::vector<float> scores(static_cast<size_t>(max_keys));
    std::vector<int64_t> slots(static_cast<size_t>(max_keys));
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n_tokens; ++i) {
      if (row_mask != nullptr && row_mask[i] == 0) continue;
      const int32_t* table = block_tables + row_seq[static_cast<size_t>(i)] * max_blocks_per_seq;
      const int64_t n_keys = row_pos[static_cast<size_t>(i)] + 1;
      for (int64_t j = 0; j < n_keys; ++j)  // the block table walk, once per row
        slots[static_cast<size_t>(j)] = table[j / block_size] * block_size + j % block_size;
      const auto slot_of = [&](int64_t j) { return slots[static_cast<size_t>(j)]; };
      for (int64_t h = 0; h < n_heads; ++h) {
        const int64_t g = h / group;
        attend_row_head(q + i * q_stride + h * head_dim, k_pool + g * head_dim,
                        v_pool + g * head_dim, kv_stride, n_keys, slot_of, head_dim, scale,
                        scores.data(), out + i * q_stride + h * head_dim);
      }
    }
  }
}

}  // namespace lio::cpu
