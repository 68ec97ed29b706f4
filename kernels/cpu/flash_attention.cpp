// flash_attention.cpp — FlashAttention on the CPU (chapter 07): the tiled kernel built on the
// chapter's Tasks 2-5 (the online-softmax update, the merge of partials, the causal tile rule,
// the tile loop and the final normalization), its naive twin, and the vectorized exp both
// softmaxes lean on. Contracts: flash_attention.h.
//
// The tiled kernel, per work item (sequence s, KV head g, query tile of kFlashQueryTile rows):
//   query vectors  Q_t   (n_rows x group, head_dim)   every head of g's group, every row of the tile
//   for each split c of kFlashKvSplit keys (splits past the tile's last position skipped):
//     partial P_c = empty                              (m = -inf, l = 0, acc = 0 per query vector)
//     flash_tile_loop (Task 5) over c's keys, asking this file for one key tile at a time:
//       K^T, V  (head_dim x Bc), (Bc x head_dim) gathered through the block table, f32
//       S = scale Q_t K^T   (n_vectors x Bc)         register-blocked FMA chains over head_dim
//     running = merge_partials(running, P_c)        (Task 3), splits in order
//   finish_partial (Task 5): each row's output and logsumexp from `running`
// With too few items to occupy the threads (a decode batch), the splits of each item run in
// parallel into a buffer and are merged afterwards in the same order (Flash-Decoding): every row
// folds the same partials in the same order either way, so its bits never change.
// Every score of a (query, key) pair is the same FMA chain d = 0 .. head_dim-1 whichever block
// of the micro-kernel computes it, and Tasks 2-3 see only the row's own scores: a row's result
// is independent of the batch (CPU batch invariance, COURSE.md).
#include "flash_attention.h"

#include "lio/omp_compat.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LIO_FLASH_AVX2 1
#endif

#include "first_error.h"
#include "lio/dtype.h"
#include "lio/error.h"

