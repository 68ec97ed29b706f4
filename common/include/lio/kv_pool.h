// kv_pool.h — the paged KV cache's memory: K and V of every layer in fixed-size blocks.
//
// PagedAttention (Kwon et al. 2023, "Efficient Memory Management for Large Language Model
// Serving with PagedAttention", sec. 4.1) stores each sequence's K/V in blocks of
// `block_size` tokens that need not be contiguous; a block table maps a sequence's logical
// blocks to physical ones. Per layer the pool is (n_blocks, block_size, n_kv_heads, head_dim)
// for K and the same for V (vLLM's layout minus the K/V split dimension), i.e. a flat array
// of n_blocks * block_size "slots" of kv_dim floats: slot = block * block_size + offset.
// The pool is sized once from a memory budget and never grows; who owns which block is the
// BlockManager's business (it holds no tensor memory), where the bytes live is the pool's.
// Chapter 01's contiguous cache is the special case "one block of max length per sequence".
#pragma once

#include <cstdint>
#include <memory>

#include "lio/kv_cache.h"
#include "lio/model_config.h"

namespace lio {

/// Shape of a KV pool.
struct KvPoolConfig {
  int64_t block_size = 16;  ///< tokens per block (vLLM's default on GPUs is 16)
  int64_t n_blocks = 0;     ///< blocks in the pool
};

/// Bytes of one block, K and V of every layer, f32: 2 * n_layers * block_size * kv_dim * 4.
int64_t kv_block_bytes(const ModelConfig& config, int64_t block_size);

/// How many blocks of `block_size` fit in `budget_bytes` (rounded down). Throws
/// InvalidArgument if block_size < 1 or budget_bytes < 0.
int64_t kv_blocks_for_budget(const ModelConfig& config, int64_t block_size, int64_t budget_bytes);

/// K/V storage of all layers as blocks, on one device. Backends create it
/// (Backend::make_kv_pool) and their attention / append ops read its device pointers.
class KvPool {
 public:
  virtual ~KvPool() = default;

  /// Tokens per block.
  int64_t block_size() const { return config_.block_size; }
  /// Blocks in the pool.
  int64_t n_blocks() const { return config_.n_blocks; }
  /// Slots (token positions) in the pool: n_blocks * block_size.
  int64_t n_slots() const { return config_.n_blocks * config_.block_size; }
  /// Decoder layers.
  int64_t n_layers() const { return n_layers_; }
  /// Floats per slot and layer, K or V: n_kv_heads * head_dim.
  int64_t kv_dim() const { return kv_dim_; }
  /// Bytes the pool holds: 2 * n_layers * n_slots * kv_dim * 4.
  int64_t size_bytes() const { return 2 * n_layers_ * n_slots() * kv_dim_ * 4; }
  /// Bytes one block holds over all layers, K and V: 2 * n_layers * block_size * kv_dim * 4.
  int64_t block_bytes() const { return 2 * n_layers_ * config_.block_size * kv_dim_ * 4; }

  /// Keys of `layer`, device memory: (n_blocks, block_size, n_kv_heads, head_dim) f32.
  virtual float* keys(int64_t layer) = 0;
  /// Values of `layer`, laid out as keys().
  virtual float* values(int64_t layer) = 0;
  /// Copies block `src`'s K and V into block `dst`, every layer (copy-on-write; done before
  /// the forward pass that writes `dst`, with no kernel of this pool's backend running).
  /// Throws InvalidArgument if an id is outside [0, n_blocks).
  virtual void copy_block(int32_t src, int32_t dst) = 0;
  /// Floats one block holds in host swap space: 2 * n_layers * block_size * kv_dim (per layer,
  /// its K then its V).
  int64_t block_floats() const { return 2 * n_layers_ * config_.block_size * kv_dim_; }
  /// Copies block `block`'s K/V, every layer, to `host` (block_floats() floats, laid out as
  /// block_floats() says): a swap-out. Throws InvalidArgument if the id is out of range.
  virtual void copy_block_to_host(int32_t block, float* host) = 0;
  /// The reverse: `host` (block_floats() floats) into block `block` (a swap-in).
  virtual void copy_block_from_host(const float* host, int32_t block) = 0;

 protected:
  /// Throws InvalidArgument unless 0 <= src, dst < n_blocks.
  void check_copy(int32_t src, int32_t dst) const;
  /// Throws InvalidArgument if block_size < 1 or n_blocks < 1.
  KvPool(const ModelConfig& model, const KvPoolConfig& config);

 private:
  KvPoolConfig config_;
  int64_t n_layers_;
  int64_t kv_dim_;
};

/// A pool in host memory (the CPU backend). Its slots are chapter 01's KvCache with one
/// "position" per slot, so appending K/V through the slot mapping is KvCache::write (Task 3):
/// the contiguous cache of chapter 01 is this pool seen as one block per sequence.
class HostKvPool final : public KvPool {
 public:
  /// Allocates n_blocks * block_size slots, zeroed. Throws InvalidArgument on a bad shape,
  /// std::bad_alloc if memory runs out.
  HostKvPool(const ModelConfig& model, const KvPoolConfig& config);
  float* keys(int64_t layer) override { return slots_.keys(layer); }
  float* values(int64_t layer) override { return slots_.values(layer); }
  void copy_block(int32_t src, int32_t dst) override;
  void copy_block_to_host(int32_t block, float* host) override;
  void copy_block_from_host(const float* host, int32_t block) override;
  /// The slots as a KvCache (capacity = n_slots); its write(layer, slot, k, v) appends.
  KvCache& slots() { return slots_; }

 private:
  KvCache slots_;
};

}  // namespace lio
