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
//
// The elements are f32 by default. --kv-cache-dtype f16 stores IEEE halves; int8 stores each
// (token, KV head) vector of head_dim values as int8 codes with one f32 scale (chapter 03's
// quantize_row_int8, applied per head: the granularity of KIVI's and vLLM's per-token KV
// quantization), and the attention kernels dequantize as they read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lio/kv_cache.h"
#include "lio/model_config.h"

namespace lio {

/// Element type of the KV pool (--kv-cache-dtype).
enum class KvCacheDType {
  F32,   ///< 4 bytes per element
  F16,   ///< IEEE half, 2 bytes per element
  Int8,  ///< int8 codes plus one f32 scale per (token, KV head)
};

/// "f32", "f16" or "int8" (lio/cli_parse.h's parse_kv_cache_dtype reads --kv-cache-dtype).
const char* kv_cache_dtype_name(KvCacheDType dtype);

/// Bytes of one stored K or V element: 4 (f32), 2 (f16), 1 (int8; the scales come on top).
int64_t kv_elem_bytes(KvCacheDType dtype);

/// Bytes one token's K (or V) takes in one layer: kv_dim * 4 (f32), kv_dim * 2 (f16),
/// kv_dim + 4 * n_kv_heads (int8: the codes and one f32 scale per KV head).
int64_t kv_slot_bytes(const ModelConfig& config, KvCacheDType dtype);

/// How the layers of a model share the pool's blocks: vLLM v1's hybrid KV cache manager
/// (vllm/v1/core/kv_cache_coordinator.py, `KVCacheGroupSpec`; docs/design/hybrid_kv_cache_manager.md).
/// Layers are cut into groups of `n_lanes` layers of one kind (full attention, or one sliding
/// window); each group has its own block table per sequence, and a block, while a group holds it,
/// stores K/V of that group's n_lanes layers only — lane j of a block is layer layers[g][j] of
/// the group g holding it. All groups have the same block size in bytes, so they draw from one
/// free list. A sliding-window group's blocks that fall out of the window go back to the pool
/// (the SlidingWindowManager's remove_skipped_blocks); the full group keeps every block. Gemma 3
/// 270M (3 global + 15 windowed layers): lanes 3, groups {5, 11, 17}, {0, 1, 2}, {3, 4, 6}, ...
/// A group short of n_lanes layers (layer counts that do not divide) leaves its last lanes unused.
struct KvCacheGroups {
  int64_t n_lanes = 0;                          ///< layers per block (storage layers of the pool)
  std::vector<std::vector<int64_t>> layers;     ///< (n_groups) model layers of each group
  std::vector<int64_t> window;                  ///< (n_groups) sliding window, 0 = full attention
  std::vector<int32_t> layer_group;             ///< (n_layers) group of each model layer
  std::vector<int32_t> layer_lane;              ///< (n_layers) lane of each model layer