namespace lio::cpu {
namespace {

// ---- shapes and the batch --------------------------------------------------------------------
void check_call(const char* op, const float* q, const PagedKvLayer& kv, const float* out,
                const AttentionBatch& b, const AttentionShape& sh) {
  const std::string name(op);
  if (sh.n_kv_heads <= 0 || sh.n_heads <= 0 || sh.n_heads % sh.n_kv_heads != 0) {
    throw InvalidArgument(name + ": n_heads (" + std::to_string(sh.n_heads) + ") must be a positive multiple of n_kv_heads (" +
                          std::to_string(sh.n_kv_heads) + ")");
  }
  if (sh.head_dim < 1) throw InvalidArgument(name + ": head_dim must be >= 1");
  if (sh.window < 0) throw InvalidArgument(name + ": window must be >= 0 (0 = none)");
  if (!(sh.softcap >= 0.0f)) throw InvalidArgument(name + ": softcap must be >= 0 (0 = none)");
  if (b.block_size < 1) throw InvalidArgument(name + ": block_size must be >= 1");
  if (b.n_seqs < 0) throw InvalidArgument(name + ": n_seqs must be >= 0");
  if (b.n_seqs == 0) return;
  if (q == nullptr || out == nullptr || kv.k == nullptr || kv.v == nullptr || b.query_start_loc == nullptr ||
      b.seq_lens == nullptr || b.block_tables == nullptr) {
    throw InvalidArgument(name + ": null pointer");
  }
  if (kv.element == KvElement::Int8 && (kv.k_scales == nullptr || kv.v_scales == nullptr)) {
    throw InvalidArgument(name + ": an int8 KV layer needs its scales");
  }
  for (int64_t s = 0; s < b.n_seqs; ++s) {
    const int64_t qlen = b.query_start_loc[s + 1] - b.query_start_loc[s];
    if (qlen < 0 || qlen > b.seq_lens[s]) {
      throw InvalidArgument(name + ": sequence " + std::to_string(s) + " has " + std::to_string(qlen) +
                            " queries but seq_len " + std::to_string(b.seq_lens[s]));
    }
    if ((b.seq_lens[s] + b.block_size - 1) / b.block_size > b.max_blocks_per_seq) {
      throw InvalidArgument(name + ": sequence " + std::to_string(s) + "'s block table is too short");
    }
    if (b.tree_lens != nullptr) {
      const int64_t t = b.tree_lens[s];
      if (b.tree_masks == nullptr || !b.causal || t < 0 || t > 64 || t > qlen) {
        throw InvalidArgument(name + ": sequence " + std::to_string(s) + "'s tree of " + std::to_string(t) +
                              " nodes in " + std::to_string(qlen) +
                              " rows (a tree needs its masks, causal attention and at most min(64, query rows) nodes)");
      }
    }
  }
}

/// Sequence s's draft tree as one row of it sees it (AttentionBatch::tree_masks): node t
/// attends to prefix keys lo[t] .. key0 - 1 and to tree key key0 + j iff bit j of bits[t]
/// (its mask, less the ancestors a sliding window leaves out, both measured from the node's
/// real position key0 + depth(t)). n = 0: no tree.
struct TreeView {
  int64_t n = 0;     // nodes T
  int64_t key0 = 0;  // key (and position) of node 0: seq_len - T
  int64_t row0 = 0;  // batch row of node 0
  uint64_t bits[64] = {};
  int64_t lo[64] = {};
  /// Whether node t sees key `key` (any key of the sequence, linear index).
  bool sees(int64_t t, int64_t key) const {
    return key < key0 ? key >= lo[t] : key - key0 < 64 && (bits[t] >> (key - key0) & 1) != 0;
  }
};

TreeView tree_view(const AttentionBatch& b, const AttentionShape& sh, int64_t s) {
  TreeView tv;
  if (b.tree_lens == nullptr || b.tree_lens[s] == 0) return tv;
  tv.n = b.tree_lens[s];
  tv.key0 = b.seq_lens[s] - tv.n;
  tv.row0 = b.query_start_loc[s + 1] - tv.n;
  int64_t depth[64];
  for (int64_t t = 0; t < tv.n; ++t) depth[t] = std::popcount(b.tree_masks[tv.row0 + t]) - 1;
  for (int64_t t = 0; t < tv.n; ++t) {
    tv.bits[t] = b.tree_masks[tv.row0 + t];
    if (sh.window > 0) {  // Gemma 3's local layers: the window of the chain the node's path is
      tv.lo[t] = std::max<int64_t>(0, tv.key0 + depth[t] - sh.window + 1);
      for (int64_t j = 0; j < tv.n; ++j)
        if (depth[j] <= depth[t] - sh.window) tv.bits[t] &= ~(uint64_t{1} << j);
    }
  }
  return tv;
}

/// Element j (of n_kv_heads * head_dim per slot) of K or V as f32.
struct KvReader {
  const PagedKvLayer& kv;
  int64_t kv_dim, head_dim;
  /// Copies key/value `slot`, KV head g, into dst (head_dim) as f32.
  void read(bool key, int64_t slot, int64_t g, float* dst) const {
    const int64_t at = slot * kv_dim + g * head_dim;
    switch (kv.element) {
      case KvElement::F32: {
        const float* src = static_cast<const float*>(key ? kv.k : kv.v) + at;
        std::copy(src, src + head_dim, dst);
        break;
      }
      case KvElement::F16: {  // exact widening (F16C 8 at a time where built in)
        const uint16_t* src = static_cast<const uint16_t*>(key ? kv.k : kv.v) + at;
        int64_t c = 0;
#if defined(LIO_FLASH_AVX2) && defined(__F16C__)
        for (; c + 8 <= head_dim; c += 8)
          _mm256_storeu_ps(dst + c, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + c))));
#endif
        for (; c < head_dim; ++c) dst[c] = f16_to_f32(src[c]);
        break;
      }
      case KvElement::Int8: {  // scale * code, one rounding, the same in every lane
        const int8_t* src = static_cast<const int8_t*>(key ? kv.k : kv.v) + at;
        const float scale = (key ? kv.k_scales : kv.v_scales)[slot * (kv_dim / head_dim) + g];
        int64_t c = 0;
#ifdef LIO_FLASH_AVX2
        const __m256 vs = _mm256_set1_ps(scale);
        for (; c + 8 <= head_dim; c += 8) {
          const __m256i codes = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + c)));
          _mm256_storeu_ps(dst + c, _mm256_mul_ps(vs, _mm256_cvtepi32_ps(codes)));
        }
#endif
        for (; c < head_dim; ++c) dst[c] = scale * static_cast<float>(src[c]);
        break;
      }
    }
  }
};

inline int64_t slot_of(const AttentionBatch& b, int64_t s, int64_t j) {
  return static_cast<int64_t>(b.block_tables[s * b.max_blocks_per_seq + j / b.block_size]) * b.block_size +
         j % b.block_size;
}

