// flash_attention.h — attention without the N x N score matrix (chapter 07): the online
// softmax, tiles of queries and keys, causal tile skipping, split-KV decode, and the naive twin
// that does materialize the scores.
//
// Chapter 07 exercise points (Tasks 1-5, defined in solutions|exercises/07_flash_attention/
// flash_attention.cpp): the score matrix's bytes (Task 1), the online-softmax update of one tile
// (Task 2), the merge of two partial results (Task 3, Flash-Decoding's reduction), the causal
// tile rule (Task 4) and the tile loop of one query tile with the final normalization (Task 5).
// cpu::flash_attention (kernels/cpu/flash_attention.cpp) is the kernel built on them — work
// items, threads, splits and their merge around the learner's loop: the engine's CPU attention
// by default, so with chapter 07 switched to exercises the engine attends with the learner's
// loop and recurrence. cpu::naive_attention is the twin it is tested
// against (--attention-backend naive).
//
// Sources: Dao, Fu, Ermon, Rudra, Re 2022, "FlashAttention" (Algorithm 1; the recurrence, sec.
// 3.1); Dao 2023, "FlashAttention-2" (query tiles outer, one logsumexp per row, sec. 3.1-3.2);
// Dao, Haziza, Massa, Sizov 2023, "Flash-Decoding for long-context inference" (split-KV);
// Milakov & Gimelshein 2018, "Online normalizer calculation for softmax"; Kwon et al. 2023
// (PagedAttention: block tables); Ainslie et al. 2023 (GQA). Lesson: docs/07_flash_attention.md.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace lio::cpu {

// ---- the exercise points ---------------------------------------------------------------------

/// Task 1. Bytes of the attention score matrix S = Q K^T that standard attention materializes:
/// one score per (sequence, head, query, key), each `bytes_per_element` bytes (4 in f32, 2 in
/// fp16/bf16). Lecture note 003's case: batch 2, 32 heads, N = 4,096 queries and keys, fp16
/// -> 2,147,483,648 bytes (2.15 GB = 2 GiB). Units: bytes. FlashAttention never holds more
/// than one tile of S (docs/07_flash_attention.md, "Task 1").
/// Throws InvalidArgument if any argument is < 0 (0 sequences, heads or tokens give 0 bytes)
/// or the product does not fit in int64_t.
int64_t attention_score_bytes(int64_t batch, int64_t n_heads, int64_t n_queries, int64_t n_keys,
                              int64_t bytes_per_element);

/// One query row's attention over part of its keys, before normalization: FlashAttention's
/// (m, l, O~) (Dao et al. 2022, Algorithm 1, lines 10-12). The invariant Tasks 2, 3 and 5 keep:
/// over the keys folded in so far, with s_j = scale q . k_j,
///   m = max_j s_j,  l = sum_j exp(s_j - m),  acc = sum_j exp(s_j - m) v_j   (head_dim)
/// (docs/07_flash_attention.md, section 3). Empty (no key yet): m = -inf, l = 0, acc all 0.
/// `acc` points into the caller's memory.
struct AttentionPartial {
  float m = -INFINITY;     ///< running max of the scores
  float l = 0.0f;          ///< running sum of exp(s_j - m)
  std::span<float> acc;    ///< (head_dim) running sum of exp(s_j - m) v_j
};

/// Task 2. Folds one tile of keys into `row` (the online softmax, Milakov & Gimelshein 2018;
/// FlashAttention Algorithm 1, lines 9-12; docs/07_flash_attention.md, section 3 and "Task 2").
/// scores: (n_keys >= 1) s_j = scale q . k_j for the tile's keys this row may see, all finite;
/// the function may overwrite them (the kernel never reads them again). v: (n_keys rows of
/// row.acc.size() floats), row j at v + j * v_stride. Afterwards `row` is the partial
/// (AttentionPartial's invariant) over its old keys and these, as if all had been seen at once,
/// whatever the old partial's max was; an empty row becomes the partial over this tile alone,
/// with no NaN. exp_shifted (below) is a fast exp; std::exp is fine too. Throws
/// InvalidArgument if scores is empty or v_stride < row.acc.size().
void online_softmax_update(AttentionPartial& row, std::span<float> scores, const float* v, int64_t v_stride);

/// Task 3. Merges `other` (a partial over a disjoint set of the same row's keys) into `into`, so
/// that `into` becomes the partial over both sets (AttentionPartial's invariant): Flash-Decoding's
/// reduction over KV splits (Dao, Haziza, Massa, Sizov 2023), FlashAttention-2's combine across
/// warps; docs/07_flash_attention.md, section 6 and "Task 3". Either may be empty (l = 0):
/// merging an empty partial changes nothing; merging into an empty one copies; no NaN either way.
/// Throws InvalidArgument if the two acc spans differ in length.
void merge_partials(AttentionPartial& into, const AttentionPartial& other);

