// kv_cache.h — the contiguous per-sequence KV cache (chapter 01).
//
// During decode, every new token's query attends to the keys and values of all earlier
// tokens. Those K/V vectors never change once computed, so we keep them: one slab per
// layer of shape (capacity_tokens, n_kv_heads, head_dim) for K and one for V (Pope et al.
// 2022, "Efficiently Scaling Transformer Inference", sec. 2.1; how many bytes that is, is
// chapter 01's Task 1, lio/kv_sizing.h). Chapter 04 replaces the slab with fixed-size blocks
// behind the same interface (PagedAttention, Kwon et al. 2023).
//
// Where the bodies are: the constructors are common/model/src/kv_cache.cpp; write,
// key_prefix and value_prefix are chapter 01's Task 3, defined in
// solutions|exercises/01_kv_cache/kv_cache_ops.cpp (the paged pool's HostKvPool writes and reads
// its slots through them, so the engine runs on the learner's Task 3 once chapter 01 is switched).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>

#include "lio/model_config.h"

namespace lio {

/// Contiguous K/V storage for one sequence, f32. Positions 0 .. n_tokens()-1 are filled.
class KvCache {
 public:
  /// Allocates room for `capacity_tokens` positions (all layers, K and V).
  /// Throws InvalidArgument if capacity_tokens <= 0 or exceeds config.context_length.
  KvCache(const ModelConfig& config, int64_t capacity_tokens);

  /// Storage for `capacity_tokens` slots of kv_dim floats per layer with no context-length
  /// cap: the paged pool's slots (HostKvPool), where a "position" is a slot id
  /// (block * block_size + offset). Throws InvalidArgument if an argument is < 1.
  KvCache(int64_t n_layers, int64_t kv_dim, int64_t capacity_tokens);

  /// Keys of layer `layer` for positions [0, capacity): (capacity_tokens, n_kv_heads, head_dim).
  float* keys(int64_t layer) { return k_.get() + layer * layer_stride_; }
  /// Values of layer `layer`, laid out as keys().
  float* values(int64_t layer) { return v_.get() + layer * layer_stride_; }
  /// Read-only keys(); (capacity_tokens, n_kv_heads, head_dim).
  const float* keys(int64_t layer) const { return k_.get() + layer * layer_stride_; }
  /// Read-only values(); (capacity_tokens, n_kv_heads, head_dim).
  const float* values(int64_t layer) const { return v_.get() + layer * layer_stride_; }

  /// Task 3 (chapter 01 exercise point; defined in solutions|exercises/01_kv_cache/kv_cache_ops.cpp).
  /// Keeps one token's key and value for `layer` at position `pos`. k, v: (n_kv_heads *
  /// head_dim), read during the call only. After it, key_prefix(layer, n) and
  /// value_prefix(layer, n) for any n > pos hold k and v as their row `pos`; no other position
  /// or layer changes (docs/01_kv_cache.md, "Task 3"). Throws InvalidArgument, saying which, if
  /// pos is outside [0, capacity_tokens) or layer outside [0, n_layers).
  void write(int64_t layer, int64_t pos, const float* k, const float* v);

  /// Task 3 (same file). The cached keys of `layer` for positions [0, n_tokens), the prefix a
  /// decode step attends over: a view (no copy, no allocation) of (n_tokens, n_kv_heads,
  /// head_dim) floats, row j the key written at position j, valid until the cache is destroyed.
  /// Throws InvalidArgument if n_tokens is outside [0, capacity_tokens] or layer is out of range.
  std::span<const float> key_prefix(int64_t layer, int64_t n_tokens) const;
  /// Task 3 (same file). The cached values, as key_prefix.
  std::span<const float> value_prefix(int64_t layer, int64_t n_tokens) const;

  /// Decoder layers the cache holds K/V for.
  int64_t n_layers() const { return n_layers_; }
  /// Floats per cached token and layer: n_kv_heads * head_dim.
  int64_t kv_dim() const { return kv_dim_; }

  /// Positions filled so far (tokens). The model advances it after each forward.
  int64_t n_tokens() const { return n_tokens_; }
  /// Sets the filled length to `n` tokens. Throws InternalError (LIO_CHECK) if `n` is
  /// outside [0, capacity_tokens].
  void set_n_tokens(int64_t n);
  /// Positions allocated (tokens), fixed at construction.
  int64_t capacity_tokens() const { return capacity_tokens_; }
  /// Drops every cached position (keeps the allocation).
  void clear() { n_tokens_ = 0; }

  /// Bytes allocated for K and V together (what the slab costs).
  int64_t allocated_bytes() const;
  /// Bytes holding live positions: the first n_tokens() rows of every layer's K and V slabs.
  int64_t used_bytes() const;

 private:
  int64_t n_layers_;
  int64_t kv_dim_;
  int64_t capacity_tokens_;
  int64_t layer_stride_;  ///< capacity_tokens * kv_dim floats
  int64_t n_tokens_ = 0;
  /// calloc'd: zero pages are mapped lazily, so a large pool costs memory only where written.
  struct FreeDeleter {
    void operator()(float* p) const { std::free(p); }
  };
  using Slab = std::unique_ptr<float[], FreeDeleter>;
  static Slab zeroed(int64_t n_floats);
  Slab k_;  ///< (n_layers, capacity_tokens, kv_dim)
  Slab v_;  ///< (n_layers, capacity_tokens, kv_dim)
};

}  // namespace lio