/// Asks for key/value `slot`'s row of KV head g (head_dim elements of the pool's type) to be
/// brought into the caches ahead of its read: each key is a few cache lines of one head, 16 keys
/// a block, the blocks where the block table says, so the hardware prefetchers see no stream to
/// follow. Measured once (bench_attention, AVX2 EPYC): from L3 (warm, 4096 keys) a decode row ran in
/// about half the time; from DRAM (cold) no change, which the memory, not the order of reads,
/// bounds there.
inline void prefetch_row(const KvReader& reader, int64_t slot, int64_t g) {
#ifdef LIO_FLASH_AVX2
  const int64_t elem = reader.kv.element == KvElement::F32 ? 4 : reader.kv.element == KvElement::F16 ? 2 : 1;
  const int64_t at = (slot * reader.kv_dim + g * reader.head_dim) * elem, bytes = reader.head_dim * elem;
  for (const void* base : {reader.kv.k, reader.kv.v})
    for (int64_t o = 0; o < bytes; o += 64)
      _mm_prefetch(static_cast<const char*>(base) + at + o, _MM_HINT_T0);
#else
  (void)reader, (void)slot, (void)g;
#endif
}

// ---- the tiled kernel ------------------------------------------------------------------------
/// One work item: a tile of query rows of one sequence and one KV head.
struct WorkItem {
  int64_t seq, kv_head;
  int64_t row0, n_rows;   // first row (batch index) and how many
  int64_t pos0;           // position of row0
  int64_t n_keys;         // keys the tile's last row may see (causal) or the sequence's length
  int64_t n_splits;       // ceil(n_keys / kFlashKvSplit)
  int64_t partial0 = 0;   // split-parallel mode: first partial of this item in the buffer
  /// A draft tree's node (one row): its keys are numbered as the chain of its path would number
  /// them, so it folds exactly what that chain's last row would, in the same tiles and lanes
  /// (bitwise the plain decode row's). Key k < key0 is the prefix's key k; key key0 + e is the
  /// tree's row path[e] (the node's ancestor at depth e; path[depth] is the node). null: no tree.
  const int32_t* path = nullptr;
  int64_t key0 = 0;
  /// The linear key (the pool position in the sequence's block table) of key k.
  int64_t linear_key(int64_t k) const { return path == nullptr || k < key0 ? k : key0 + path[k - key0]; }
};

/// Per-thread scratch, carved from FlashWorkspace::tiles.
struct TileScratch {
  float* kt;       // (head_dim, Bc) K^T of the key tile
  float* v;        // (Bc, head_dim)
  float* s;        // (n_vectors, Bc) scores; while a tile is gathered, (8, head_dim) staging
  float* split;    // (n_vectors, head_dim + 2) the current split's partials: acc, then m, l
  float* running;  // (n_vectors, head_dim + 2) the merged partials
  static int64_t s_floats(int64_t n_vectors, int64_t d) { return std::max(n_vectors * kFlashKeyTile, 8 * d); }
  static int64_t floats(int64_t n_vectors, int64_t d) {
    return 2 * d * kFlashKeyTile + s_floats(n_vectors, d) + 2 * n_vectors * (d + 2);
  }
};

/// A partial stored as (acc (d), m, l) at p.
inline AttentionPartial view(float* p, int64_t d) { return AttentionPartial{p[d], p[d + 1], std::span<float>(p, static_cast<size_t>(d))}; }
inline void store(const AttentionPartial& a, float* p, int64_t d) { p[d] = a.m, p[d + 1] = a.l; }
inline void clear(float* p, int64_t d) { std::fill_n(p, d, 0.0f), p[d] = -INFINITY, p[d + 1] = 0.0f; }

/// S (n_vectors, Bc) = scale * Q K^T for the first n_cols (a multiple of 8 up to Bc) columns.
/// qv[i]: query vector i (head_dim). Each score is one FMA chain over d = 0 .. head_dim-1.
#ifdef LIO_FLASH_AVX2
/// NR query vectors x 16 keys (8 when !two) of S, accumulators in registers (NR a compile-time
/// count so the compiler can keep all 2 NR of them there). Each score: one FMA chain over d.
template <int NR>
inline void score_block(const float* const* qv, const float* kt, int64_t j, bool two, int64_t d, __m256 vscale,
                        float* s) {
  __m256 acc0[NR], acc1[NR];
  for (int a = 0; a < NR; ++a) acc0[a] = acc1[a] = _mm256_setzero_ps();
  for (int64_t c = 0; c < d; ++c) {
    const __m256 k0 = _mm256_loadu_ps(kt + c * kFlashKeyTile + j);
    const __m256 k1 = two ? _mm256_loadu_ps(kt + c * kFlashKeyTile + j + 8) : k0;
    for (int a = 0; a < NR; ++a) {
      const __m256 qa = _mm256_set1_ps(qv[a][c]);
      acc0[a] = _mm256_fmadd_ps(qa, k0, acc0[a]);
      acc1[a] = _mm256_fmadd_ps(qa, k1, acc1[a]);
    }
  }
  for (int a = 0; a < NR; ++a) {
    _mm256_storeu_ps(s + a * kFlashKeyTile + j, _mm256_mul_ps(acc0[a], vscale));
    if (two) _mm256_storeu_ps(s + a * kFlashKeyTile + j + 8, _mm256_mul_ps(acc1[a], vscale));
  }
}
#endif

