#include "lio/kv_cache.h"

#include <new>
#include <string>

#include "lio/error.h"

namespace lio {

KvCache::KvCache(const ModelConfig& config, int64_t capacity_tokens)
    : n_layers_(config.n_layers),
      kv_dim_(config.kv_dim()),
      capacity_tokens_(capacity_tokens),
      layer_stride_(capacity_tokens * config.kv_dim()) {
  if (capacity_tokens <= 0 || capacity_tokens > config.context_length) {
    throw InvalidArgument("KV cache capacity must be in [1, " + std::to_string(config.context_length) +
                          "] tokens (the context length), got " + std::to_string(capacity_tokens));
  }
  k_ = zeroed(n_layers_ * layer_stride_);
  v_ = zeroed(n_layers_ * layer_stride_);
}

KvCache::KvCache(int64_t n_layers, int64_t kv_dim, int64_t capacity_tokens)
    : n_layers_(n_layers), kv_dim_(kv_dim), capacity_tokens_(capacity_tokens),
      layer_stride_(capacity_tokens * kv_dim) {
  if (n_layers < 1 || kv_dim < 1 || capacity_tokens < 1) {
    throw InvalidArgument("KV slots: n_layers, kv_dim and capacity must be >= 1, got " +
                          std::to_string(n_layers) + ", " + std::to_string(kv_dim) + ", " +
                          std::to_string(capacity_tokens));
  }
  k_ = zeroed(n_layers_ * layer_stride_);
  v_ = zeroed(n_layers_ * layer_stride_);
}

// KvCache::write, key_prefix and value_prefix are chapter 01's Task 3: they live in
// solutions/01_kv_cache/kv_cache_ops.cpp and exercises/01_kv_cache/kv_cache_ops.cpp.

void KvCache::set_n_tokens(int64_t n) {
  LIO_CHECK(n >= 0 && n <= capacity_tokens_, "n_tokens outside capacity");
  n_tokens_ = n;
}

KvCache::Slab KvCache::zeroed(int64_t n_floats) {
  auto* p = static_cast<float*>(std::calloc(static_cast<size_t>(n_floats), sizeof(float)));
  if (p == nullptr) throw std::bad_alloc();
  return Slab(p);
}

int64_t KvCache::allocated_bytes() const {
  return 2 * n_layers_ * layer_stride_ * static_cast<int64_t>(sizeof(float));
}

int64_t KvCache::used_bytes() const {
  return 2 * n_layers_ * kv_dim_ * n_tokens_ * static_cast<int64_t>(sizeof(float));
}

}  // namespace lio