  /// Groups (1 = no hybrid layout).
  int64_t n_groups() const { return static_cast<int64_t>(layers.size()); }
};

/// Shape of a KV pool.
struct KvPoolConfig {
  int64_t block_size = 16;                  ///< tokens per block (vLLM's default on GPUs is 16)
  int64_t n_blocks = 0;                     ///< blocks in the pool
  KvCacheDType dtype = KvCacheDType::F32;   ///< element type
  /// A model with both full-attention and sliding-window layers gets KV cache groups
  /// (kv_cache_groups()), so windowed layers can give back blocks that slid out of their window.
  /// false (or a model with one kind of layer): one group, every layer in every block.
  bool hybrid = false;
  /// The pool's groups when set (n_groups() > 0; then one entry of layer_group / layer_lane per
  /// layer of the pool's model): a pipeline stage's pool gets the whole model's groups
  /// restricted to its layers (kv_cache_groups(whole, hybrid, first_layer, n_layers)), so every
  /// stage has the driver's group count, windows and lanes. Empty: kv_cache_groups(the pool's
  /// model, hybrid).
  KvCacheGroups groups{};
};


/// The groups of `config`: with `hybrid` and both full-attention and sliding-window layers
/// (all windowed layers with one window), lanes = the smaller of the two layer counts, the
/// full layers' groups first (group 0 is always full attention), then the windowed ones, each
/// kind in layer order; otherwise one group holding every layer (lanes = n_layers, window 0:
/// windowed layers then read a full table and mask, as without this layout). MLA models get one
/// group.
KvCacheGroups kv_cache_groups(const ModelConfig& config, bool hybrid);

/// The groups of the whole model `whole` (first_layer 0, every layer) restricted to a pipeline
/// stage's layers [first_layer, first_layer + n_layers): the same n_lanes, group count and
/// windows as kv_cache_groups(whole, hybrid); the stage's layer l (global first_layer + l) is in
/// the group and lane the whole model gives that global layer (layer_group / layer_lane have
/// n_layers entries), and layers[g] lists the stage's own layers of group g (local indices;
/// empty for a group with no layer on this stage: its blocks' lanes go unused there). With one
/// group (no hybrid layout) a block holds the stage's layers only: n_lanes = n_layers, lane = l.
/// vLLM v1
/// does the same (vllm/v1/core/kv_cache_utils.py, get_kv_cache_configs: groups from the merged
/// specs of all workers, projected onto each worker's layers). Throws InvalidArgument if the
/// range is not inside [0, whole.n_layers).
KvCacheGroups kv_cache_groups(const ModelConfig& whole, bool hybrid, int64_t first_layer, int64_t n_layers);

/// Bytes of one block, K and V of every layer: 2 * n_layers * block_size *
/// kv_slot_bytes(dtype) (f32: 2 * n_layers * block_size * kv_dim * 4). An MLA model's block
/// holds latent rows: block_size * mla_latent_bytes_per_token (chapter 02, Task 2, lio/mla.h).
/// With `hybrid` (kv_cache_groups()) a block holds n_lanes layers instead of n_layers.
int64_t kv_block_bytes(const ModelConfig& config, int64_t block_size, KvCacheDType dtype = KvCacheDType::F32,
                       bool hybrid = false);

/// Bytes of one block of a pool with the given groups: 2 * groups.n_lanes * block_size *
/// kv_slot_bytes(config, dtype) (an MLA model's latent rows as above). A pipeline stage passes
/// its own (tensor-parallel) config and the whole model's groups restricted to its layers.
int64_t kv_block_bytes(const ModelConfig& config, int64_t block_size, KvCacheDType dtype, const KvCacheGroups& groups);

/// How many blocks of `block_size` fit in `budget_bytes` (rounded down). Throws
/// InvalidArgument if block_size < 1 or budget_bytes < 0.
int64_t kv_blocks_for_budget(const ModelConfig& config, int64_t block_size, int64_t budget_bytes,
                             KvCacheDType dtype = KvCacheDType::F32, bool hybrid = false);

/// The same for a pool with the given groups (kv_block_bytes' groups form). Throws as above.
int64_t kv_blocks_for_budget(const ModelConfig& config, int64_t block_size, int64_t budget_bytes, KvCacheDType dtype,
                             const KvCacheGroups& groups);

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
  /// Storage layers of a block: the model's decoder layers, or with KV cache groups their
  /// lanes (groups().n_lanes). keys(layer) and the other accessors take model layers.
  int64_t n_layers() const { return n_layers_; }
  /// How layers share blocks (one group unless the config asked for a hybrid layout and the
  /// model has both full and sliding-window layers).
  const KvCacheGroups& groups() const { return groups_; }
  /// KV cache groups (1 without the hybrid layout).
  int64_t n_groups() const { return groups_.n_groups(); }
  /// The storage layer (lane) of model layer `layer`. Throws InvalidArgument if out of range.
  int64_t lane(int64_t layer) const;
  /// Elements per slot and layer, K or V: n_kv_heads * head_dim.
  int64_t kv_dim() const { return kv_dim_; }
  /// KV heads per slot.
  int64_t n_kv_heads() const { return n_kv_heads_; }
  /// Element type.
  KvCacheDType dtype() const { return config_.dtype; }
  /// Bytes of one slot's K (or V) in one layer: kv_slot_bytes(model, dtype()).
  int64_t slot_bytes() const { return slot_bytes_; }
  /// Bytes the pool holds: 2 * n_layers * n_slots * slot_bytes.
  int64_t size_bytes() const { return 2 * n_layers_ * n_slots() * slot_bytes_; }
  /// Bytes one block holds over all layers, K and V: 2 * n_layers * block_size * slot_bytes.
  int64_t block_bytes() const { return 2 * n_layers_ * config_.block_size * slot_bytes_; }