void tile_scores(const float* const* qv, int64_t n_vectors, const float* kt, int64_t n_cols, int64_t d,
                 float scale, float* s) {
#ifdef LIO_FLASH_AVX2
  constexpr int64_t kRows = 4;  // query vectors per register block: 4 x 2 accumulators of 8 keys
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int64_t i0 = 0; i0 < n_vectors; i0 += kRows) {
    const int64_t nr = std::min(kRows, n_vectors - i0);
    float* si = s + i0 * kFlashKeyTile;
    for (int64_t j = 0; j < n_cols; j += 16) {
      const bool two = j + 8 < n_cols;
      switch (nr) {
        case 4: score_block<4>(qv + i0, kt, j, two, d, vscale, si); break;
        case 3: score_block<3>(qv + i0, kt, j, two, d, vscale, si); break;
        case 2: score_block<2>(qv + i0, kt, j, two, d, vscale, si); break;
        default: score_block<1>(qv + i0, kt, j, two, d, vscale, si); break;
      }
    }
  }
#else
  for (int64_t i = 0; i < n_vectors; ++i) {
    for (int64_t j = 0; j < n_cols; ++j) {
      float acc = 0.0f;
      for (int64_t c = 0; c < d; ++c) acc = std::fma(qv[i][c], kt[c * kFlashKeyTile + j], acc);
      s[i * kFlashKeyTile + j] = acc * scale;
    }
  }
#endif
}

/// Copies keys k0 .. k0 + nk - 1 of item's sequence and KV head into ts.kt (head_dim, Bc),
/// transposed, and their values into ts.v (Bc, head_dim), as f32. Eight keys at a time: each
/// key's row (straight from an f32 pool, else dequantized into ts.s as staging) goes through
/// 8 x 8 register transposes. Pure data movement: the bits are the pool's.
void gather_tile(const KvReader& reader, const AttentionBatch& b, const WorkItem& item, int64_t k0, int64_t nk,
                 TileScratch& ts) {
  const int64_t d = reader.head_dim, g = item.kv_head;
  [[maybe_unused]] const bool f32 = reader.kv.element == KvElement::F32;  // read by the AVX2 path only
  int64_t j = 0;
#ifdef LIO_FLASH_AVX2
  if (d % 8 == 0) {
    for (; j + 8 <= nk; j += 8) {
      const float* rows[8];
      // The same 8 keys of the next tile are asked for now, a tile's compute ahead of their use.
      for (int64_t r = j + kFlashKeyTile; r < j + kFlashKeyTile + 8 && k0 + r < item.n_keys; ++r)
        prefetch_row(reader, slot_of(b, item.seq, item.linear_key(k0 + r)), g);
      for (int64_t r = 0; r < 8; ++r) {
        const int64_t slot = slot_of(b, item.seq, item.linear_key(k0 + j + r));
        if (f32) {
          rows[r] = static_cast<const float*>(reader.kv.k) + slot * reader.kv_dim + g * d;
        } else {
          reader.read(true, slot, g, ts.s + r * d);  // the scores buffer is free while gathering
          rows[r] = ts.s + r * d;
        }
        if (f32) {  // inline 32-byte copies: perf put the libc memcpy call per 256-byte row at a
                    // quarter of a warm decode row's attention
          const float* src = static_cast<const float*>(reader.kv.v) + slot * reader.kv_dim + g * d;
          float* dst = ts.v + (j + r) * d;
          for (int64_t e = 0; e < d; e += 8) _mm256_storeu_ps(dst + e, _mm256_loadu_ps(src + e));
        } else {
          reader.read(false, slot, g, ts.v + (j + r) * d);
        }
      }
      for (int64_t e = 0; e < d; e += 8) {
        __m256 r0 = _mm256_loadu_ps(rows[0] + e), r1 = _mm256_loadu_ps(rows[1] + e), r2 = _mm256_loadu_ps(rows[2] + e),
               r3 = _mm256_loadu_ps(rows[3] + e), r4 = _mm256_loadu_ps(rows[4] + e), r5 = _mm256_loadu_ps(rows[5] + e),
               r6 = _mm256_loadu_ps(rows[6] + e), r7 = _mm256_loadu_ps(rows[7] + e);
        const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
                     t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
                     t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
        r0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
        r1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
        r2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
        r3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
        r4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
        r5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
        r6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
        r7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
        float* col = ts.kt + e * kFlashKeyTile + j;  // element e of keys j .. j + 7
        _mm256_storeu_ps(col + 0 * kFlashKeyTile, _mm256_permute2f128_ps(r0, r4, 0x20));
        _mm256_storeu_ps(col + 1 * kFlashKeyTile, _mm256_permute2f128_ps(r1, r5, 0x20));
        _mm256_storeu_ps(col + 2 * kFlashKeyTile, _mm256_permute2f128_ps(r2, r6, 0x20));
        _mm256_storeu_ps(col + 3 * kFlashKeyTile, _mm256_permute2f128_ps(r3, r7, 0x20));
        _mm256_storeu_ps(col + 4 * kFlashKeyTile, _mm256_permute2f128_ps(r0, r4, 0x31));
        _mm256_storeu_ps(col + 5 * kFlashKeyTile, _mm256_permute2f128_ps(r1, r5, 0x31));
        _mm256_storeu_ps(col + 6 * kFlashKeyTile, _mm256_permute2f128_ps(r2, r6, 0x31));
        _mm256_storeu_ps(col + 7 * kFlashKeyTile, _mm256_permute2f128_ps(r3, r7, 0x31));
      }
    }
  }
#endif
  for (; j < nk; ++j) {  // the tile's last keys (or every key without AVX2)
    const int64_t slot = slot_of(b, item.seq, item.linear_key(k0 + j));
    reader.read(true, slot, g, ts.s);
    for (int64_t e = 0; e < d; ++e) ts.kt[e * kFlashKeyTile + j] = ts.s[e];
    reader.read(false, slot, g, ts.v + j * d);
  }
}

