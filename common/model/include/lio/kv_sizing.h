// kv_sizing.h — how big the KV cache is, and how many sequences fit in memory.
// Chapter 01 exercise points (Tasks 1 and 2): declared here, defined in
// solutions/01_kv_cache/kv_sizing.cpp (reference) and exercises/01_kv_cache/kv_sizing.cpp (yours).
//
// Per token, every layer caches one key and one value vector per KV head:
//   bytes/token = 2 (K and V) x n_layers x n_kv_heads x head_dim x bytes/element
// (Pope et al. 2022, "Efficiently Scaling Transformer Inference", sec. 2.1; with GQA the
// count is n_kv_heads, not n_heads — Ainslie et al. 2023).
//
// Units are explicit: every size is an int64_t count of bytes, and gib()/gb() convert from
// the two units people mix up — GiB = 2^30 bytes, GB = 10^9 bytes.
#pragma once

#include <cstdint>

#include "lio/model_config.h"

namespace lio {

/// Element type of cached keys and values.
enum class KvDtype { F32, F16, BF16, INT8 };

/// Bytes per element of `dtype`: 4, 2, 2, 1.
constexpr int64_t kv_dtype_bytes(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::F32: return 4;
    case KvDtype::F16:
    case KvDtype::BF16: return 2;
    case KvDtype::INT8: return 1;
  }
  return 0;
}

/// `n` binary gigabytes (GiB, 2^30 bytes each) in bytes, rounded down.
constexpr int64_t gib(double n) { return static_cast<int64_t>(n * 1073741824.0); }
/// `n` decimal gigabytes (GB, 10^9 bytes each) in bytes, rounded down.
constexpr int64_t gb(double n) { return static_cast<int64_t>(n * 1e9); }

/// Task 1. Bytes of KV cache for `batch` sequences of `seq_len` tokens each:
///   2 x n_layers x n_kv_heads x head_dim x seq_len x batch x kv_dtype_bytes(dtype).
/// Example: LLaMA-7B (32 layers, 32 KV heads, head_dim 128), fp16, seq 4096, batch 16 ->
/// 34,359,738,368 bytes = 32 GiB. Throws InvalidArgument if seq_len or batch is negative.
int64_t kv_cache_bytes(const ModelConfig& config, int64_t seq_len, int64_t batch, KvDtype dtype);

/// Task 1 (second part). How many tokens of KV cache fit in one GiB (2^30 bytes), as a
/// real number: 2^30 / (bytes per token). LLaMA-7B fp16: 2048 tokens per GiB.
double kv_tokens_per_gib(const ModelConfig& config, KvDtype dtype);

/// Task 2. The largest batch of `seq_len`-token sequences whose KV cache fits beside the
/// weights: max b with weight_bytes + kv_cache_bytes(config, seq_len, b, dtype) <= budget_bytes.
/// Returns 0 when not even one sequence fits. Both sizes are in bytes: pass gib(40) or gb(40)
/// and see the difference (LLaMA-7B fp16, seq 4096: 13 with gib(40)/gib(14), 12 with gb(40)/gb(14)).
/// Throws InvalidArgument if budget_bytes or weight_bytes is negative or seq_len <= 0.
int64_t max_batch_under_budget(const ModelConfig& config, int64_t seq_len, KvDtype dtype,
                               int64_t budget_bytes, int64_t weight_bytes);

}  // namespace lio
