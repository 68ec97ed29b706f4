// cuda_device_memory.h — private to the CUDA backend: the memory it owns besides its weights
// and KV pool — page-locked host staging (PinnedBuffer); grow-only device scratch is ensure() in
// device_buffer.h.
// The KV pool in device memory is DeviceKvPool (device_kv_pool.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda_check.h"
#include "device_buffer.h"

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
  /// Elements it holds room for.
  int64_t capacity() const { return capacity_; }

 private:
  T* data_ = nullptr;
  int64_t capacity_ = 0;
};

}  // namespace lio::cuda
