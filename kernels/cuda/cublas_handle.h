// cublas_handle.h — the cuBLAS helpers: CublasHandle (one owned cuBLAS handle, what matmul()
// takes for its prefill path) and check_cublas (a cuBLAS status to a CudaError).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <source_location>

namespace lio::cuda {

/// Owns one cuBLAS handle (cublasCreate / cublasDestroy) and its workspace. Default math mode:
/// SGEMM runs in full f32 (no TF32), so prefill logits stay close to the CPU path.
/// The workspace is ours (cublasSetWorkspace, at the size the cuBLAS API reference recommends:
/// 32 MiB on Hopper, 4 MiB before it), allocated once here, so a matmul captured into a CUDA graph
/// (issue 45: decode buckets past kGemvBatchedMaxRows go through cuBLAS) allocates nothing inside
/// the capture and every graph shares one workspace — PyTorch does the same for the same reason
/// (pytorch/pytorch#83461). Throws CudaError (with the cuBLAS status name) if creation fails or
/// the workspace cannot be allocated.
class CublasHandle {
 public:
  CublasHandle();
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  /// The raw handle, for cublas* calls.
  cublasHandle_t get() const { return handle_; }
  /// Bytes of the workspace set on the handle.
  size_t workspace_bytes() const { return workspace_bytes_; }
  /// Points the handle's next calls at `stream` and sets our workspace on it again:
  /// cublasSetStream resets the workspace to cuBLAS's default pool (cuBLAS API reference,
  /// cublasSetStream), so a matmul captured into a CUDA graph after a stream change would hold the
  /// default pool's memory instead of ours (issue 60, defect 2; PyTorch sets it again after every
  /// cublasSetStream for the same reason). Every cuBLAS call goes through here first. Const: the
  /// handle's state is cuBLAS's, not this object's. Throws CudaError if either call fails.
  void bind_stream(cudaStream_t stream) const;
  /// The stream the last bind_stream() set (null before the first).
  cudaStream_t bound_stream() const { return bound_stream_; }
  /// Whether our workspace is the one set on the handle now (true after construction and after
  /// each bind_stream(); tests read it, as cuBLAS has no getter for the workspace).
  bool own_workspace_bound() const { return own_workspace_bound_; }

 private:
  cublasHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;  // device memory, workspace_bytes_
  size_t workspace_bytes_ = 0;
  mutable cudaStream_t bound_stream_ = nullptr;
  mutable bool own_workspace_bound_ = false;
};

/// Throws CudaError naming the cuBLAS call `what`, its status and the caller's source location
/// unless `status` is CUBLAS_STATUS_SUCCESS.
void check_cublas(cublasStatus_t status, const char* what,
                  std::source_location loc = std::source_location::current());

}  // namespace lio::cuda
