// cublas_handle.cpp — the cuBLAS helpers (cublas_handle.h): the owned handle and the status
// check every cuBLAS call goes through.
#include "cublas_handle.h"

#include <cuda_runtime.h>

#include <string>

#include "cuda_check.h"

namespace lio::cuda {

void check_cublas(cublasStatus_t status, const char* what, std::source_location loc) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(cudaErrorUnknown, std::string(loc.file_name()) + ":" +
                                        std::to_string(loc.line()) + ": " + what + " failed: " +
                                        cublasGetStatusName(status) + " (" +
                                        cublasGetStatusString(status) + ")");
}

CublasHandle::CublasHandle() {
  check_cublas(cublasCreate(&handle_), "cublasCreate");
  int device = 0, major = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  const size_t bytes = (major >= 9 ? 32u : 4u) << 20;  // the cuBLAS API reference's recommendation
  if (status == cudaSuccess) status = cudaMalloc(&workspace_, bytes);
  if (status != cudaSuccess) {
    cublasDestroy(handle_);
    handle_ = nullptr;
    workspace_ = nullptr;
    CUDA_CHECK(status);
  }
  workspace_bytes_ = bytes;
  const cublasStatus_t set = cublasSetWorkspace(handle_, workspace_, workspace_bytes_);
  if (set != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(handle_);
    cudaFree(workspace_);
    handle_ = nullptr;
    workspace_ = nullptr;
    check_cublas(set, "cublasSetWorkspace");
  }
  own_workspace_bound_ = true;
}

void CublasHandle::bind_stream(cudaStream_t stream) const {
  own_workspace_bound_ = false;
  check_cublas(cublasSetStream(handle_, stream), "cublasSetStream");
  bound_stream_ = stream;
  check_cublas(cublasSetWorkspace(handle_, workspace_, workspace_bytes_), "cublasSetWorkspace");
  own_workspace_bound_ = true;
}

CublasHandle::~CublasHandle() {
  // A destructor must not throw: errors are dropped (a broken context reports itself at the
  // next checked call).
  if (handle_ != nullptr) cublasDestroy(handle_);
  if (workspace_ != nullptr) cudaFree(workspace_);
}

}  // namespace lio::cuda
