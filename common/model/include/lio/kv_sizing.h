// kv_sizing.h — how big the KV cache is, and how many sequences fit in memory.
// Chapter 01 exercise points (Tasks 1 and 2): declared here, defined in
// solutions/01_kv_cache/kv_sizing.cpp (reference) and exercises/01_kv_cache/kv_sizing.cpp (yours).
// docs/01_kv_cache.md, section 2 ("What the cache stores, and how big it is"), derives the size
// of the cache from what a decode step reads back (Pope et al. 2022, "Efficiently Scaling
// Transformer Inference", sec. 2.1; grouped-query attention, Ainslie et al. 2023).
//
// Units are explicit. Task 1 answers in int64_t counts of bytes; Task 2 takes its memory
// budget as people write it, a number with a unit (MemorySize: "40 GB" from a spec sheet,
// "14 GiB" from a formula), and converts it itself. gib()/gb() are the tests' byte counts.
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

/// Task 1. Bytes of KV cache that `batch` sequences of `seq_len` tokens each occupy, at
/// kv_dtype_bytes(dtype) bytes per cached element: everything a decode step reads back instead
/// of recomputing, for every layer and token (docs/01_kv_cache.md, section 2; Kwon et al. 2023,
/// sec. 2). Linear in seq_len and in batch; 0 for 0 tokens. Examples: LLaMA-7B (32 layers,
/// 32 KV heads, head_dim 128), fp16, seq 4096, batch 16 -> 34,359,738,368 bytes = 32 GiB;
/// SmolLM2-135M (30 layers, 9 query heads, 3 KV heads, head_dim 64), f32, one token -> 46,080
/// bytes (what `lio info` prints). Throws InvalidArgument if seq_len or batch is negative.
int64_t kv_cache_bytes(const ModelConfig& config, int64_t seq_len, int64_t batch, KvDtype dtype);

/// Task 1 (second part). How many tokens of KV cache fit in one GiB (2^30 bytes), as a
/// real number. LLaMA-7B fp16: 2048 tokens per GiB.
double kv_tokens_per_gib(const ModelConfig& config, KvDtype dtype);

/// Unit of a MemorySize. Decimal units (SI, what spec sheets and drive labels use):
/// MB = 10^6 bytes, GB = 10^9 bytes. Binary units (IEC 80000-13, what allocators and the KV
/// formula produce): MiB = 2^20 bytes, GiB = 2^30 bytes.
enum class MemoryUnit { Bytes, MB, MiB, GB, GiB };

/// A memory size as written by a person: `value` of `unit` ({40, MemoryUnit::GB} is 40 GB =
/// 4 x 10^10 bytes; {14, MemoryUnit::GiB} is 14 GiB = 15,032,385,536 bytes).
struct MemorySize {
  double value = 0.0;                    ///< how many units (may be fractional: 15.5 GiB)
  MemoryUnit unit = MemoryUnit::Bytes;   ///< which unit `value` counts
};

/// Task 2. The largest batch b of `seq_len`-token sequences whose KV cache (Task 1) fits in
/// `budget` beside `weights`: the bytes of the weights and of b sequences' cache together do
/// not exceed the budget's bytes, and b + 1 sequences would. A size's bytes are its value in its
/// unit (MemoryUnit), rounded down to whole bytes. Returns 0 when not even one sequence fits.
/// LLaMA-7B fp16, seq 4096 (2 GiB per sequence): 13 for a {40, GiB} budget beside {14, GiB} of
/// weights, 12 for {40, GB} beside {14, GB} (26 x 10^9 bytes is 12.1 sequences); a GB read as
/// a GiB gives 13 for both (docs/01_kv_cache.md, section 2, "Memory budgeting").
/// Throws InvalidArgument if seq_len <= 0, a value is negative or not finite, a unit is not one
/// of MemoryUnit's values, or a size does not fit in int64_t bytes (8 EiB).
int64_t max_batch_under_budget(const ModelConfig& config, int64_t seq_len, KvDtype dtype, MemorySize budget,
                               MemorySize weights);

}  // namespace lio