/// (query tile, key tile) pairs one thread gathered, and skipped as outside the sliding window.
struct TileCounts {
  int64_t gathered = 0;
  int64_t window_skipped = 0;
};

/// A work item's key tiles for Task 5's loop: gather_tile (through the block table, dequantized)
/// then tile_scores (the register-blocked K^T product) into this thread's scratch.
class ItemTiles final : public FlashTileSource {
 public:
  ItemTiles(const float* const* qv, const KvReader& reader, const AttentionBatch& b, const AttentionShape& sh,
            const WorkItem& item, TileScratch& ts, TileCounts& counts)
      : qv_(qv), reader_(reader), b_(b), scale_(sh.scale), softcap_(sh.softcap), item_(item), ts_(ts), counts_(counts) {
    n_rows = item.n_rows;
    group = sh.n_heads / sh.n_kv_heads;
    head_dim = sh.head_dim;
    pos0 = item.pos0;
    causal = b.causal;
    window = sh.window;  // a tree node's keys are its chain's: causal rule and window as for any row
  }
  float* load_tile(int64_t k0, int64_t nk, const float** values) override {
    if (nk < 1 || nk > kFlashKeyTile || k0 < 0 || k0 + nk > b_.seq_lens[item_.seq]) {
      throw InvalidArgument("FlashTileSource::load_tile: keys " + std::to_string(k0) + " .. " +
                            std::to_string(k0 + nk - 1) + " are not a tile of this sequence's " +
                            std::to_string(b_.seq_lens[item_.seq]) + " keys");
    }
    ++counts_.gathered;
    // Gather the tile (HBM -> SRAM on a GPU; DRAM -> L1/L2 here): K transposed, V as rows.
    gather_tile(reader_, b_, item_, k0, nk, ts_);
    const int64_t n_cols = (nk + 7) / 8 * 8, d = head_dim;
    for (int64_t j = nk; j < n_cols; ++j)
      for (int64_t e = 0; e < d; ++e) ts_.kt[e * kFlashKeyTile + j] = 0.0f;
    tile_scores(qv_, n_rows * group, ts_.kt, n_cols, d, scale_, ts_.s);
    if (softcap_ > 0.0f)  // Gemma 2: capped before Task 5's loop masks and exponentiates them
      for (int64_t i = 0; i < n_rows * group; ++i) softcap_scores(ts_.s + i * kFlashKeyTile, nk, softcap_);
    *values = ts_.v;
    return ts_.s;
  }
  void window_skipped() override { ++counts_.window_skipped; }

 private:
  const float* const* qv_;
  const KvReader& reader_;
  const AttentionBatch& b_;
  float scale_;
  float softcap_;
  const WorkItem& item_;
  TileScratch& ts_;
  TileCounts& counts_;
};