  /// Keys of `layer`, device memory: (n_blocks, block_size, n_kv_heads, head_dim) f32. An f16
  /// or int8 pool has none: it throws InternalError (read key_data()).
  virtual float* keys(int64_t layer) = 0;
  /// Values of `layer`, laid out as keys().
  virtual float* values(int64_t layer) = 0;
  /// Keys of `layer` as stored: (n_slots, n_kv_heads, head_dim) elements of dtype() (float,
  /// uint16_t f16 bits, or int8_t codes). The default is keys().
  virtual void* key_data(int64_t layer) { return keys(layer); }
  /// Values of `layer` as stored, laid out as key_data().
  virtual void* value_data(int64_t layer) { return values(layer); }
  /// int8 pools: the keys' scales of `layer`, (n_slots, n_kv_heads) f32, key = scale * code;
  /// nullptr for f32 and f16.
  virtual float* key_scales(int64_t layer) {
    (void)layer;
    return nullptr;
  }
  /// int8 pools: the values' scales, laid out as key_scales().
  virtual float* value_scales(int64_t layer) {
    (void)layer;
    return nullptr;
  }
  /// Copies block `src`'s K and V into block `dst`, every layer (copy-on-write; done before
  /// the forward pass that writes `dst`, with no kernel of this pool's backend running).
  /// Throws InvalidArgument if an id is outside [0, n_blocks).
  virtual void copy_block(int32_t src, int32_t dst) = 0;
  /// Copies slot `src`'s K and V (and int8 scales) into slot `dst`, every storage layer: chapter
  /// 06's tree verification moves an accepted draft's K/V from the slot its tree row wrote to the
  /// slot its position owns (the compaction vLLM's tree attention and SpecInfer do after the
  /// pass). Queued like copy_block (before the next pass that reads `dst`). Throws
  /// InvalidArgument if a slot is outside [0, n_slots).
  virtual void copy_slot(int64_t src, int64_t dst) = 0;
  /// Floats one block holds in host swap space: block_bytes() / 4 rounded up (f32: 2 * n_layers
  /// * block_size * kv_dim, per layer its K then its V; f16 and int8 blocks are copied as their
  /// bytes into that float-typed space).
  int64_t block_floats() const { return (block_bytes() + 3) / 4; }
  /// Copies block `block`'s K/V, every layer, to `host` (block_floats() floats, laid out as
  /// block_floats() says): a swap-out. Throws InvalidArgument if the id is out of range.
  virtual void copy_block_to_host(int32_t block, float* host) = 0;
  /// The reverse: `host` (block_floats() floats) into block `block` (a swap-in).
  virtual void copy_block_from_host(const float* host, int32_t block) = 0;

 protected:
  /// Throws InvalidArgument unless 0 <= src, dst < n_blocks.
  void check_copy(int32_t src, int32_t dst) const;
  /// Throws InvalidArgument unless 0 <= src, dst < n_slots.
  void check_slot_copy(int64_t src, int64_t dst) const;
  /// Throws InvalidArgument if block_size < 1 or n_blocks < 1.
  KvPool(const ModelConfig& model, const KvPoolConfig& config);

 private:
  KvPoolConfig config_;
  KvCacheGroups groups_;
  int64_t n_layers_;
  int64_t kv_dim_;
  int64_t n_kv_heads_;
  int64_t slot_bytes_;
};

/// A pool in host memory (the CPU backend). An f32 pool's slots are chapter 01's KvCache with
/// one "position" per slot, so appending K/V through the slot mapping is KvCache::write (Task
/// 3): the contiguous cache of chapter 01 is this pool seen as one block per sequence. An f16
/// or int8 pool keeps its elements (and int8 scales) in its own arrays, layer by layer.
class HostKvPool final : public KvPool {
 public:
  /// Allocates n_blocks * block_size slots, zeroed. Throws InvalidArgument on a bad shape,
  /// std::bad_alloc if memory runs out.
  HostKvPool(const ModelConfig& model, const KvPoolConfig& config);
  float* keys(int64_t layer) override;
  float* values(int64_t layer) override;
  void* key_data(int64_t layer) override;
  void* value_data(int64_t layer) override;
  float* key_scales(int64_t layer) override;
  float* value_scales(int64_t layer) override;
  void copy_block(int32_t src, int32_t dst) override;
  void copy_slot(int64_t src, int64_t dst) override;
  void copy_block_to_host(int32_t block, float* host) override;
  void copy_block_from_host(const float* host, int32_t block) override;
  /// The slots as a KvCache (capacity = n_slots, one KvCache layer per lane: write through
  /// lane(layer)); its write(lane, slot, k, v) appends. f32 pools only (InternalError otherwise).
  KvCache& slots();

 private:
  /// The byte ranges block `block` of storage layer (lane) `lane_index` occupies: K elements,
  /// V elements, K scales, V scales (the last two empty unless int8).
  std::vector<std::pair<std::byte*, int64_t>> block_ranges(int64_t lane_index, int32_t block);
  /// The same for `count` slots from slot `first` (block_ranges is first = block * block_size,
  /// count = block_size).
  std::vector<std::pair<std::byte*, int64_t>> slot_ranges(int64_t lane_index, int64_t first, int64_t count);

  KvCache slots_;                      ///< f32: the elements; otherwise one unused slot
  std::vector<std::byte> k_, v_;       ///< f16 / int8: (n_layers, n_slots, kv_dim) elements
  std::vector<float> k_scale_, v_scale_;  ///< int8: (n_layers, n_slots, n_kv_heads)
};

}  // namespace lio
