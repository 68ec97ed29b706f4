// device_buffer.h — DeviceBuffer<T>: an owning, move-only array in device memory, for tests,
// tools and the CUDA backend; ensure(): grow one on demand.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_check.h"
#include "lio/error.h"

namespace lio::cuda {

/// Owning, move-only array of `n_elems` T in device memory (cudaMalloc / cudaFree), for tests
/// and tools. Copies are synchronous: each returns when the data has arrived. They are ordered
/// after work on the legacy default stream (and blocking streams) but not after work on
/// cudaStreamNonBlocking streams — synchronize such a stream before copying its results back.
/// Errors throw CudaError / InvalidArgument.
template <typename T>
class DeviceBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "DeviceBuffer holds plain data only");

 public:
  DeviceBuffer() = default;

  /// Allocates n_elems elements (uninitialized). n_elems == 0 allocates nothing.
  explicit DeviceBuffer(int64_t n_elems) : n_elems_(n_elems) {
    if (n_elems < 0) {
      throw InvalidArgument("DeviceBuffer: n_elems must be >= 0, got " + std::to_string(n_elems));
    }
    if (n_elems > 0) CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), size_bytes()));
  }

  /// Allocates host.size() elements and copies `host` into them.
  static DeviceBuffer from_host(const std::vector<T>& host) {
    DeviceBuffer buf(static_cast<int64_t>(host.size()));
    buf.copy_from_host(host.data(), buf.n_elems());
    return buf;
  }

  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  /// Takes over `other`'s allocation; `other` is left empty.
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), n_elems_(std::exchange(other.n_elems_, 0)) {}
  /// Frees this buffer's allocation, then takes over `other`'s; `other` is left empty.
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      n_elems_ = std::exchange(other.n_elems_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  /// Device pointer to the first element; nullptr when empty.
  T* data() { return data_; }
  /// Device pointer to the first element; nullptr when empty.
  const T* data() const { return data_; }
  /// Number of elements of type T.
  int64_t n_elems() const { return n_elems_; }
  /// Allocation size in bytes: n_elems * sizeof(T).
  size_t size_bytes() const { return static_cast<size_t>(n_elems_) * sizeof(T); }

  /// Copies n_elems elements from host `src` to the start of the buffer.
  /// Throws InvalidArgument if n_elems is negative or exceeds the buffer.
  void copy_from_host(const T* src, int64_t n_elems) {
    check_count(n_elems, "copy_from_host");
    if (n_elems > 0) {
      CUDA_CHECK(cudaMemcpy(data_, src, static_cast<size_t>(n_elems) * sizeof(T),
                            cudaMemcpyHostToDevice));
      // From pageable memory cudaMemcpy may return before the DMA lands; a kernel launched
      // next on a non-blocking stream would not wait for it. Wait here.
      CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    }
  }

  /// Copies the first n_elems elements to host `dst`.
  void copy_to_host(T* dst, int64_t n_elems) const {
    check_count(n_elems, "copy_to_host");
    if (n_elems > 0) {
      CUDA_CHECK(cudaMemcpy(dst, data_, static_cast<size_t>(n_elems) * sizeof(T),
                            cudaMemcpyDeviceToHost));
    }
  }

  /// The whole buffer, copied to a new host vector.
  std::vector<T> to_host() const {
    std::vector<T> host(static_cast<size_t>(n_elems_));
    copy_to_host(host.data(), n_elems_);
    return host;
  }

 private:
  void check_count(int64_t n_elems, const char* what) const {
    if (n_elems < 0 || n_elems > n_elems_) {
      throw InvalidArgument(std::string("DeviceBuffer::") + what + ": " +
                            std::to_string(n_elems) + " elements requested, buffer holds " +
                            std::to_string(n_elems_));
    }
  }
  // cudaFree's error is dropped: a destructor must not throw, and a failure here means the
  // context is already broken (a sticky error), which the next checked call reports.
  void release() noexcept {
    if (data_ != nullptr) cudaFree(data_);
    data_ = nullptr;
    n_elems_ = 0;
  }

  T* data_ = nullptr;
  int64_t n_elems_ = 0;
};

/// Grows a device buffer to at least n elements (contents are not kept): the grow-only scratch
/// of the CUDA backend and of chapter 07's attention launchers. Waits for `stream` first: queued
/// kernels may still use the old allocation. Throws CudaError if the allocation fails.
template <typename T>
void ensure(DeviceBuffer<T>& buf, int64_t n, cudaStream_t stream) {
  if (buf.n_elems() >= n) return;
  CUDA_CHECK(cudaStreamSynchronize(stream));
  buf = DeviceBuffer<T>();  // free first: peak memory stays one buffer
  buf = DeviceBuffer<T>(n);
}

}  // namespace lio::cuda
