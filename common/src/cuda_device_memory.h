// cuda_device_memory.h — private to cuda_backend.cpp: the memory the CUDA backend owns besides
// its weights — page-locked host staging (PinnedBuffer), grow-only device scratch (ensure), and
// the KV pool in device memory (DeviceKvPool).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "cuda_ops.h"
#include "lio/error.h"
#include "lio/kv_pool.h"

namespace lio::cuda {

/// Owning page-locked host array (cudaMallocHost): async copies from/to it run at full
/// PCIe/NVLink speed without a staging copy in the driver. Grows on demand; contents are not
/// kept. The caller makes sure no copy still uses the old array before it grows.
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  /// Makes room for n elements (reallocating when larger than before).
  void reserve(int64_t n) {
    if (n <= capacity_) return;
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = nullptr;
    capacity_ = 0;
    CUDA_CHECK(
        cudaMallocHost(reinterpret_cast<void**>(&data_), static_cast<size_t>(n) * sizeof(T)));
    capacity_ = n;
  }
  T* data() { return data_; }

 private:
  T* data_ = nullptr;
  int64_t capacity_ = 0;
};

/// Grows a device buffer to at least n elements (contents are not kept). Waits for `stream`
/// first: queued kernels may still use the old allocation.
template <typename T>
void ensure(DeviceBuffer<T>& buf, int64_t n, cudaStream_t stream) {
  if (buf.n_elems() >= n) return;
  CUDA_CHECK(cudaStreamSynchronize(stream));
  buf = DeviceBuffer<T>();  // free first: peak memory stays one buffer
  buf = DeviceBuffer<T>(n);
}

/// A KV pool in device memory: K and V of all layers, each (n_layers, n_slots, kv_dim) f32.
class DeviceKvPool final : public KvPool {
 public:
  DeviceKvPool(const ModelConfig& model, const KvPoolConfig& config)
      : KvPool(model, config),
        layer_floats_(n_slots() * kv_dim()),
        keys_(n_layers() * layer_floats_),
        values_(n_layers() * layer_floats_) {
    // Zeroed like HostKvPool: a slot is never read before it is written, but a debugger or a
    // dump should not show garbage.
    CUDA_CHECK(cudaMemset(keys_.data(), 0, keys_.size_bytes()));
    CUDA_CHECK(cudaMemset(values_.data(), 0, values_.size_bytes()));
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  /// A block's rows of every layer, K then V, to/from a host array (block_floats() floats):
  /// strided device side (layer_floats_ apart), two host rows per layer.
  void copy_block_to_host(int32_t block, float* host) override { host_copy(block, host, cudaMemcpyDeviceToHost); }
  void copy_block_from_host(const float* host, int32_t block) override {
    host_copy(block, const_cast<float*>(host), cudaMemcpyHostToDevice);
  }
  ~DeviceKvPool() override {
    // A backend's stream may still read the pool; the pool does not know which stream, so it
    // waits for the device (errors dropped: a destructor must not throw).
    cudaDeviceSynchronize();
  }
  float* keys(int64_t layer) override { return keys_.data() + checked(layer) * layer_floats_; }
  float* values(int64_t layer) override { return values_.data() + checked(layer) * layer_floats_; }
  /// One strided copy per tensor: a block's rows sit layer_floats_ apart. The backend's
  /// stream is non-blocking, so wait for the device on both sides.
  void copy_block(int32_t src, int32_t dst) override {
    check_copy(src, dst);
    const size_t block = static_cast<size_t>(block_size() * kv_dim()) * sizeof(float);
    const size_t pitch = static_cast<size_t>(layer_floats_) * sizeof(float);
    CUDA_CHECK(cudaDeviceSynchronize());
    for (DeviceBuffer<float>* t : {&keys_, &values_}) {
      CUDA_CHECK(cudaMemcpy2D(t->data() + static_cast<int64_t>(dst) * block_size() * kv_dim(), pitch,
                              t->data() + static_cast<int64_t>(src) * block_size() * kv_dim(), pitch, block,
                              static_cast<size_t>(n_layers()), cudaMemcpyDeviceToDevice));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
  }

 private:
  void host_copy(int32_t block, float* host, cudaMemcpyKind kind) {
    check_copy(block, block);
    const int64_t n = block_size() * kv_dim();
    const size_t row = static_cast<size_t>(n) * sizeof(float), pitch = static_cast<size_t>(layer_floats_) * sizeof(float);
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int t = 0; t < 2; ++t) {  // K rows at host + 2 l n, V rows at host + (2 l + 1) n
      float* dev = (t == 0 ? keys_ : values_).data() + static_cast<int64_t>(block) * n;
      float* h = host + t * n;
      if (kind == cudaMemcpyDeviceToHost) {
        CUDA_CHECK(cudaMemcpy2D(h, 2 * row, dev, pitch, row, static_cast<size_t>(n_layers()), kind));
      } else {
        CUDA_CHECK(cudaMemcpy2D(dev, pitch, h, 2 * row, row, static_cast<size_t>(n_layers()), kind));
      }
    }
  }
  int64_t checked(int64_t layer) const {
    if (layer < 0 || layer >= n_layers()) {
      throw InvalidArgument("KvPool: layer " + std::to_string(layer) + " outside [0, " +
                            std::to_string(n_layers()) + ")");
    }
    return layer;
  }
  int64_t layer_floats_;  // n_slots * kv_dim
  DeviceBuffer<float> keys_, values_;
};

}  // namespace lio::cuda
