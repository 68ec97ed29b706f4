// cuda_runner.h — the Llama forward pass on an NVIDIA GPU, behind the ModelRunner interface.
//
// Same math, same op order as Model (lio/model.h), each op a kernel from kernels/cuda:
//   embedding -> per layer [RMSNorm, Q/K/V matmuls (K and V written straight into the cache
//   rows), RoPE on q and the new k, attention, W_o matmul + residual, RMSNorm, gate/up matmuls,
//   SwiGLU, W_down matmul + residual] -> final RMSNorm -> LM head -> logits copied to the host.
// Matmuls: one token (decode) = a gemv that dequantizes the stored blocks in registers; more
// tokens (prefill) = cuBLAS SGEMM on a dequantized f32 copy of each matrix.
// Everything lives in this object: the stream, the cuBLAS handle, the weights (uploaded once,
// as stored or as converted by --dtype), the f32 KV cache and the scratch buffers. No globals.
// This header needs no CUDA headers, so CPU-only code may include it; the class exists only
// in builds with CUDA (LIO_HAVE_CUDA).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lio/model_config.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"

namespace lio::cuda {

/// Device time spent in one kind of operation over the profiled forward passes.
struct OpTime {
  std::string op;       ///< "gemv", "gemm (cuBLAS)", "attention", "rmsnorm", ...
  double total_ms = 0;  ///< summed kernel time (cudaEventElapsedTime), milliseconds
  int64_t calls = 0;    ///< number of launches timed
};

/// ModelRunner on CUDA device 0. Not thread-safe; one sequence at a time.
class CudaRunner final : public ModelRunner {
 public:
  /// Uploads `weights` (matrices in their dtype, norms as f32) to device 0 and creates the
  /// stream and cuBLAS handle. Keeps a reference to `config` (it must outlive the runner);
  /// `weights` may be freed afterwards. Throws UnsupportedError if no usable CUDA device is
  /// present, CudaError on an allocation or copy failure (e.g. "out of memory").
  CudaRunner(const ModelConfig& config, const Weights& weights);
  ~CudaRunner() override;
  CudaRunner(const CudaRunner&) = delete;
  CudaRunner& operator=(const CudaRunner&) = delete;

  const ModelConfig& config() const override;
  std::string device_description() const override;
  void reset(int64_t capacity_tokens) override;
  std::span<const float> forward(std::span<const int32_t> tokens, bool all_logits = false) override;
  /// ModelRunner::forward_sample's result. A greedy sampler (temperature 0) runs on the device:
  /// the repetition penalty over repeat_penalty_tokens(history, ...) and argmax over the logits
  /// row (kernels/cuda/sampling.cu), and only the token id and the row's NaN/+inf/-inf counts
  /// (12 bytes) come back instead of vocab_size floats. A row the sampler would reject is then
  /// copied back and handed to it, so the error is the CPU path's. Other samplers get the row on
  /// the host. Throws as ModelRunner::forward_sample.
  int32_t forward_sample(std::span<const int32_t> tokens, Sampler& sampler,
                         std::span<const int32_t> history) override;
  KvUsage kv_usage() const override;

  /// Bytes of weights held in device memory (tied matrices once).
  int64_t weight_bytes() const;

  /// When on, every op of forward() is bracketed by CUDA events and its device time is added
  /// to op_times(). Events serialize nothing but cost ~1 us each: leave off when timing tok/s.
  void set_profiling(bool on);
  /// Accumulated per-op device times since the last clear_op_times(), largest first.
  std::vector<OpTime> op_times() const;
  /// Zeroes the accumulated op times.
  void clear_op_times();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lio::cuda
