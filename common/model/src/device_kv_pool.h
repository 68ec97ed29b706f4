// device_kv_pool.h — private to the CUDA backend: DeviceKvPool, the KV pool in device memory
// that CudaBackend::make_kv_pool returns and its kv_append / attention ops read and write.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "cuda_device_memory.h"
#include "quantized_kv.h"
#include "device_buffer.h"
#include "lio/error.h"
#include "lio/kv_pool.h"

namespace lio::cuda {

/// A KV pool in device memory: K and V of all layers, each (n_layers, n_slots, kv_dim)
/// elements of the pool's dtype (f32, f16 bits or int8 codes), plus for int8 the scales, each
/// (n_layers, n_slots, n_kv_heads) f32 — HostKvPool's layout, so a swapped-out block's host
/// bytes mean the same on both backends. Block copies (swap out / in, copy-on-write) run on the
/// backend's stream, so they are ordered with the forward passes: a swap-in is queued before the
/// next pass that reads the block, a swap-out after the last pass that wrote it. Host bytes go
/// through one block of pinned staging (a copy from pageable memory may return before its DMA
/// lands, and a non-blocking stream would not wait for it).
class DeviceKvPool final : public KvPool {
 public:
  /// A pool for `model` of `config` on GPU `device`, whose copies run on `stream` (the backend's;
  /// it must outlive the pool's copies). Throws CudaError when the memory runs out.
  DeviceKvPool(const ModelConfig& model, const KvPoolConfig& config, int device, cudaStream_t stream)
      : KvPool(model, config),
        device_(device),
        stream_(stream),
        layer_bytes_(n_slots() * kv_dim() * kv_elem_bytes(config.dtype)),
        layer_scales_(config.dtype == KvCacheDType::Int8 ? n_slots() * n_kv_heads() : 0),
        keys_(n_layers() * layer_bytes_),
        values_(n_layers() * layer_bytes_),
        key_scales_(n_layers() * layer_scales_),
        value_scales_(n_layers() * layer_scales_) {
    // Zeroed like HostKvPool: a slot is never read before it is written, but a debugger or a
    // dump should not show garbage.
    CUDA_CHECK(cudaMemset(keys_.data(), 0, keys_.size_bytes()));
    CUDA_CHECK(cudaMemset(values_.data(), 0, values_.size_bytes()));
    if (layer_scales_ > 0) {
      CUDA_CHECK(cudaMemset(key_scales_.data(), 0, key_scales_.size_bytes()));
      CUDA_CHECK(cudaMemset(value_scales_.data(), 0, value_scales_.size_bytes()));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    staging_.reserve(block_floats() * static_cast<int64_t>(sizeof(float)));
  }
  /// A block's bytes of every layer to/from a host array (block_floats() floats), laid out as
  /// HostKvPool's: per layer its K elements, V elements, then (int8) K and V scales. To the
  /// host: returns with the bytes in `host` (after the passes queued before it). From the host:
  /// returns once `host` may be reused; the copy is queued on the stream, ahead of the next pass.
  void copy_block_to_host(int32_t block, float* host) override { host_copy(block, host, cudaMemcpyDeviceToHost); }
  void copy_block_from_host(const float* host, int32_t block) override {
    host_copy(block, const_cast<float*>(host), cudaMemcpyHostToDevice);
  }
  ~DeviceKvPool() override {
    // The backend's stream may still read the pool, and the backend may already be gone: wait
    // for the whole device (errors dropped: a destructor must not throw).
    cudaSetDevice(device_);
    cudaDeviceSynchronize();
  }
  /// f32 pools only (KvPool's contract): an f16 / int8 pool throws InternalError.
  float* keys(int64_t layer) override { return reinterpret_cast<float*>(f32_only(key_data(layer))); }
  float* values(int64_t layer) override { return reinterpret_cast<float*>(f32_only(value_data(layer))); }
  void* key_data(int64_t layer) override { return keys_.data() + checked(layer) * layer_bytes_; }
  void* value_data(int64_t layer) override { return values_.data() + checked(layer) * layer_bytes_; }
  float* key_scales(int64_t layer) override {
    return layer_scales_ > 0 ? key_scales_.data() + checked(layer) * layer_scales_ : nullptr;
  }
  float* value_scales(int64_t layer) override {
    return layer_scales_ > 0 ? value_scales_.data() + checked(layer) * layer_scales_ : nullptr;
  }
  /// One layer as the quantized kernels take it (f16 / int8 pools).
  QuantizedKvLayer quantized_layer(int64_t layer) {
    LIO_CHECK(dtype() != KvCacheDType::F32, "an f32 KV pool has no quantized view");
    return {dtype() == KvCacheDType::Int8 ? KvQuant::Int8 : KvQuant::F16, key_data(layer), value_data(layer),
            key_scales(layer), value_scales(layer)};
  }
  /// One strided copy per array (a block's rows sit one layer apart), queued on the stream: in
  /// order after the pass that wrote src and before the next one that reads dst. No wait.
  void copy_block(int32_t src, int32_t dst) override {
    check_copy(src, dst);
    CUDA_CHECK(cudaSetDevice(device_));
    for (const Part& part : parts()) {
      CUDA_CHECK(cudaMemcpy2DAsync(part.base + dst * part.block_bytes, part.pitch, part.base + src * part.block_bytes,
                                   part.pitch, static_cast<size_t>(part.block_bytes),
                                   static_cast<size_t>(n_layers()), cudaMemcpyDeviceToDevice, stream_));
    }
  }
  /// One strided copy per array (a slot's rows sit one layer apart), queued as copy_block.
  void copy_slot(int64_t src, int64_t dst) override {
    check_slot_copy(src, dst);
    CUDA_CHECK(cudaSetDevice(device_));
    for (const Part& part : parts()) {
      const int64_t slot_bytes = part.block_bytes / block_size();
      CUDA_CHECK(cudaMemcpy2DAsync(part.base + dst * slot_bytes, part.pitch, part.base + src * slot_bytes, part.pitch,
                                   static_cast<size_t>(slot_bytes), static_cast<size_t>(n_layers()),
                                   cudaMemcpyDeviceToDevice, stream_));
    }
  }

 private:
  /// One array of the pool: its start, one block's bytes in one layer, and one layer's bytes.
  struct Part {
    std::byte* base;
    int64_t block_bytes;
    size_t pitch;
  };
  /// K elements, V elements, then (int8) K and V scales: the host layout's order.
  std::vector<Part> parts() {
    const int64_t elems = block_size() * kv_dim() * kv_elem_bytes(dtype());
    const auto layer = static_cast<size_t>(layer_bytes_);
    std::vector<Part> r = {{keys_.data(), elems, layer}, {values_.data(), elems, layer}};
    if (layer_scales_ > 0) {
      const int64_t sc = block_size() * n_kv_heads() * static_cast<int64_t>(sizeof(float));
      const auto pitch = static_cast<size_t>(layer_scales_) * sizeof(float);
      r.push_back({reinterpret_cast<std::byte*>(key_scales_.data()), sc, pitch});
      r.push_back({reinterpret_cast<std::byte*>(value_scales_.data()), sc, pitch});
    }
    return r;
  }
  void host_copy(int32_t block, float* host, cudaMemcpyKind kind) {
    check_copy(block, block);
    const std::vector<Part> ps = parts();
    int64_t per_layer = 0;  // host bytes of one layer: 2 * block_size * slot_bytes
    for (const Part& part : ps) per_layer += part.block_bytes;
    const auto total = static_cast<size_t>(per_layer * n_layers());
    CUDA_CHECK(cudaSetDevice(device_));
    // The staging block may still feed the last swap-in's copy: wait for the stream (between
    // steps it is idle, so this costs nothing then).
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (kind == cudaMemcpyHostToDevice) std::memcpy(staging_.data(), host, total);
    std::byte* h = staging_.data();
    for (const Part& part : ps) {
      std::byte* dev = part.base + block * part.block_bytes;
      const auto width = static_cast<size_t>(part.block_bytes), hpitch = static_cast<size_t>(per_layer);
      if (kind == cudaMemcpyDeviceToHost) {
        CUDA_CHECK(cudaMemcpy2DAsync(h, hpitch, dev, part.pitch, width, static_cast<size_t>(n_layers()), kind, stream_));
      } else {
        CUDA_CHECK(cudaMemcpy2DAsync(dev, part.pitch, h, hpitch, width, static_cast<size_t>(n_layers()), kind, stream_));
      }
      h += part.block_bytes;
    }
    if (kind == cudaMemcpyDeviceToHost) {
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      std::memcpy(host, staging_.data(), total);
    }
  }
  void* f32_only(void* p) const {
    LIO_CHECK(dtype() == KvCacheDType::F32, "an f16 / int8 KV pool has no f32 view (read key_data())");
    return p;
  }
  /// The storage layer (lane) of model layer `layer` (KvPool::lane: the layer itself without
  /// KV cache groups). Throws InvalidArgument if out of range.
  int64_t checked(int64_t layer) const { return lane(layer); }
  int device_;
  cudaStream_t stream_;
  PinnedBuffer<std::byte> staging_;  // one block of every layer, host layout (block_floats() floats)
  int64_t layer_bytes_;   // n_slots * kv_dim * elem_bytes
  int64_t layer_scales_;  // int8: n_slots * n_kv_heads; else 0
  DeviceBuffer<std::byte> keys_, values_;
  DeviceBuffer<float> key_scales_, value_scales_;
};

}  // namespace lio::cuda
