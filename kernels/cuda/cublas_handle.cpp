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

CublasHandle::CublasHandle() { check_cublas(cublasCreate(&handle_), "cublasCreate"); }

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) cublasDestroy(handle_);  // a destructor must not throw
}

}  // namespace lio::cuda
