// cuda_runtime_info.cu — is there a GPU we can run on? Answers without throwing, so tests
// and the CLI can decide to skip or fall back to the CPU.
#include <cuda_runtime.h>

#include "cuda_runtime_info.h"

namespace lio::cuda {

namespace {

// Does nothing; exists so cuda_available() can ask the runtime whether this binary holds
// a kernel image (SASS or JIT-able PTX) for the device.
__global__ void probe_kernel() {}

}  // namespace

int cuda_device_count() noexcept {
  int n_devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&n_devices);
  if (err != cudaSuccess) {
    // cudaErrorNoDevice / cudaErrorInsufficientDriver on machines without a GPU or driver.
    // Clear the runtime's last-error slot so a later cudaGetLastError() does not report a
    // stale error (without a driver, every runtime call keeps failing regardless).
    (void)cudaGetLastError();
    return 0;
  }
  return n_devices;
}

bool cuda_available() noexcept {
  if (cuda_device_count() <= 0) return false;
  // Creates the primary context on device 0 (the current device) and checks that one of our
  // images fits it: cudaErrorNoKernelImageForDevice / cudaErrorInvalidDeviceFunction otherwise.
  cudaFuncAttributes attributes{};
  const cudaError_t err = cudaFuncGetAttributes(&attributes, probe_kernel);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

}  // namespace lio::cuda