/// What the causal mask does to one (query tile, key tile) pair.
enum class TileMask {
  Skip,     ///< every key is after every query: the tile is never loaded
  Full,     ///< every key is at or before every query: no mask needed
  Partial,  ///< the diagonal: row at position p sees the tile's keys <= p
};

/// Task 4. The causal tile rule (FlashAttention-2, sec. 3.1.1: skip the blocks above the
/// diagonal, mask only the ones on it). Queries at positions q_first .. q_last, keys at
/// positions k_first .. k_last (inclusive, first <= last); a query at p may see keys <= p.
/// Throws InvalidArgument if q_first > q_last, k_first > k_last or a position is negative.
TileMask causal_tile_mask(int64_t q_first, int64_t q_last, int64_t k_first, int64_t k_last);

/// x_j = exp(x_j - shift) for all j (kernels/cpu/exp_shifted.cpp: Cephes-style range reduction
/// exp(x) = 2^n e^r, |r| <= ln2/2, and a degree-6 polynomial, 8 lanes at a time with AVX2;
/// relative error within a few 1e-7; arguments below -87.3 give 0, above 88.37 are clamped
/// there). A helper for Task 2, not an exercise: std::exp gives the same answer, slower.
void exp_shifted(std::span<float> x, float shift);

// ---- the kernels -----------------------------------------------------------------------------

/// Element type of a paged KV layer (the pool's --kv-cache-dtype).
enum class KvElement { F32, F16, Int8 };

/// One layer of a paged KV pool, (n_slots, n_kv_heads, head_dim) elements each for K and V,
/// slot = block * block_size + offset (PagedAttention). F16: IEEE half bits; Int8: codes with
/// one f32 scale per (slot, KV head) in k_scales / v_scales (element = scale * code).
struct PagedKvLayer {
  KvElement element = KvElement::F32;  ///< what k and v hold
  const void* k = nullptr;             ///< keys: float, uint16_t (f16 bits) or int8_t
  const void* v = nullptr;             ///< values, as k
  const float* k_scales = nullptr;     ///< Int8 only: (n_slots, n_kv_heads)
  const float* v_scales = nullptr;     ///< Int8 only: (n_slots, n_kv_heads)
};

/// A batch as the attention kernels see it: vLLM's flattened varlen layout (ForwardBatch).
/// Sequence s owns rows query_start_loc[s] .. query_start_loc[s + 1] - 1, the last of its
/// seq_lens[s] positions; row i of s is at position p = seq_lens[s] - query_len(s) + (i -
/// query_start_loc[s]) and (causal) sees keys 0 .. p, or (not causal) all seq_lens[s] keys.
/// Position j of s is at slot block_tables[s * max_blocks_per_seq + j / block_size] *
/// block_size + j % block_size.
struct AttentionBatch {
  const int32_t* query_start_loc = nullptr;  ///< (n_seqs + 1), cu_seqlens_q
  const int32_t* seq_lens = nullptr;         ///< (n_seqs) cached + new tokens
  const int32_t* block_tables = nullptr;     ///< (n_seqs, max_blocks_per_seq)
  int64_t n_seqs = 0;
  int64_t max_blocks_per_seq = 0;
  int64_t block_size = 0;                    ///< tokens per block
  bool causal = true;
  /// Tree verification (ForwardBatch::tree_masks; SpecInfer, Miao et al. 2024, sec. 4): (n_seqs)
  /// T_s = tree_lens[s] in [0, min(64, query_len(s))], or null = no trees. Sequence s's last T_s
  /// rows are draft-tree nodes t = 0 .. T_s - 1 and its last T_s keys (seq_len - T_s ..) their
  /// K/V. Causal only.
  const int32_t* tree_lens = nullptr;
  /// (n_tokens) per row its node's tree mask (bit j: tree node j is the node or an ancestor;
  /// lio/spec_decode.h, tree_attention_masks), 0 for rows outside a tree; null with tree_lens.
  /// Tree node t of sequence s sees every key < seq_len - T_s and key seq_len - T_s + j iff bit
  /// j of its mask; with a window, it is measured from the node's real position P = seq_len -
  /// T_s + depth(t) (depth = popcount - 1, the position the chain of its ancestors would give
  /// it): prefix keys > P - window, and ancestor j only if depth(j) > depth(t) - window.
  /// cpu::flash_attention runs each node as a query row of its own at position P over its path's
  /// keys in path order (the prefix, then its ancestors by depth, then itself): the same tiles,
  /// lanes and folds as the last row of that chain, so its output is bitwise the chain's (greedy
  /// tree speculation gives plain greedy's text exactly). cpu::naive_attention masks its score
  /// rows instead: equal to rounding.
  const uint64_t* tree_masks = nullptr;
};

