// kv_head_variants.h — chapter 02's offline tool: the course model rebuilt with another number
// of K/V heads (MHA, GQA:N, MQA) in memory, for `--attention` on every program and
// `ch02_gqa_mla`. Built on Task 3 (mean_pool_kv_heads, lio/gqa.h). Defined in
// common/tools/src/kv_head_variants.cpp; not part of the serving core.
#pragma once

#include <cstdint>
#include <string>

#include "lio/gqa.h"
#include "lio/model_config.h"
#include "lio/model_loader.h"

namespace lio {

/// Parses --attention against `config`: "gqa" (the model as stored), "mha" (n_heads KV
/// heads), "mqa" (1), or "gqa:N" (N KV heads). Returns the number of KV heads. Throws
/// InvalidArgument for other text, or an N that does not divide n_heads, or one that is
/// neither a multiple nor a divisor of the stored n_kv_heads (the conversion below needs one).
int64_t parse_attention_variant(const std::string& text, const ModelConfig& config);

/// A model with another number of K/V heads (make_kv_head_variant's result).
struct KvHeadVariant {
  ModelConfig config;  ///< the stored config with n_kv_heads replaced
  Weights weights;     ///< Wk/Wv rebuilt, everything else shared
};

/// The stored model with `n_kv_heads` K/V heads, built in memory (no new file):
/// - more heads than stored (towards MHA): each stored head's K and V rows are repeated
///   n_kv_heads / stored times, bit for bit in the stored dtype; query head h then reads a copy
///   of the head it read before, so the model computes exactly the same function (Hugging
///   Face's `repeat_kv`, materialised);
/// - fewer (towards MQA): each group's heads are mean-pooled (mean_pool_kv_heads, Task 3) after
///   dequantizing to f32; the new K/V matrices are f32. The function changes: the GQA paper
///   uptrains after this step, we do not.
/// Other tensors are shared with `model` (which must outlive the result's matrices).
/// Returns {config with n_kv_heads replaced, weights}. Throws InvalidArgument as
/// parse_attention_variant for a bad count.
KvHeadVariant make_kv_head_variant(const ModelConfig& config, const Weights& weights, int64_t n_kv_heads);

/// make_kv_head_variant applied to a loaded model in place (config and weights replaced;
/// the tokenizer kept). A no-op when n_kv_heads equals the stored count.
void apply_kv_head_variant(LoadedModel& model, int64_t n_kv_heads);

}  // namespace lio
