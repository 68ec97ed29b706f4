// copy_bandwidth.h — the GPU benchmarks' bandwidth ceiling: a device-to-device copy measured in
// the same run (bench_cuda_decode, bench_cuda_gemv).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench_util.h"
#include "cuda_check.h"
#include "device_buffer.h"

namespace lio::bench {

/// Device-to-device copy rate of the current GPU in bytes/s, counting 2 x `bytes` per copy (read
/// + write: what a streaming kernel can at best reach), median of `repeats` copies of `bytes`
/// after one warm-up, timed with CUDA events on the default stream. Throws CudaError when the
/// buffers cannot be allocated or a call fails.
inline double measure_copy_bandwidth(int64_t bytes, int repeats) {
  lio::cuda::DeviceBuffer<std::byte> a(bytes), b(bytes);
  CUDA_CHECK(cudaMemset(a.data(), 1, static_cast<size_t>(bytes)));
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> rates;
  for (int r = 0; r < repeats + 1; ++r) {  // copy 0 warms up
    CUDA_CHECK(cudaEventRecord(start));
    CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (r > 0) rates.push_back(2.0 * static_cast<double>(bytes) / (ms * 1e-3));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(rates);
}

}  // namespace lio::bench