/// Shapes and scale shared by both kernels.
struct AttentionShape {
  int64_t n_heads = 0;     ///< query heads
  int64_t n_kv_heads = 0;  ///< KV heads, each read by n_heads / n_kv_heads consecutive query heads
  int64_t head_dim = 0;
  float scale = 0.0f;      ///< usually 1 / sqrt(head_dim)
  /// Sliding-window attention (Beltagy et al. 2020, "Longformer", sec. 3.1; Gemma 3's local
  /// layers): a causal row at position p sees only keys p - window + 1 .. p; 0 = no window.
  /// The flash kernel never gathers a key tile wholly before a row tile's window.
  int64_t window = 0;
  /// Attention logit soft-capping (Gemma 2, sec. 2; llama.cpp's attn_logit_softcapping): each
  /// score s = scale * q.k becomes softcap * tanh(s / softcap) before the mask and softmax, in
  /// both kernels alike (softcap_scores). 0 = off.
  float softcap = 0.0f;
};

/// s[j] = cap * tanh(s[j] / cap) for j < n (Gemma 2's attention logit soft-capping, the form
/// llama.cpp's ggml_tanh path computes); nothing when cap == 0. The one place both CPU kernels
/// (and CpuBackend's decode path) cap their scores, so every --attention-backend agrees.
void softcap_scores(float* s, int64_t n, float cap);

/// Tile sizes of cpu::flash_attention (named, fixed: a row's result must not depend on them
/// changing between calls, so they are not options).
inline constexpr int64_t kFlashQueryTile = 16;   ///< Br: query rows per tile (x the GQA group)
inline constexpr int64_t kFlashKeyTile = 64;     ///< Bc: keys per tile
inline constexpr int64_t kFlashKvSplit = 512;    ///< keys per split (a multiple of Bc)
static_assert(kFlashKvSplit % kFlashKeyTile == 0, "a split holds whole key tiles");

/// One query tile's view of its key tiles, for Task 5: the tile's shape, and the given data
/// movement and score product over one key tile at a time (vectorized: a register-blocked
/// K^T product over keys gathered through the block table, dequantized from f16 / int8 pools).
/// Query vector i = r * group + hh is row r (at position pos0 + r) of query head hh of the
/// group that reads this KV head (GQA, Ainslie et al. 2023).
class FlashTileSource {
 public:
  virtual ~FlashTileSource() = default;
  int64_t n_rows = 0;    ///< query rows of the tile (<= kFlashQueryTile)
  int64_t group = 1;     ///< query heads per KV head: n_vectors = n_rows * group
  int64_t head_dim = 0;  ///< elements of a query, key and value vector
  int64_t pos0 = 0;      ///< position of row 0; row r is at pos0 + r
  bool causal = true;    ///< row r sees keys <= pos0 + r (false: every key of the sequence)
  int64_t window = 0;    ///< sliding window (causal only): row r sees keys > pos0 + r - window; 0 = none
  /// Gathers keys k0 .. k0 + nk - 1 (1 <= nk <= kFlashKeyTile) and returns their scores
  /// S = scale Q K^T for every query vector: (n_vectors, kFlashKeyTile) row-major, row i's first
  /// nk entries valid (and yours to overwrite: Task 2 exponentiates them in place). *values is
  /// set to the same keys' values, (nk, head_dim) row-major. Valid until the next call.
  virtual float* load_tile(int64_t k0, int64_t nk, const float** values) = 0;
  /// Counts a key tile left out because it lies wholly before every row's window (statistics).
  virtual void window_skipped() = 0;
};

/// Task 5. FlashAttention-2's inner loop for one query tile (Dao 2023, Algorithm 1, lines 6-10;
/// docs/07_flash_attention.md, sections 4-5 and "Task 5"). partials: (n_vectors) the vectors'
/// partials, empty or holding earlier keys, acc of head_dim floats each. Afterwards each query
/// vector's partial also covers exactly the keys of [key_begin, key_end) its row may see
/// (causal: none after its position; in a window: none before it), folded with Task 2 in key
/// order, in tiles of at most kFlashKeyTile keys starting at key_begin (a multiple of
/// kFlashKeyTile); a row that may see none of a tile's keys is left alone. No tile is loaded
/// (src.load_tile) that no row of the query tile may see because of the causal mask, and none
/// that lies wholly before every row's window when `skip_window_tiles` (each of those is
/// reported by src.window_skipped() instead). Throws InvalidArgument if partials has the wrong
/// size or key_begin > key_end, and what Tasks 2 and 4 throw.
void flash_tile_loop(FlashTileSource& src, int64_t key_begin, int64_t key_end, std::span<AttentionPartial> partials,
                     bool skip_window_tiles);

