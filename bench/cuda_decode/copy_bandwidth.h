// copy_bandwidth.h — the GPU benchmarks' bandwidth ceiling: a device-to-device copy measured in
// the same run (bench_cuda_decode, bench_cuda_gemv). The ceiling is HBM's, so the copied buffer
// must be several times the L2 (hbm_working_set.h): a copy of a buffer that fits in the L2 reads
// it back from there and would overstate the ceiling (issue 60, defect 6).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench_util.h"
#include "cuda_check.h"
#include "device_buffer.h"
#include "hbm_working_set.h"

namespace lio::bench {

/// L2 cache size of the current CUDA device in bytes (cudaDevAttrL2CacheSize; 0 when it reports
/// none). Throws CudaError when the query fails.
inline int64_t device_l2_bytes() {
  int device = 0, l2 = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  return l2;
}

/// Device-to-device copy rate of the current GPU's HBM in bytes/s, counting 2 x `bytes` per copy
/// (read + write: what a streaming kernel can at best reach), median of `repeats` copies of
/// `bytes` after one warm-up, timed with CUDA events on the default stream. Throws
/// InvalidArgument when `bytes` is below hbm_working_set_target_bytes(device_l2_bytes()) (the
/// copy would read the L2, not HBM), CudaError when the buffers cannot be allocated or a call
/// fails.
inline double measure_copy_bandwidth(int64_t bytes, int repeats) {
  const int64_t l2_bytes = device_l2_bytes();
  if (!streams_from_hbm(bytes, l2_bytes)) {
    throw InvalidArgument("measure_copy_bandwidth: a copy of " + std::to_string(bytes) + " bytes reads the " +
                          std::to_string(l2_bytes) + "-byte L2, not HBM; copy at least " +
                          std::to_string(hbm_working_set_target_bytes(l2_bytes)) + " bytes");
  }
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
