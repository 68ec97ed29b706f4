// cuda_runtime_info.h — is there a GPU this build can run on? Both answers come without
// throwing, so tests can skip and the CLI can fall back to the CPU.
#pragma once

namespace lio::cuda {

/// Number of CUDA devices this process can use: 0 when there is no driver, no GPU, or the
/// runtime reports any error. Never throws. It clears the runtime's last-error slot, but
/// without a driver every later runtime call still fails (cudaErrorInsufficientDriver).
int cuda_device_count() noexcept;

/// True when device 0 exists and this build's kernels have an image it can run (we build
/// sm_80/sm_90 SASS plus PTX, so older GPUs answer false). Creates the CUDA context on
/// first use (tens to hundreds of ms). Never throws. Tests start with
/// `if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";`.
bool cuda_available() noexcept;

}  // namespace lio::cuda
