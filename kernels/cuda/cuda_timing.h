// cuda_timing.h — an owning CUDA stream and event, and the event-pair timing the GPU benchmarks
// share (bench/04's indirection benchmark, chapter 07's sweep): work queued between two events on
// one stream, its device time read once the second has fired (CUDA C++ Programming Guide,
// "Events").
#pragma once

#include <cuda_runtime.h>

#include "cuda_check.h"

namespace lio::cuda {

/// A CUDA stream (cudaStreamCreate), destroyed with its owner. Throws CudaError if creation fails.
class CudaStream {
 public:
  CudaStream() { CUDA_CHECK(cudaStreamCreate(&stream_)); }
  ~CudaStream() { cudaStreamDestroy(stream_); }  // error dropped: a destructor must not throw
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  /// The stream handle.
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

/// A CUDA event (cudaEventCreate, timing enabled), destroyed with its owner. Throws CudaError if
/// creation fails.
class CudaEvent {
 public:
  CudaEvent() { CUDA_CHECK(cudaEventCreate(&event_)); }
  ~CudaEvent() { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  /// The event handle.
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

/// Device time between `start` and `stop` (both recorded) in milliseconds, after waiting for
/// `stop` to fire (resolution about 0.5 us). Throws CudaError on failure.
inline float elapsed_ms(const CudaEvent& start, const CudaEvent& stop) {
  CUDA_CHECK(cudaEventSynchronize(stop.get()));
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

}  // namespace lio::cuda
