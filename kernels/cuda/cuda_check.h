// cuda_check.h — the one place CUDA runtime errors become lio exceptions.
//
// CUDA_CHECK(expr) evaluates a CUDA runtime call once; if it returns anything but
// cudaSuccess it throws lio::cuda::CudaError (a lio::Error) whose what() reads
//   "kernels/cuda/rope.cu:212: cudaGetLastError() failed: invalid configuration argument
//    (cudaErrorInvalidConfiguration)".
// It is a macro only because it must capture the failing expression's text.
#pragma once

#include <cuda_runtime.h>

#include <source_location>
#include <string>

#include "lio/error.h"

namespace lio::cuda {

/// A CUDA runtime call failed. code() is the runtime's error; what() names the call and
/// where it was made. Sticky errors (e.g. an illegal address inside a kernel) leave the
/// context unusable; the caller should stop using the device after catching one.
class CudaError : public Error {
 public:
  CudaError(cudaError_t code, const std::string& message) : Error(message), code_(code) {}
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

/// Throws CudaError for `code`, naming `expr` and the source location. Used by CUDA_CHECK.
[[noreturn]] inline void throw_cuda_error(cudaError_t code, const char* expr,
                                          std::source_location loc) {
  throw CudaError(code, std::string(loc.file_name()) + ":" + std::to_string(loc.line()) + ": " +
                            expr + " failed: " + cudaGetErrorString(code) + " (" +
                            cudaGetErrorName(code) + ")");
}

}  // namespace lio::cuda

/// Evaluates a cudaError_t expression once and throws lio::cuda::CudaError unless it is
/// cudaSuccess.
#define CUDA_CHECK(expr)                                                              \
  do {                                                                                \
    const cudaError_t lio_cuda_check_code_ = (expr);                                  \
    if (lio_cuda_check_code_ != cudaSuccess) {                                        \
      ::lio::cuda::throw_cuda_error(lio_cuda_check_code_, #expr,                      \
                                    std::source_location::current());                 \
    }                                                                                 \
  } while (0)
