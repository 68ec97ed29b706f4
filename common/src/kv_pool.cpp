#include "lio/kv_pool.h"

#include <algorithm>
#include <string>

#include "lio/error.h"

namespace lio {

int64_t kv_block_bytes(const ModelConfig& config, int64_t block_size) {
  return 2 * config.n_layers * block_size * config.kv_dim() * static_cast<int64_t>(sizeof(float));
}

int64_t kv_blocks_for_budget(const ModelConfig& config, int64_t block_size, int64_t budget_bytes) {
  if (block_size < 1) throw InvalidArgument("--block-size must be >= 1, got " + std::to_string(block_size));
  if (budget_bytes < 0) throw InvalidArgument("KV budget must be >= 0 bytes, got " + std::to_string(budget_bytes));
  return budget_bytes / kv_block_bytes(config, block_size);
}

KvPool::KvPool(const ModelConfig& model, const KvPoolConfig& config)
    : config_(config), n_layers_(model.n_layers), kv_dim_(model.kv_dim()) {
  if (config.block_size < 1 || config.n_blocks < 1) {
    throw InvalidArgument("KV pool: block_size and n_blocks must be >= 1, got " +
                          std::to_string(config.block_size) + " and " + std::to_string(config.n_blocks));
  }
  if (config.n_blocks * config.block_size > INT32_MAX) {
    throw InvalidArgument("KV pool: " + std::to_string(config.n_blocks * config.block_size) +
                          " slots exceed the int32 slot ids of the slot mapping");
  }
}

HostKvPool::HostKvPool(const ModelConfig& model, const KvPoolConfig& config)
    : KvPool(model, config), slots_(model.n_layers, model.kv_dim(), config.n_blocks * config.block_size) {}

void KvPool::check_copy(int32_t src, int32_t dst) const {
  if (src < 0 || src >= n_blocks() || dst < 0 || dst >= n_blocks()) {
    throw InvalidArgument("KvPool::copy_block: block " + std::to_string(src < 0 || src >= n_blocks() ? src : dst) +
                          " is outside [0, " + std::to_string(n_blocks()) + ")");
  }
}

void HostKvPool::copy_block(int32_t src, int32_t dst) {
  check_copy(src, dst);
  const int64_t n = block_size() * kv_dim();  // floats per block and layer
  for (int64_t l = 0; l < n_layers(); ++l) {
    std::copy_n(keys(l) + src * n, n, keys(l) + dst * n);
    std::copy_n(values(l) + src * n, n, values(l) + dst * n);
  }
}

void HostKvPool::copy_block_to_host(int32_t block, float* host) {
  check_copy(block, block);
  const int64_t n = block_size() * kv_dim();
  for (int64_t l = 0; l < n_layers(); ++l) {
    std::copy_n(keys(l) + block * n, n, host + 2 * l * n);
    std::copy_n(values(l) + block * n, n, host + (2 * l + 1) * n);
  }
}

void HostKvPool::copy_block_from_host(const float* host, int32_t block) {
  check_copy(block, block);
  const int64_t n = block_size() * kv_dim();
  for (int64_t l = 0; l < n_layers(); ++l) {
    std::copy_n(host + 2 * l * n, n, keys(l) + block * n);
    std::copy_n(host + (2 * l + 1) * n, n, values(l) + block * n);
  }
}

}  // namespace lio
