// Chapter 07, Tasks 1-5 — reference solution: the score matrix's bytes, the online-softmax
// update of one tile, the merge of two partials (Flash-Decoding's reduction), the causal tile
// rule, and one query tile's loop over its key tiles with the final normalization.
// Declarations and contracts: kernels/cpu/flash_attention.h. Lesson:
// docs/07_flash_attention.md. Grade: ctest -R ch07_task_K (K = 1..5), or scripts/grade.sh 07
#include "flash_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "lio/error.h"

namespace lio::cpu {

// ---- Task 1 -----------------------------------------------------------------------------------

int64_t attention_score_bytes(int64_t batch, int64_t n_heads, int64_t n_queries, int64_t n_keys,
                              int64_t bytes_per_element) {
  const int64_t factors[] = {batch, n_heads, n_queries, n_keys, bytes_per_element};
  const char* names[] = {"batch", "n_heads", "n_queries", "n_keys", "bytes_per_element"};
  int64_t bytes = 1;
  for (int i = 0; i < 5; ++i) {
    if (factors[i] < 0) {
      throw InvalidArgument(std::string("attention_score_bytes: ") + names[i] + " must be >= 0, got " +
                            std::to_string(factors[i]));
    }
  }
  for (const int64_t f : factors) {
    if (f != 0 && bytes > std::numeric_limits<int64_t>::max() / f) {
      throw InvalidArgument("attention_score_bytes: the score matrix's size does not fit in int64");
    }
    bytes *= f;
  }
  return bytes;
}

// ---- Task 2 -----------------------------------------------------------------------------------

void online_softmax_update(AttentionPartial& row, std::span<float> scores, const float* v, int64_t v_stride) {
  const auto d = static_cast<int64_t>(row.acc.size());
  if (scores.empty()) throw InvalidArgument("online_softmax_update: a tile needs at least one score");
  if (v_stride < d) {
    throw InvalidArgument("online_softmax_update: v_stride " + std::to_string(v_stride) + " < head_dim " +
                          std::to_string(d));
  }
  // m_new = max(m, max_j s_j); the old l and acc are rescaled by exp(m - m_new), which
  // re-measures their terms against the new max; then the tile's p_j = exp(s_j - m_new) add in.
  float tile_max = scores[0];
  for (const float s : scores) tile_max = std::max(tile_max, s);
  const float m_new = std::max(row.m, tile_max);
  // exp(-inf - m_new) = 0: an empty row's l and acc (both 0) stay 0 under the rescale.
  const float alpha = std::exp(row.m - m_new);
  exp_shifted(scores, m_new);  // p_j = exp(s_j - m_new)
  float tile_sum = 0.0f;
  for (const float p : scores) tile_sum += p;
  row.l = row.l * alpha + tile_sum;
  // acc = alpha acc + sum_j p_j v_j, 64 columns at a time so those 64 accumulators stay in
  // registers across the tile's keys (each column still sums its terms in key order): 8
  // independent AVX2 FMA chains, enough to hide the FMA's latency (32 columns gave 4, and the
  // loop waited on them in bench_attention's decode rows).
  constexpr int64_t kCols = 64;
  float* acc = row.acc.data();
  for (int64_t c0 = 0; c0 < d; c0 += kCols) {
    const int64_t nc = std::min(kCols, d - c0);
    if (nc == kCols) {
      float a[kCols];
      for (int64_t c = 0; c < kCols; ++c) a[c] = acc[c0 + c] * alpha;
      for (size_t j = 0; j < scores.size(); ++j) {
        const float p = scores[j];
        const float* vj = v + static_cast<int64_t>(j) * v_stride + c0;
        for (int64_t c = 0; c < kCols; ++c) a[c] += p * vj[c];
      }
      for (int64_t c = 0; c < kCols; ++c) acc[c0 + c] = a[c];
    } else {
      for (int64_t c = c0; c < d; ++c) acc[c] *= alpha;
      for (size_t j = 0; j < scores.size(); ++j) {
        const float p = scores[j];
        const float* vj = v + static_cast<int64_t>(j) * v_stride;
        for (int64_t c = c0; c < d; ++c) acc[c] += p * vj[c];
      }
    }
  }
  row.m = m_new;
}

// ---- Task 3 -----------------------------------------------------------------------------------

void merge_partials(AttentionPartial& into, const AttentionPartial& other) {
  if (into.acc.size() != other.acc.size()) {
    throw InvalidArgument("merge_partials: head_dim " + std::to_string(into.acc.size()) + " vs " +
                          std::to_string(other.acc.size()));
  }
  if (other.l == 0.0f) return;  // nothing to add (and exp(-inf - -inf) would be NaN)
  if (into.l == 0.0f) {
    into.m = other.m;
    into.l = other.l;
    std::copy(other.acc.begin(), other.acc.end(), into.acc.begin());
    return;
  }
  const float m = std::max(into.m, other.m);
  const float a = std::exp(into.m - m), b = std::exp(other.m - m);
  into.l = into.l * a + other.l * b;
  for (size_t c = 0; c < into.acc.size(); ++c) into.acc[c] = into.acc[c] * a + other.acc[c] * b;
  into.m = m;
}

// ---- Task 4 -----------------------------------------------------------------------------------

TileMask causal_tile_mask(int64_t q_first, int64_t q_last, int64_t k_first, int64_t k_last) {
  if (q_first < 0 || k_first < 0 || q_first > q_last || k_first > k_last) {
    throw InvalidArgument("causal_tile_mask: need 0 <= first <= last, got queries " + std::to_string(q_first) +
                          ".." + std::to_string(q_last) + ", keys " + std::to_string(k_first) + ".." +
                          std::to_string(k_last));
  }
  if (k_first > q_last) return TileMask::Skip;  // the last query sees none of the tile
  if (k_last <= q_first) return TileMask::Full;  // the first query sees all of it
  return TileMask::Partial;
}

// ---- Task 5 -----------------------------------------------------------------------------------

void flash_tile_loop(FlashTileSource& src, int64_t key_begin, int64_t key_end, std::span<AttentionPartial> partials,
                     bool skip_window_tiles) {
  const int64_t n_vectors = src.n_rows * src.group;
  if (static_cast<int64_t>(partials.size()) != n_vectors) {
    throw InvalidArgument("flash_tile_loop: " + std::to_string(partials.size()) + " partials for " +
                          std::to_string(n_vectors) + " query vectors");
  }
  if (key_begin < 0 || key_begin > key_end) {
    throw InvalidArgument("flash_tile_loop: key range [" + std::to_string(key_begin) + ", " +
                          std::to_string(key_end) + ") is not a range");
  }
  const int64_t pos_last = src.pos0 + src.n_rows - 1;
  const bool windowed = src.causal && src.window > 0;
  // The first key row 0 may see; every later row's window starts later.
  const int64_t window_start = windowed ? std::max<int64_t>(0, src.pos0 - src.window + 1) : 0;
  for (int64_t k0 = key_begin; k0 < key_end; k0 += kFlashKeyTile) {
    const int64_t nk = std::min(kFlashKeyTile, key_end - k0);
    const TileMask mask = src.causal ? causal_tile_mask(src.pos0, pos_last, k0, k0 + nk - 1) : TileMask::Full;
    if (mask == TileMask::Skip) break;  // every later tile lies further above the diagonal
    if (skip_window_tiles && k0 + nk <= window_start) {  // before every row's window: never loaded
      src.window_skipped();
      continue;
    }
    const float* v = nullptr;
    float* s = src.load_tile(k0, nk, &v);
    for (int64_t r = 0; r < src.n_rows; ++r) {
      // Keys of this tile row r sees: all of them below the diagonal, up to its own position on it,
      // and in a window none before its window's start.
      const int64_t end = mask == TileMask::Full ? nk : std::min(nk, src.pos0 + r - k0 + 1);
      const int64_t first = windowed ? std::clamp<int64_t>(src.pos0 + r - src.window + 1 - k0, 0, nk) : 0;
      if (end <= first) continue;
      for (int64_t hh = 0; hh < src.group; ++hh) {
        const int64_t i = r * src.group + hh;
        online_softmax_update(partials[static_cast<size_t>(i)],
                              std::span<float>(s + i * kFlashKeyTile + first, static_cast<size_t>(end - first)),
                              v + first * src.head_dim, src.head_dim);
      }
    }
  }
}

void finish_partial(const AttentionPartial& partial, std::span<float> out, float* lse) {
  if (out.size() != partial.acc.size()) {
    throw InvalidArgument("finish_partial: out holds " + std::to_string(out.size()) + " floats, acc " +
                          std::to_string(partial.acc.size()));
  }
  if (!(partial.l > 0.0f)) throw InvalidArgument("finish_partial: the partial holds no key (l = 0)");
  // The row's output O = acc / l (the softmax's denominator divided out once, at the end), and
  // its logsumexp m + log(l): out = acc / l, lse = m + log(l).
  const float inv = 1.0f / partial.l;
  for (size_t e = 0; e < out.size(); ++e) out[e] = partial.acc[e] * inv;
  if (lse != nullptr) *lse = partial.m + std::log(partial.l);
}

}  // namespace lio::cpu
