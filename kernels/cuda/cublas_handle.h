// cublas_handle.h — the cuBLAS helpers: CublasHandle (one owned cuBLAS handle, what matmul()
// takes for its prefill path) and check_cublas (a cuBLAS status to a CudaError).
#pragma once

#include <cublas_v2.h>

#include <source_location>

namespace lio::cuda {

/// Owns one cuBLAS handle (cublasCreate / cublasDestroy). Default math mode: SGEMM runs in
/// full f32 (no TF32), so prefill logits stay close to the CPU path.
/// Throws CudaError (with the cuBLAS status name) if creation fails.
class CublasHandle {
 public:
  CublasHandle();
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  /// The raw handle, for cublas* calls.
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

/// Throws CudaError naming the cuBLAS call `what`, its status and the caller's source location
/// unless `status` is CUBLAS_STATUS_SUCCESS.
void check_cublas(cublasStatus_t status, const char* what,
                  std::source_location loc = std::source_location::current());

}  // namespace lio::cuda
