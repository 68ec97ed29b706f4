#include "lio/kv_pool.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "lio/error.h"
#include "lio/mla.h"

namespace lio {

const char* kv_cache_dtype_name(KvCacheDType dtype) {
  switch (dtype) {
    case KvCacheDType::F16: return "f16";
    case KvCacheDType::Int8: return "int8";
    case KvCacheDType::F32: break;
  }
  return "f32";
}

int64_t kv_elem_bytes(KvCacheDType d) { return d == KvCacheDType::F32 ? 4 : d == KvCacheDType::F16 ? 2 : 1; }

int64_t kv_slot_bytes(const ModelConfig& config, KvCacheDType dtype) {
  const int64_t scales = dtype == KvCacheDType::Int8 ? config.n_kv_heads * static_cast<int64_t>(sizeof(float)) : 0;
  return config.kv_dim() * kv_elem_bytes(dtype) + scales;
}

KvCacheGroups kv_cache_groups(const ModelConfig& config, bool hybrid) {
  KvCacheGroups g;
  std::vector<int64_t> full, windowed;
  int64_t window = 0;
  bool one_window = true;
  for (int64_t l = 0; l < config.n_layers; ++l) {
    const int64_t w = config.layer_window(l);
    if (w == 0) {
      full.push_back(l);
      continue;
    }
    if (window != 0 && w != window) one_window = false;
    window = w;
    windowed.push_back(l);
  }
  const bool split = hybrid && !config.is_mla() && one_window && !full.empty() && !windowed.empty();
  g.layer_group.assign(static_cast<size_t>(config.n_layers), 0);
  g.layer_lane.assign(static_cast<size_t>(config.n_layers), 0);
  const auto add = [&](const std::vector<int64_t>& layers, int64_t w, int64_t lanes) {
    for (size_t first = 0; first < layers.size(); first += static_cast<size_t>(lanes)) {
      const auto group = static_cast<int32_t>(g.layers.size());
      g.layers.emplace_back();
      g.window.push_back(w);
      for (size_t j = first; j < std::min(layers.size(), first + static_cast<size_t>(lanes)); ++j) {
        g.layers.back().push_back(layers[j]);
        g.layer_group[static_cast<size_t>(layers[j])] = group;
        g.layer_lane[static_cast<size_t>(layers[j])] = static_cast<int32_t>(j - first);
      }
    }
  };
  if (!split) {
    std::vector<int64_t> all(static_cast<size_t>(config.n_layers));
    for (int64_t l = 0; l < config.n_layers; ++l) all[static_cast<size_t>(l)] = l;
    g.n_lanes = config.n_layers;
    add(all, 0, std::max<int64_t>(config.n_layers, 1));
    return g;
  }
  g.n_lanes = static_cast<int64_t>(std::min(full.size(), windowed.size()));
  add(full, 0, g.n_lanes);
  add(windowed, window, g.n_lanes);
  return g;
}

KvCacheGroups kv_cache_groups(const ModelConfig& whole, bool hybrid, int64_t first_layer, int64_t n_layers) {
  if (first_layer < 0 || n_layers < 1 || first_layer + n_layers > whole.n_layers) {
    throw InvalidArgument("KV cache groups: layers [" + std::to_string(first_layer) + ", " +
                          std::to_string(first_layer + n_layers) + ") are not inside the model's [0, " +
                          std::to_string(whole.n_layers) + ")");
  }
  const KvCacheGroups all = kv_cache_groups(whole, hybrid);
  KvCacheGroups g;
  g.n_lanes = all.n_lanes;
  g.window = all.window;
  g.layers.resize(all.layers.size());
  const auto first = static_cast<size_t>(first_layer);
  g.layer_group.assign(all.layer_group.begin() + static_cast<std::ptrdiff_t>(first),
                       all.layer_group.begin() + static_cast<std::ptrdiff_t>(first + static_cast<size_t>(n_layers)));
  g.layer_lane.assign(all.layer_lane.begin() + static_cast<std::ptrdiff_t>(first),
                      all.layer_lane.begin() + static_cast<std::ptrdiff_t>(first + static_cast<size_t>(n_layers)));
  if (all.n_groups() == 1) {  // one group: a block holds the stage's layers only, lane = stage layer
    g.n_lanes = n_layers;
    for (int64_t l = 0; l < n_layers; ++l) g.layer_lane[static_cast<size_t>(l)] = static_cast<int32_t>(l);
  }
  for (int64_t l = 0; l < n_layers; ++l) g.layers[static_cast<size_t>(g.layer_group[static_cast<size_t>(l)])].push_back(l);
  return g;
}

int64_t kv_block_bytes(const ModelConfig& config, int64_t block_size, KvCacheDType dtype, const KvCacheGroups& groups) {
  // MLA: one latent row per token and layer, sized by chapter 02's Task 2 (stored as two halves
  // of kv_dim() floats, so the same bytes as the formula below; the latent pool is f32 only).
  if (config.is_mla()) return block_size * mla_latent_bytes_per_token(config, kv_elem_bytes(dtype));
  return 2 * groups.n_lanes * block_size * kv_slot_bytes(config, dtype);
}

int64_t kv_block_bytes(const ModelConfig& config, int64_t block_size, KvCacheDType dtype, bool hybrid) {
  return kv_block_bytes(config, block_size, dtype, kv_cache_groups(config, hybrid));
}

int64_t kv_blocks_for_budget(const ModelConfig& config, int64_t block_size, int64_t budget_bytes, KvCacheDType dtype,
                             const KvCacheGroups& groups) {
  if (block_size < 1) throw InvalidArgument("--block-size must be >= 1, got " + std::to_string(block_size));
  if (budget_bytes < 0) throw InvalidArgument("KV budget must be >= 0 bytes, got " + std::to_string(budget_bytes));
  return budget_bytes / kv_block_bytes(config, block_size, dtype, groups);
}

int64_t kv_blocks_for_budget(const ModelConfig& config, int64_t block_size, int64_t budget_bytes, KvCacheDType dtype,
                             bool hybrid) {
  return kv_blocks_for_budget(config, block_size, budget_bytes, dtype, kv_cache_groups(config, hybrid));
}

KvPool::KvPool(const ModelConfig& model, const KvPoolConfig& config)
    : config_(config),
      groups_(config.groups.n_groups() > 0 ? config.groups : kv_cache_groups(model, config.hybrid)),
      n_layers_(groups_.n_lanes),
      kv_dim_(model.kv_dim()),
      n_kv_heads_(model.n_kv_heads),
      slot_bytes_(kv_slot_bytes(model, config.dtype)) {
  if (config.block_size < 1 || config.n_blocks < 1) {
    throw InvalidArgument("KV pool: block_size and n_blocks must be >= 1, got " +
                          std::to_string(config.block_size) + " and " + std::to_string(config.n_blocks));
  }
  if (static_cast<int64_t>(groups_.layer_lane.size()) != model.n_layers) {
    throw InvalidArgument("KV pool: the KV cache groups cover " + std::to_string(groups_.layer_lane.size()) +
                          " layers, the model has " + std::to_string(model.n_layers));
  }
  if (config.n_blocks * config.block_size > INT32_MAX) {
    throw InvalidArgument("KV pool: " + std::to_string(config.n_blocks * config.block_size) +
                          " slots exceed the int32 slot ids of the slot mapping");
  }
}

HostKvPool::HostKvPool(const ModelConfig& model, const KvPoolConfig& config)
    : KvPool(model, config),
      slots_(n_layers(), model.kv_dim(), config.dtype == KvCacheDType::F32 ? config.n_blocks * config.block_size : 1) {
  if (config.dtype == KvCacheDType::F32) return;
  const auto elems = static_cast<size_t>(n_layers() * n_slots() * kv_dim() * kv_elem_bytes(config.dtype));
  k_.assign(elems, std::byte{0});
  v_.assign(elems, std::byte{0});
  if (config.dtype == KvCacheDType::Int8) {
    k_scale_.assign(static_cast<size_t>(n_layers() * n_slots() * n_kv_heads()), 0.0f);
    v_scale_.assign(k_scale_.size(), 0.0f);
  }
}

int64_t KvPool::lane(int64_t layer) const {
  if (layer < 0 || layer >= static_cast<int64_t>(groups_.layer_lane.size())) {
    throw InvalidArgument("KV pool: layer " + std::to_string(layer) + " is outside [0, " +
                          std::to_string(groups_.layer_lane.size()) + ")");
  }
  return groups_.layer_lane[static_cast<size_t>(layer)];
}

void KvPool::check_copy(int32_t src, int32_t dst) const {
  if (src < 0 || src >= n_blocks() || dst < 0 || dst >= n_blocks()) {
    throw InvalidArgument("KvPool::copy_block: block " + std::to_string(src < 0 || src >= n_blocks() ? src : dst) +
                          " is outside [0, " + std::to_string(n_blocks()) + ")");
  }
}

void KvPool::check_slot_copy(int64_t src, int64_t dst) const {
  if (src < 0 || src >= n_slots() || dst < 0 || dst >= n_slots()) {
    throw InvalidArgument("KvPool::copy_slot: slot " + std::to_string(src < 0 || src >= n_slots() ? src : dst) +
                          " is outside [0, " + std::to_string(n_slots()) + ")");
  }
}

KvCache& HostKvPool::slots() {
  LIO_CHECK(dtype() == KvCacheDType::F32, "an f16 / int8 KV pool has no f32 KvCache view");
  return slots_;
}

float* HostKvPool::keys(int64_t layer) { return slots().keys(lane(layer)); }
float* HostKvPool::values(int64_t layer) { return slots().values(lane(layer)); }

void* HostKvPool::key_data(int64_t layer) {
  if (dtype() == KvCacheDType::F32) return keys(layer);
  return k_.data() + lane(layer) * n_slots() * kv_dim() * kv_elem_bytes(dtype());
}

void* HostKvPool::value_data(int64_t layer) {
  if (dtype() == KvCacheDType::F32) return values(layer);
  return v_.data() + lane(layer) * n_slots() * kv_dim() * kv_elem_bytes(dtype());
}

float* HostKvPool::key_scales(int64_t layer) {
  return dtype() == KvCacheDType::Int8 ? k_scale_.data() + lane(layer) * n_slots() * n_kv_heads() : nullptr;
}

float* HostKvPool::value_scales(int64_t layer) {
  return dtype() == KvCacheDType::Int8 ? v_scale_.data() + lane(layer) * n_slots() * n_kv_heads() : nullptr;
}

std::vector<std::pair<std::byte*, int64_t>> HostKvPool::block_ranges(int64_t lane_index, int32_t block) {
  return slot_ranges(lane_index, int64_t{block} * block_size(), block_size());
}

std::vector<std::pair<std::byte*, int64_t>> HostKvPool::slot_ranges(int64_t lane_index, int64_t first, int64_t count) {
  const int64_t slot = kv_dim() * kv_elem_bytes(dtype());  // bytes per slot and lane
  const int64_t lane_elems = n_slots() * slot;
  std::byte* k = dtype() == KvCacheDType::F32 ? reinterpret_cast<std::byte*>(slots_.keys(lane_index))
                                              : k_.data() + lane_index * lane_elems;
  std::byte* v = dtype() == KvCacheDType::F32 ? reinterpret_cast<std::byte*>(slots_.values(lane_index))
                                              : v_.data() + lane_index * lane_elems;
  std::vector<std::pair<std::byte*, int64_t>> r = {{k + first * slot, count * slot}, {v + first * slot, count * slot}};
  if (dtype() == KvCacheDType::Int8) {
    const int64_t lane_sc = n_slots() * n_kv_heads();
    r.emplace_back(reinterpret_cast<std::byte*>(k_scale_.data() + lane_index * lane_sc + first * n_kv_heads()),
                   count * n_kv_heads() * 4);
    r.emplace_back(reinterpret_cast<std::byte*>(v_scale_.data() + lane_index * lane_sc + first * n_kv_heads()),
                   count * n_kv_heads() * 4);
  }
  return r;
}

void HostKvPool::copy_block(int32_t src, int32_t dst) {
  check_copy(src, dst);
  for (int64_t l = 0; l < n_layers(); ++l) {
    const auto from = block_ranges(l, src), to = block_ranges(l, dst);
    for (size_t i = 0; i < from.size(); ++i) std::memmove(to[i].first, from[i].first, static_cast<size_t>(from[i].second));
  }
}

void HostKvPool::copy_slot(int64_t src, int64_t dst) {
  check_slot_copy(src, dst);
  for (int64_t l = 0; l < n_layers(); ++l) {
    const auto from = slot_ranges(l, src, 1), to = slot_ranges(l, dst, 1);
    for (size_t i = 0; i < from.size(); ++i) std::memmove(to[i].first, from[i].first, static_cast<size_t>(from[i].second));
  }
}

// Host layout of one block: per layer its K elements, V elements, then (int8) K and V scales;
// for f32 that is block_floats()' "per layer, its K then its V".
void HostKvPool::copy_block_to_host(int32_t block, float* host) {
  check_copy(block, block);
  auto* out = reinterpret_cast<std::byte*>(host);
  for (int64_t l = 0; l < n_layers(); ++l)
    for (const auto& [p, n] : block_ranges(l, block)) {
      std::memcpy(out, p, static_cast<size_t>(n));
      out += n;
    }
}

void HostKvPool::copy_block_from_host(const float* host, int32_t block) {
  check_copy(block, block);
  const auto* in = reinterpret_cast<const std::byte*>(host);
  for (int64_t l = 0; l < n_layers(); ++l)
    for (const auto& [p, n] : block_ranges(l, block)) {
      std::memcpy(p, in, static_cast<size_t>(n));
      in += n;
    }
}

}  // namespace lio
