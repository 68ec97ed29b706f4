// Chapter 01, Tasks 1 and 2 — reference solution. Declarations: common/model/include/lio/kv_sizing.h.
#include "lio/kv_sizing.h"

#include <cmath>
#include <string>

#include "lio/error.h"

namespace lio {

int64_t kv_cache_bytes(const ModelConfig& config, int64_t seq_len, int64_t batch, KvDtype dtype) {
  if (seq_len < 0 || batch < 0) {
    throw InvalidArgument("kv_cache_bytes: seq_len and batch must be >= 0, got " +
                          std::to_string(seq_len) + " and " + std::to_string(batch));
  }
  // bytes/token = 2 * n_layers * n_kv_heads * head_dim * bytes/element, the lesson's
  // 2 x n_layers x n_kv_heads x head_dim x bytes/element (docs/01_kv_cache.md, section 2):
  // K and V, per layer, per KV head (not per query head: GQA shares them), per dimension.
  const int64_t per_token = 2 * config.n_layers * config.n_kv_heads * config.head_dim * kv_dtype_bytes(dtype);
  return per_token * seq_len * batch;
}

double kv_tokens_per_gib(const ModelConfig& config, KvDtype dtype) {
  return static_cast<double>(gib(1)) / static_cast<double>(kv_cache_bytes(config, 1, 1, dtype));
}

int64_t max_batch_under_budget(const ModelConfig& config, int64_t seq_len, KvDtype dtype, MemorySize budget,
                               MemorySize weights) {
  if (seq_len <= 0) {
    throw InvalidArgument("max_batch_under_budget: seq_len must be > 0, got " + std::to_string(seq_len));
  }
  // Bytes in `size`, rounded down. The unit is the whole lesson: a GB is 10^9 bytes, a GiB 2^30
  // (7.4% more), and a spec sheet's "40 GB" read as 40 GiB overstates it by 2.95 GB.
  auto bytes_of = [](MemorySize size, const char* what) -> int64_t {
    double bytes_per_unit = 0.0;
    switch (size.unit) {
      case MemoryUnit::Bytes: bytes_per_unit = 1.0; break;
      case MemoryUnit::MB: bytes_per_unit = 1e6; break;
      case MemoryUnit::MiB: bytes_per_unit = 1048576.0; break;
      case MemoryUnit::GB: bytes_per_unit = 1e9; break;
      case MemoryUnit::GiB: bytes_per_unit = 1073741824.0; break;
    }
    if (bytes_per_unit == 0.0) {
      throw InvalidArgument(std::string("max_batch_under_budget: ") + what + " has an unknown unit (" +
                            std::to_string(static_cast<int>(size.unit)) + ")");
    }
    const double bytes = size.value * bytes_per_unit;
    // 2^63 is exact in a double; !(value >= 0) also catches NaN.
    if (!(size.value >= 0.0) || !std::isfinite(bytes) || bytes >= 9223372036854775808.0) {
      throw InvalidArgument(std::string("max_batch_under_budget: ") + what +
                            " must be a finite size >= 0 that fits in int64 bytes, got " + std::to_string(size.value));
    }
    return static_cast<int64_t>(bytes);  // truncation = floor for bytes >= 0
  };
  const int64_t free_bytes = bytes_of(budget, "budget") - bytes_of(weights, "weights");
  if (free_bytes <= 0) return 0;
  // free / per_seq, rounded down by integer division: a sequence either fits whole or not at all.
  return free_bytes / kv_cache_bytes(config, seq_len, 1, dtype);
}

}  // namespace lio