/// Runs splits [c0, c1) of `item`: each split from an empty partial through Task 5's tile loop.
/// With `fold`, each split is merged into ts.running (Task 3, in order); otherwise split c's
/// partials are written to partials + (item.partial0 + c * n_vectors) * (d + 2).
void run_splits(const float* q, const KvReader& reader, const AttentionBatch& b, const AttentionShape& sh,
                const WorkItem& item, int64_t c0, int64_t c1, TileScratch& ts, bool fold, float* partials,
                TileCounts& counts, bool skip_window_tiles) {
  const int64_t d = sh.head_dim, group = sh.n_heads / sh.n_kv_heads, nv = item.n_rows * group;
  const float* qv[kFlashQueryTile * 16];
  AttentionPartial pv[kFlashQueryTile * 16];
  std::vector<const float*> qv_heap;
  std::vector<AttentionPartial> pv_heap;
  const float** qp = qv;
  AttentionPartial* pp = pv;
  if (nv > static_cast<int64_t>(std::size(qv))) {
    qv_heap.resize(static_cast<size_t>(nv)), qp = qv_heap.data();
    pv_heap.resize(static_cast<size_t>(nv)), pp = pv_heap.data();
  }
  for (int64_t r = 0; r < item.n_rows; ++r)
    for (int64_t hh = 0; hh < group; ++hh)
      qp[r * group + hh] = q + ((item.row0 + r) * sh.n_heads + item.kv_head * group + hh) * d;
  ItemTiles tiles(qp, reader, b, sh, item, ts, counts);
  for (int64_t c = c0; c < c1; ++c) {
    float* split = fold ? ts.split : partials + (item.partial0 + c * nv) * (d + 2);
    for (int64_t i = 0; i < nv; ++i) {
      clear(split + i * (d + 2), d);
      pp[i] = view(split + i * (d + 2), d);
    }
    const int64_t split_end = std::min((c + 1) * kFlashKvSplit, item.n_keys);
    flash_tile_loop(tiles, c * kFlashKvSplit, split_end, std::span<AttentionPartial>(pp, static_cast<size_t>(nv)),
                    skip_window_tiles);  // Task 5
    for (int64_t i = 0; i < nv; ++i) store(pp[i], split + i * (d + 2), d);
    if (fold) {
      for (int64_t i = 0; i < nv; ++i) {
        AttentionPartial into = view(ts.running + i * (d + 2), d);
        merge_partials(into, view(split + i * (d + 2), d));
        store(into, ts.running + i * (d + 2), d);
      }
    }
  }
}

/// Adds one thread's counts to the call's (from inside a parallel loop).
void add_counts(AttentionStats& stats, const TileCounts& counts) {
#pragma omp atomic
  stats.key_tiles += counts.gathered;
#pragma omp atomic
  stats.window_skipped_tiles += counts.window_skipped;
}

/// out / lse of item's rows from its merged partials at `merged` (n_vectors, d + 2).
void finish(float* merged, const WorkItem& item, const AttentionShape& sh, float* out, float* lse) {
  const int64_t d = sh.head_dim, group = sh.n_heads / sh.n_kv_heads;
  for (int64_t r = 0; r < item.n_rows; ++r) {
    for (int64_t hh = 0; hh < group; ++hh) {
      float* p = merged + (r * group + hh) * (d + 2);
      const int64_t h = item.kv_head * group + hh;
      float* o = out + ((item.row0 + r) * sh.n_heads + h) * d;
      finish_partial(view(p, d), std::span<float>(o, static_cast<size_t>(d)),  // Task 5
                     lse != nullptr ? lse + (item.row0 + r) * sh.n_heads + h : nullptr);
    }
  }
}

}  // namespace

void softcap_scores(float* s, int64_t n, float cap) {
  if (cap == 0.0f) return;
  const float inv = 1.0f / cap;
  for (int64_t j = 0; j < n; ++j) s[j] = cap * std::tanh(s[j] * inv);
}