/// Task 5, the end of Algorithm 1 (line 12): from a finished partial over a row's keys, the
/// row's attention output sum_j softmax(s)_j v_j (out: head_dim floats) and, if `lse` is not
/// null, the logsumexp of its scaled scores, log sum_j exp(s_j) (natural log). Throws
/// InvalidArgument if out's size differs from acc's or the partial is empty (l = 0: no key was
/// folded, which a causal row never is).
void finish_partial(const AttentionPartial& partial, std::span<float> out, float* lse);

/// How cpu::flash_attention spreads its work over threads; never changes its result.
struct FlashOptions {
  /// Flash-Decoding: when a batch has too few (sequence, KV head, query tile) items to keep
  /// every thread busy, its KV splits run in parallel and their partials are merged
  /// afterwards. Off: each item walks its splits in order on one thread. The result is
  /// bitwise the same either way (each row always folds the same split partials in the same
  /// order with Task 3), so the flag changes time only.
  bool split_kv = true;
  /// Sliding window: key tiles wholly before a query tile's window are skipped (never gathered).
  /// Off: they are gathered, scored and masked to nothing — the same result, kept so chapter 07
  /// can measure what skipping saves.
  bool skip_window_tiles = true;
};

/// Memory a kernel call used, for the chapter's O(N^2) vs O(N) curve.
struct AttentionStats {
  int64_t scratch_bytes = 0;  ///< bytes of scratch allocated (scores for naive; tiles, partials for flash)
  int64_t key_tiles = 0;      ///< flash: (query tile, key tile) pairs gathered and scored
  int64_t window_skipped_tiles = 0;  ///< flash: pairs skipped as wholly outside the sliding window
};

/// The caller-owned scratch of cpu::flash_attention (no hidden allocation): grown on demand,
/// kept between calls. One per backend.
struct FlashWorkspace {
  std::vector<float> tiles;     ///< per thread: K^T tile, V tile, scores, accumulators
  std::vector<float> partials;  ///< split-KV partials (m, l, acc) when splits run in parallel
};

/// Tiled causal (or full) grouped-query attention over a paged KV pool, for a batch mixing
/// prefill chunks and decode rows (FlashAttention-2 forward, Dao 2023, Algorithm 1, on a CPU):
/// for each sequence, KV head g and tile of kFlashQueryTile rows, the tile's query vectors of
/// all n_heads / n_kv_heads heads that read g are processed together, so each K/V tile is
/// gathered through the block table (and dequantized, for an f16 / int8 pool) once per group.
/// Keys are walked in splits of kFlashKvSplit, each split by flash_tile_loop (Task 5) in tiles
/// of kFlashKeyTile (scores of a tile come from a register-blocked K^T product; Tasks 4 and 2
/// decide what each row folds); the splits' partials folded left to right with merge_partials
/// (Task 3); each row's output and logsumexp by finish_partial (Task 5).
/// A row's result depends only on its own query and keys: never on the batch, the other rows
/// of its tile, the thread count or options.split_kv (CPU batch invariance).
/// q, out: (n_tokens, n_heads, head_dim); lse: (n_tokens, n_heads) each row's logsumexp of its
/// scaled scores (natural log), or null. Threads: OpenMP over work
/// items. Returns the scratch bytes it used. Throws InvalidArgument for a bad shape (n_heads not
/// a multiple of n_kv_heads, head_dim < 1, a null pointer, block_size < 1), and what Tasks 2-5
/// throw.
AttentionStats flash_attention(const float* q, const PagedKvLayer& kv, float* out, float* lse,
                               const AttentionBatch& batch, const AttentionShape& shape,
                               FlashWorkspace& workspace, const FlashOptions& options = {});

/// Standard attention, the naive twin (Vaswani et al. 2017, eq. 1; "standard attention
/// implementation", Dao et al. 2022, Algorithm 0): for each sequence, its K and V are gathered
/// from the pool (f32), S = scale Q K^T (n_heads, query_len, n_keys) is materialized in full,
/// masked (causal: -inf above the diagonal), softmaxed row by row in place (running max
/// subtracted) and multiplied by V. Same contract as flash_attention (lse likewise); `scores`
/// is the caller's buffer for S, grown to the largest sequence's attention_score_bytes.
/// Threads: OpenMP over (head, query). Returns the scratch bytes: S plus the gathered K/V.
/// Throws InvalidArgument as flash_attention.
AttentionStats naive_attention(const float* q, const PagedKvLayer& kv, float* out, float* lse,
                               const AttentionBatch& batch, const AttentionShape& shape,
                               std::vector<float>& scores);

}  // namespace lio::cpu
