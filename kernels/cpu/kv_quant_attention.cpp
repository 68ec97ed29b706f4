// kv_quant_attention.cpp — paged decode attention over a KV pool stored in f16 or int8
// (--kv-cache-dtype): each key and value is dequantized as it is read, inside the dot product
// and the weighted sum, never expanded into an f32 copy of the cache (see cpu_ops.h). One loop,
// paged_attention_quantized, serves both dtypes through an element reader (F16Elems,
// Int8Elems). It is Task 5's loop (chapter 04) with another reader, but not the learner's code:
// the f32 pool runs Task 5 itself, and this loop's arithmetic (an AVX2 FMA dot product, one
// multiply by 1/sum at the end) is not the reference answer's, so merging the two would change
// the bits of one of them.
#include <algorithm>
#include <cmath>
#include <string>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define LIO_KV_AVX2 1
#endif

#include "cpu_ops.h"
#include "lio/dtype.h"
#include "lio/error.h"

namespace lio::cpu {
namespace {

#ifdef LIO_KV_AVX2
/// 8 elements as f32: f16 bits through F16C, int8 codes widened.
inline __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 load8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif
inline float to_f32(uint16_t bits) { return f16_to_f32(bits); }
inline float to_f32(int8_t code) { return static_cast<float>(code); }

/// q . e[0 .. n) with e f16 bits or int8 codes, 8 lanes at a time where AVX2 is built in.
template <class E>
float dot_elems(const float* q, const E* e, int64_t n) {
  int64_t d = 0;
  float s = 0.0f;
#ifdef LIO_KV_AVX2
  __m256 acc = _mm256_setzero_ps();
  for (; d + 8 <= n; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8(e + d), acc);
  s = hsum8(acc);
#endif
  for (; d < n; ++d) s += q[d] * to_f32(e[d]);
  return s;
}

/// acc[0 .. n) += p * e[0 .. n).
template <class E>
void add_scaled(float p, const E* e, float* acc, int64_t n) {
  int64_t d = 0;
#ifdef LIO_KV_AVX2
  const __m256 pv = _mm256_set1_ps(p);
  for (; d + 8 <= n; d += 8) _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(pv, load8(e + d), _mm256_loadu_ps(acc + d)));
#endif
  for (; d < n; ++d) acc[d] += p * to_f32(e[d]);
}

/// f16 elements: value = f16_to_f32(bits); no scale.
struct F16Elems {
  const uint16_t* k;
  const uint16_t* v;
  float key_dot(const float* q, int64_t at, int64_t, int64_t head_dim) const { return dot_elems(q, k + at, head_dim); }
  void add_value(float p, float* acc, int64_t at, int64_t, int64_t head_dim) const {
    add_scaled(p, v + at, acc, head_dim);
  }
};

/// int8 elements with one f32 scale per (slot, KV head): value = scale * code, so
/// q . k = scale_k * (q . codes) and p v = (p scale_v) codes.
struct Int8Elems {
  const int8_t* k;
  const float* k_scales;
  const int8_t* v;
  const float* v_scales;
  float key_dot(const float* q, int64_t at, int64_t scale_at, int64_t head_dim) const {
    return k_scales[scale_at] * dot_elems(q, k + at, head_dim);
  }
  void add_value(float p, float* acc, int64_t at, int64_t scale_at, int64_t head_dim) const {
    add_scaled(p * v_scales[scale_at], v + at, acc, head_dim);
  }
};

/// Task 5's contract over the pool `e` reads (see paged_decode_attention_f16 / _int8).
template <class Elems>
void paged_attention_quantized(const float* q, const Elems& e, float* out,
                               std::span<const int32_t> block_table, int64_t n_ctx,
                               int64_t block_size, int64_t n_kv_heads, int64_t kv_head,
                               int64_t head_dim, float scale, std::span<float> scores) {
  if (n_ctx < 1 || block_size < 1 ||
      static_cast<int64_t>(block_table.size()) * block_size < n_ctx ||
      static_cast<int64_t>(scores.size()) < n_ctx) {
    throw InvalidArgument("paged attention (quantized KV): n_ctx " + std::to_string(n_ctx) +
                          ", block size " + std::to_string(block_size) + ", table of " +
                          std::to_string(block_table.size()) + " blocks, scores scratch of " +
                          std::to_string(scores.size()) + " floats");
  }
  scores = scores.first(static_cast<size_t>(n_ctx));  // the caller's scratch, one per thread
  float mx = -INFINITY;
  for (int64_t j = 0; j < n_ctx; ++j) {
    const int64_t slot = static_cast<int64_t>(block_table[static_cast<size_t>(j / block_size)]) * block_size + j % block_size;
    const int64_t head = slot * n_kv_heads + kv_head;
    scores[static_cast<size_t>(j)] = scale * e.key_dot(q, head * head_dim, head, head_dim);
    mx = std::max(mx, scores[static_cast<size_t>(j)]);
  }
  float sum = 0.0f;
  for (float& s : scores) {
    s = std::exp(s - mx);
    sum += s;
  }
  std::fill_n(out, head_dim, 0.0f);
  for (int64_t j = 0; j < n_ctx; ++j) {
    const int64_t slot = static_cast<int64_t>(block_table[static_cast<size_t>(j / block_size)]) * block_size + j % block_size;
    const int64_t head = slot * n_kv_heads + kv_head;
    e.add_value(scores[static_cast<size_t>(j)], out, head * head_dim, head, head_dim);
  }
  const float inv = 1.0f / sum;
  for (int64_t d = 0; d < head_dim; ++d) out[d] *= inv;
}

}  // namespace

void paged_decode_attention_f16(const float* q, const uint16_t* k_pool, const uint16_t* v_pool,
                                float* out, std::span<const int32_t> block_table, int64_t n_ctx,
                                int64_t block_size, int64_t n_kv_heads, int64_t kv_head,
                                int64_t head_dim, float scale, std::span<float> scores) {
  paged_attention_quantized(q, F16Elems{k_pool, v_pool}, out, block_table, n_ctx, block_size,
                            n_kv_heads, kv_head, head_dim, scale, scores);
}

void paged_decode_attention_int8(const float* q, const int8_t* k_pool, const float* k_scales,
                                 const int8_t* v_pool, const float* v_scales, float* out,
                                 std::span<const int32_t> block_table, int64_t n_ctx,
                                 int64_t block_size, int64_t n_kv_heads, int64_t kv_head,
                                 int64_t head_dim, float scale, std::span<float> scores) {
  paged_attention_quantized(q, Int8Elems{k_pool, k_scales, v_pool, v_scales}, out, block_table,
                            n_ctx, block_size, n_kv_heads, kv_head, head_dim, scale, scores);
}

}  // namespace lio::cpu