AttentionStats flash_attention(const float* q, const PagedKvLayer& kv, float* out, float* lse,
                               const AttentionBatch& b, const AttentionShape& sh, FlashWorkspace& ws,
                               const FlashOptions& options) {
  check_call("flash_attention", q, kv, out, b, sh);
  AttentionStats stats;
  if (b.n_seqs == 0) return stats;
  const int64_t d = sh.head_dim, group = sh.n_heads / sh.n_kv_heads;
  // Each tree node's path, root first (the set bits of its mask, ascending: a parent comes
  // before its children), all of them before any item points into the array.
  std::vector<int32_t> paths;
  std::vector<int64_t> path_at;  // per batch row of a tree node: its path's offset in `paths`
  if (b.tree_lens != nullptr) {
    path_at.assign(static_cast<size_t>(b.query_start_loc[b.n_seqs]), -1);
    for (int64_t s = 0; s < b.n_seqs; ++s) {
      for (int64_t r = b.query_start_loc[s + 1] - b.tree_lens[s]; r < b.query_start_loc[s + 1]; ++r) {
        path_at[static_cast<size_t>(r)] = static_cast<int64_t>(paths.size());
        for (uint64_t m = b.tree_masks[r]; m != 0; m &= m - 1) paths.push_back(std::countr_zero(m));
      }
    }
  }
  // Work items: (sequence, KV head, query tile); a tree node alone, over its path's keys.
  std::vector<WorkItem> items;
  for (int64_t s = 0; s < b.n_seqs; ++s) {
    const int64_t q0 = b.query_start_loc[s], qlen = b.query_start_loc[s + 1] - q0;
    const int64_t first_pos = b.seq_lens[s] - qlen;
    const int64_t tree_n = b.tree_lens != nullptr ? b.tree_lens[s] : 0, tree_row = qlen - tree_n;
    for (int64_t g = 0; g < sh.n_kv_heads; ++g) {
      for (int64_t t = 0; t < qlen;) {
        const int64_t tile_end = t < tree_row ? std::min(t + kFlashQueryTile, tree_row) : t + 1;
        WorkItem it{s, g, q0 + t, tile_end - t, first_pos + t, 0, 0};
        if (t >= tree_row) {  // node t - tree_row: at position key0 + depth, its path's keys
          const int64_t at = path_at[static_cast<size_t>(q0 + t)];
          it.key0 = b.seq_lens[s] - tree_n;
          it.path = paths.data() + at;
          it.pos0 = it.key0 + std::popcount(b.tree_masks[q0 + t]) - 1;
        }
        it.n_keys = b.causal ? it.pos0 + it.n_rows : b.seq_lens[s];
        it.n_splits = (it.n_keys + kFlashKvSplit - 1) / kFlashKvSplit;
        items.push_back(it);
        t = tile_end;
      }
    }
  }
  const int threads = omp_get_max_threads();
  // Flash-Decoding: too few items for the threads, and keys worth splitting.
  int64_t total_splits = 0;
  for (const WorkItem& it : items) total_splits += it.n_splits;
  const bool split_parallel = options.split_kv && static_cast<int64_t>(items.size()) < 2 * threads &&
                              total_splits > static_cast<int64_t>(items.size());
  const int64_t max_vectors = kFlashQueryTile * group;
  const int64_t per_thread = TileScratch::floats(max_vectors, d);
  const auto tile_floats = static_cast<size_t>(per_thread * threads);
  if (ws.tiles.size() < tile_floats) ws.tiles.resize(tile_floats);
  stats.scratch_bytes = static_cast<int64_t>(tile_floats * sizeof(float));
  const auto scratch = [&](int tid) {
    float* base = ws.tiles.data() + static_cast<int64_t>(tid) * per_thread;
    TileScratch ts{base, base + d * kFlashKeyTile, base + 2 * d * kFlashKeyTile, nullptr, nullptr};
    ts.split = ts.s + TileScratch::s_floats(max_vectors, d);
    ts.running = ts.split + max_vectors * (d + 2);
    return ts;
  };
  const KvReader reader{kv, sh.n_kv_heads * d, d};
  FirstError error;
  if (!split_parallel) {
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t w = 0; w < items.size(); ++w) {
      error.run([&] {
        const WorkItem& it = items[w];
        TileScratch ts = scratch(omp_get_thread_num());
        const int64_t nv = it.n_rows * group;
        for (int64_t i = 0; i < nv; ++i) clear(ts.running + i * (d + 2), d);
        TileCounts counts;
        run_splits(q, reader, b, sh, it, 0, it.n_splits, ts, true, nullptr, counts, options.skip_window_tiles);
        finish(ts.running, it, sh, out, lse);
        add_counts(stats, counts);
      });
    }
    error.rethrow();
    return stats;
  }
  // Split-parallel: (item, split) units write partials; then each item folds them in order.
  int64_t n_partials = 0;
  std::vector<std::pair<size_t, int64_t>> units;
  for (size_t w = 0; w < items.size(); ++w) {
    items[w].partial0 = n_partials;
    n_partials += items[w].n_splits * items[w].n_rows * group;
    for (int64_t c = 0; c < items[w].n_splits; ++c) units.emplace_back(w, c);
  }
  const auto partial_floats = static_cast<size_t>(n_partials * (d + 2));
  if (ws.partials.size() < partial_floats) ws.partials.resize(partial_floats);
  stats.scratch_bytes += static_cast<int64_t>(partial_floats * sizeof(float));
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t u = 0; u < units.size(); ++u) {
    error.run([&] {
      TileScratch ts = scratch(omp_get_thread_num());
      const auto [w, c] = units[u];
      TileCounts counts;
      run_splits(q, reader, b, sh, items[w], c, c + 1, ts, false, ws.partials.data(), counts, options.skip_window_tiles);
      add_counts(stats, counts);
    });
  }
  error.rethrow();
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t w = 0; w < items.size(); ++w) {
    error.run([&] {
      const WorkItem& it = items[w];
      TileScratch ts = scratch(omp_get_thread_num());
      const int64_t nv = it.n_rows * group;
      for (int64_t i = 0; i < nv; ++i) {
        float* run = ts.running + i * (d + 2);
        clear(run, d);
        AttentionPartial into = view(run, d);
        for (int64_t c = 0; c < it.n_splits; ++c)
          merge_partials(into, view(ws.partials.data() + (it.partial0 + c * nv + i) * (d + 2), d));
        store(into, run, d);
      }
      finish(ts.running, it, sh, out, lse);
    });
  }
  error.rethrow();
  return stats;
}

