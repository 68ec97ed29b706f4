// Chapter 01, Task 3 — reference solution: append one step's K/V, read the cached prefix.
// Declarations: common/model/include/lio/kv_cache.h. Layout of each slab: (capacity, kv_dim) per layer.
#include <algorithm>
#include <string>

#include "lio/error.h"
#include "lio/kv_cache.h"

namespace lio {

void KvCache::write(int64_t layer, int64_t pos, const float* k, const float* v) {
  if (pos < 0 || pos >= capacity_tokens_) {
    throw InvalidArgument("KV cache position " + std::to_string(pos) + " outside capacity " +
                          std::to_string(capacity_tokens_) + " tokens");
  }
  if (layer < 0 || layer >= n_layers_) {
    throw InvalidArgument("KV cache layer " + std::to_string(layer) + " outside [0, " +
                          std::to_string(n_layers_) + ")");
  }
  // Row `pos` of this layer's slab: the token's K (and V) for every KV head, contiguous.
  std::copy_n(k, kv_dim_, keys(layer) + pos * kv_dim_);
  std::copy_n(v, kv_dim_, values(layer) + pos * kv_dim_);
}

std::span<const float> KvCache::key_prefix(int64_t layer, int64_t n_tokens) const {
  if (n_tokens < 0 || n_tokens > capacity_tokens_ || layer < 0 || layer >= n_layers_) {
    throw InvalidArgument("KV cache prefix of " + std::to_string(n_tokens) + " tokens at layer " +
                          std::to_string(layer) + " is outside the cache");
  }
  // Contiguous cache: the prefix is simply the first n_tokens rows (chapter 04 pages it).
  return {keys(layer), static_cast<size_t>(n_tokens * kv_dim_)};
}

std::span<const float> KvCache::value_prefix(int64_t layer, int64_t n_tokens) const {
  if (n_tokens < 0 || n_tokens > capacity_tokens_ || layer < 0 || layer >= n_layers_) {
    throw InvalidArgument("KV cache prefix of " + std::to_string(n_tokens) + " tokens at layer " +
                          std::to_string(layer) + " is outside the cache");
  }
  return {values(layer), static_cast<size_t>(n_tokens * kv_dim_)};
}

}  // namespace lio
