// Chapter 07, Tasks 1-5 — YOUR implementation: the score matrix's bytes, the online-softmax
// update of one tile, the merge of two partials (Flash-Decoding's reduction), the causal tile
// rule, and one query tile's loop over its key tiles with the final normalization.
// Declarations and contracts: kernels/cpu/flash_attention.h. Lesson:
// docs/07_flash_attention.md. Grade: ctest -R ch07_task_K (K = 1..5), or scripts/grade.sh 07
// Built with -DLIO_EXERCISES=07, the engine's CPU attention (cpu::flash_attention) runs on
// Tasks 2-5 below: `build/bin/lio generate` then attends with your loop and recurrence.
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
  // TODO(Task 1): the bytes standard attention needs to hold every score of S = Q K^T at once,
  //   for `batch` sequences of n_heads heads, n_queries x n_keys scores each, bytes_per_element
  //   bytes per score. Units: bytes (not GB, not GiB: the caller converts).
  //   Must hold: lecture note 003's batch 2, 32 heads, N = 4,096, fp16 gives 2,147,483,648.
  //   Throw InvalidArgument if an argument is negative or the result overflows int64_t.
  //   Lesson: docs/07_flash_attention.md, "Task 1".
  (void)batch, (void)n_heads, (void)n_queries, (void)n_keys, (void)bytes_per_element;
  throw NotImplemented(
      "Task 1 (exercises/07_flash_attention/flash_attention.cpp): attention_score_bytes — "
      "see docs/07_flash_attention.md, Task 1");
}

// ---- Task 2 -----------------------------------------------------------------------------------

void online_softmax_update(AttentionPartial& row, std::span<float> scores, const float* v, int64_t v_stride) {
  // TODO(Task 2): fold one tile of keys into the row's running (m, l, acc).
  //   In:  row = the partial over the keys seen so far (empty: m = -inf, l = 0, acc = 0);
  //        scores (n_keys) = scale q . k_j for this tile; v = the tile's values, row j at
  //        v + j * v_stride, row.acc.size() floats each.
  //   Out: row = the partial over the old keys AND this tile, as if all had been seen at once
  //        (AttentionPartial's invariant: m the max score, l = sum exp(s - m),
  //        acc = sum exp(s - m) v); scores may be overwritten (the kernel does not read them
  //        again).
  //   Must hold: the result does not depend on how the keys were cut into tiles, whether a
  //   later tile's scores are larger or smaller than the earlier ones. exp_shifted() in
  //   flash_attention.h is a fast exp; std::exp works too. An empty row must not make NaN.
  //   Throw InvalidArgument if scores is empty or v_stride < row.acc.size().
  //   Lesson: docs/07_flash_attention.md, "Task 2" (FlashAttention, Algorithm 1, lines 9-12).
  (void)row, (void)scores, (void)v, (void)v_stride;
  throw NotImplemented(
      "Task 2 (exercises/07_flash_attention/flash_attention.cpp): online_softmax_update — "
      "see docs/07_flash_attention.md, Task 2");
}

// ---- Task 3 -----------------------------------------------------------------------------------

void merge_partials(AttentionPartial& into, const AttentionPartial& other) {
  // TODO(Task 3): combine two partials of the same query row over disjoint sets of keys, so
  //   `into` becomes the partial over both (Flash-Decoding merges its KV splits this way).
  //   Both (m, l, acc) are relative to their own max. Either may be empty (l = 0): merging an
  //   empty one changes nothing, merging into an empty one copies; no NaN in either case.
  //   Throw InvalidArgument if the acc spans differ in length.
  //   Lesson: docs/07_flash_attention.md, "Task 3".
  (void)into, (void)other;
  throw NotImplemented(
      "Task 3 (exercises/07_flash_attention/flash_attention.cpp): merge_partials — "
      "see docs/07_flash_attention.md, Task 3");
}

// ---- Task 4 -----------------------------------------------------------------------------------

TileMask causal_tile_mask(int64_t q_first, int64_t q_last, int64_t k_first, int64_t k_last) {
  // TODO(Task 4): what the causal mask does to the tile pair: queries at positions
  //   q_first..q_last, keys at k_first..k_last (inclusive); a query at p sees keys <= p.
  //   Skip: no query of the tile sees any key of it. Full: every query sees every key.
  //   Partial: anything else (the diagonal). Throw InvalidArgument if first > last or a
  //   position is negative. Lesson: docs/07_flash_attention.md, "Task 4".
  (void)q_first, (void)q_last, (void)k_first, (void)k_last;
  throw NotImplemented(
      "Task 4 (exercises/07_flash_attention/flash_attention.cpp): causal_tile_mask — "
      "see docs/07_flash_attention.md, Task 4");
}

// ---- Task 5 -----------------------------------------------------------------------------------

void flash_tile_loop(FlashTileSource& src, int64_t key_begin, int64_t key_end, std::span<AttentionPartial> partials,
                     bool skip_window_tiles) {
  // TODO(Task 5): FlashAttention-2's inner loop for one query tile (the contract is in
  //   flash_attention.h). In: src (the query tile: n_rows rows x group heads, positions from
  //   pos0, causal or not, a sliding window or not; load_tile gives a key tile's scores and
  //   values), a key range [key_begin, key_end), and one partial per query vector.
  //   Out: every vector's partial also covers exactly the keys of the range its row may see,
  //   folded with your Task 2 in tiles of at most kFlashKeyTile keys; no tile loaded that no
  //   row of this query tile may see (your Task 4 tells), nor, with skip_window_tiles, one
  //   wholly before every row's window (count it with src.window_skipped()).
  //   Throw InvalidArgument for a partials span of the wrong size or a reversed range.
  //   Lesson: docs/07_flash_attention.md, "Task 5" (FlashAttention-2, Algorithm 1, lines 6-10).
  (void)src, (void)key_begin, (void)key_end, (void)partials, (void)skip_window_tiles;
  throw NotImplemented(
      "Task 5 (exercises/07_flash_attention/flash_attention.cpp): flash_tile_loop — "
      "see docs/07_flash_attention.md, Task 5");
}

void finish_partial(const AttentionPartial& partial, std::span<float> out, float* lse) {
  // TODO(Task 5): the row's output and logsumexp from its finished partial (Algorithm 1,
  //   line 12); the contract in flash_attention.h says what to refuse.
  (void)partial, (void)out, (void)lse;
  throw NotImplemented(
      "Task 5 (exercises/07_flash_attention/flash_attention.cpp): finish_partial — "
      "see docs/07_flash_attention.md, Task 5");
}

}  // namespace lio::cpu