// ---- the naive twin --------------------------------------------------------------------------
AttentionStats naive_attention(const float* q, const PagedKvLayer& kv, float* out, float* lse,
                               const AttentionBatch& b, const AttentionShape& sh, std::vector<float>& scores) {
  check_call("naive_attention", q, kv, out, b, sh);
  AttentionStats stats;
  const int64_t d = sh.head_dim, group = sh.n_heads / sh.n_kv_heads, kvd = sh.n_kv_heads * d;
  const KvReader reader{kv, kvd, d};
  std::vector<float> keys, values;
  for (int64_t s = 0; s < b.n_seqs; ++s) {
    const int64_t q0 = b.query_start_loc[s], qlen = b.query_start_loc[s + 1] - q0;
    const int64_t n_keys = b.seq_lens[s], first_pos = n_keys - qlen;
    if (qlen == 0) continue;
    const TreeView tree = tree_view(b, sh, s);
    // Gather the sequence's K and V (n_keys, n_kv_heads, head_dim) out of the pool, as f32.
    keys.resize(static_cast<size_t>(n_keys * kvd));
    values.resize(keys.size());
    for (int64_t j = 0; j < n_keys; ++j) {
      const int64_t slot = slot_of(b, s, j);
      for (int64_t g = 0; g < sh.n_kv_heads; ++g) {
        reader.read(true, slot, g, keys.data() + j * kvd + g * d);
        reader.read(false, slot, g, values.data() + j * kvd + g * d);
      }
    }
    // S (n_heads, qlen, n_keys): every score, masked afterwards (Algorithm 0).
    const auto s_floats = static_cast<size_t>(sh.n_heads * qlen * n_keys);
    if (scores.size() < s_floats) scores.resize(s_floats);
    stats.scratch_bytes = std::max<int64_t>(stats.scratch_bytes,
                                            static_cast<int64_t>((s_floats + 2 * keys.size()) * sizeof(float)));
#pragma omp parallel for schedule(dynamic, 1) collapse(2)
    for (int64_t h = 0; h < sh.n_heads; ++h) {
      for (int64_t i = 0; i < qlen; ++i) {
        const float* qi = q + ((q0 + i) * sh.n_heads + h) * d;
        const float* kh = keys.data() + (h / group) * d;
        const float* vh = values.data() + (h / group) * d;
        float* row = scores.data() + (h * qlen + i) * n_keys;
        for (int64_t j = 0; j < n_keys; ++j) {
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int64_t e = 0; e < d; ++e) dot += qi[e] * kh[j * kvd + e];
          row[j] = dot * sh.scale;
        }
        softcap_scores(row, n_keys, sh.softcap);
        const int64_t node = i - (qlen - tree.n);  // a tree row's node, else negative
        if (node >= 0) {  // a draft tree's node: the prefix (in its window) and its ancestors
          for (int64_t j = 0; j < n_keys; ++j)
            if (!tree.sees(node, j)) row[j] = -INFINITY;
        } else {
          if (b.causal)
            for (int64_t j = first_pos + i + 1; j < n_keys; ++j) row[j] = -INFINITY;
          if (b.causal && sh.window > 0)  // sliding window: keys before p - window + 1 masked too
            for (int64_t j = 0; j < first_pos + i - sh.window + 1; ++j) row[j] = -INFINITY;
        }
        float mx = -INFINITY;
        for (int64_t j = 0; j < n_keys; ++j) mx = std::max(mx, row[j]);
        float sum = 0.0f;
        for (int64_t j = 0; j < n_keys; ++j) sum += (row[j] = std::exp(row[j] - mx));
        const float inv = 1.0f / sum;
        float* o = out + ((q0 + i) * sh.n_heads + h) * d;
        std::fill_n(o, d, 0.0f);
        for (int64_t j = 0; j < n_keys; ++j) {
          const float p = row[j] * inv;
          if (p == 0.0f) continue;  // masked (or underflowed): never 0 * v
#pragma omp simd
          for (int64_t e = 0; e < d; ++e) o[e] += p * vh[j * kvd + e];
        }
        if (lse != nullptr) lse[(q0 + i) * sh.n_heads + h] = mx + std::log(sum);
      }
    }
  }
  return stats;
}

}  // namespace lio::cpu
