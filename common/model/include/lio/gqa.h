// gqa.h — chapter 02: the KV-head axis (MHA, GQA, MQA).
//
// Multi-head attention (Vaswani et al. 2017) gives every query head its own key/value head.
// Multi-query attention (Shazeer 2019) shares one K/V head among all query heads; grouped-query
// attention (Ainslie et al. 2023) shares each of n_kv_heads K/V heads among a group of
// n_heads / n_kv_heads query heads. Bytes per token follow chapter 01's formula with
// n_kv_heads; multi-head latent attention, which caches no heads at all, is in lio/mla.h.
//
// Tasks 1 and 3 of chapter 02 are declared here and defined in exercises/02_gqa_mla/gqa.cpp
// (yours) or solutions/02_gqa_mla/gqa.cpp (the reference); the engine calls them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "lio/model_config.h"

namespace lio {

// ---- Task 1 -------------------------------------------------------------------------------

/// The key/value head that query head `h` reads in grouped-query attention (Ainslie et al.
/// 2023, sec. 2.2), in the head order of llama.cpp and Hugging Face's `repeat_kv`, which the
/// stored models were trained with (docs/02_gqa_mla.md, section 1). MHA is n_kv_heads ==
/// n_heads, MQA n_kv_heads == 1. Must hold: 9 query heads over 3 KV heads read 0 0 0 1 1 1 2 2
/// 2. The CPU backend's paged attention asks this for every (row, query head) pair.
/// Throws InvalidArgument unless 0 <= h < n_heads, n_kv_heads >= 1 and n_heads is a multiple
/// of n_kv_heads.
int64_t kv_head_for_query_head(int64_t h, int64_t n_heads, int64_t n_kv_heads);

// ---- Task 3 -------------------------------------------------------------------------------

/// Mean-pools the K (or V) projection's heads into fewer groups, as the GQA paper builds a
/// GQA/MQA checkpoint from an MHA one before uptraining (Ainslie et al. 2023, sec. 2.1: "the
/// projection matrices for key and value heads are mean pooled into a single projection").
/// w: (n_kv_heads * head_dim, cols) row-major, head j in rows j*head_dim .. (j+1)*head_dim-1.
/// Returns (n_groups * head_dim, cols): group g is the element-wise mean of the stored heads
/// that the query heads reading group g (Task 1 at n_groups) read before (Task 1 at
/// n_kv_heads), so every query head keeps an average of its own head (docs/02_gqa_mla.md,
/// section 4). Throws InvalidArgument if w.size() != n_kv_heads * head_dim * cols, a count is < 1,
/// or n_kv_heads is not a multiple of n_groups.
std::vector<float> mean_pool_kv_heads(std::span<const float> w, int64_t n_kv_heads, int64_t head_dim,
                                      int64_t cols, int64_t n_groups);

}  // namespace lio
