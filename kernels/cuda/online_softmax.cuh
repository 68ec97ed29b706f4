// online_softmax.cuh — the one-pass ("online") softmax-weighted sum of one (query row, head),
// as one thread runs it: the reference loop the naive attention kernels share.
//
// For keys j = 0 .. n_keys-1 living at slot slot_of(j):
//   m_j = max(m_{j-1}, s_j),  l_j = l_{j-1} e^{m_{j-1} - m_j} + e^{s_j - m_j},
//   o_j = o_{j-1} e^{m_{j-1} - m_j} + e^{s_j - m_j} v_j,        out = o_n / l_n
// with s_j = scale * q . k_j (Milakov & Gimelshein 2018, "Online normalizer calculation for
// softmax"; the recurrence FlashAttention tiles, Dao et al. 2022, sec. 3.1). The contiguous
// cache is slot_of(j) = j; the paged pool is block_table[j / block_size] * block_size + j %
// block_size.
#pragma once

#include <cstdint>

namespace lio::cuda {

/// o (head_dim) = softmax_j(scale * q . K[slot_of(j)]) V[slot_of(j)] over j < n_keys, in f32, on
/// one thread. k, v: the head's first element of slot 0; slot s starts at k + s * kv_stride.
/// `o` doubles as the running accumulator (it is overwritten). n_keys >= 1.
template <typename SlotOf>
__device__ inline void online_softmax_attend(const float* q, const float* k, const float* v,
                                             int64_t kv_stride, int n_keys, SlotOf slot_of,
                                             int head_dim, float scale, float* o) {
  for (int d = 0; d < head_dim; ++d) o[d] = 0.0f;
  float running_max = -INFINITY;
  float running_sum = 0.0f;
  for (int j = 0; j < n_keys; ++j) {
    const int64_t slot = slot_of(j);
    const float* k_j = k + slot * kv_stride;
    const float* v_j = v + slot * kv_stride;
    float score = 0.0f;
    for (int d = 0; d < head_dim; ++d) score += q[d] * k_j[d];
    score *= scale;
    const float new_max = fmaxf(running_max, score);
    const float correction = expf(running_max - new_max);  // 0 on the first key
    const float p = expf(score - new_max);
    running_sum = running_sum * correction + p;
    for (int d = 0; d < head_dim; ++d) o[d] = o[d] * correction + p * v_j[d];
    running_max = new_max;
  }
  for (int d = 0; d < head_dim; ++d) o[d] /= running_sum;
}

}  // namespace lio::cuda
