// sampling.h — greedy sampling on the GPU (sampling.cu): the argmax per logits row, its naive twin,
// and the repetition penalty.
//
// Launcher conventions (README.md in this folder): device pointers, an explicit stream, shapes
// checked on the host (lio::InvalidArgument), launches checked (lio::cuda::CudaError).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lio::cuda {

/// What argmax() finds in one row of logits: enough for the host to pick the greedy token, or
/// to see that Sampler::sample would reject the row (then it copies the row back for the error).
struct ArgmaxResult {
  int32_t index = 0;      ///< first position of the largest value, as lio::argmax (NaN is never
                          ///< chosen over a number; 0 when every value is NaN)
  int32_t n_invalid = 0;  ///< values that are NaN or +inf (the sampler rejects such a row)
  int32_t n_masked = 0;   ///< values equal to -inf (the sampler rejects a row of only these)
};

/// Greedy decoding's argmax, per row: out[r] = {lio::argmax(x[r]), counts}. x: (n_rows, n) f32,
/// out: (n_rows) — device pointers. One block of 1024 threads per row: strided coalesced
/// reads, then a warp-shuffle and shared-memory reduction of (value, index) candidates whose
/// order ("larger value, then lower index") makes the result independent of reduction order.
/// Preconditions (throw InvalidArgument): 0 <= n_rows <= INT32_MAX (0 launches nothing),
/// 1 <= n <= INT32_MAX, non-null pointers. Throws CudaError if the launch fails.
void argmax(const float* x, ArgmaxResult* out, int64_t n_rows, int64_t n, cudaStream_t stream);

/// Same contract as argmax(); one thread per row scanning it in order. The reference.
void argmax_naive(const float* x, ArgmaxResult* out, int64_t n_rows, int64_t n, cudaStream_t stream);

/// The repetition penalty in place: logits[t] = repeat_penalty_logit(logits[t], penalty) for each
/// id t in `tokens` — lio::repeat_penalty_logit (lio/sampler.h; CTRL, Keskar et al. 2019,
/// sec. 4.1), bit for bit. logits: (vocab_size) f32; tokens: (n_tokens) int32 — device pointers.
/// The ids must be DISTINCT (each token is penalized once; duplicates would race) and inside
/// [0, vocab_size): lio::repeat_penalty_tokens() gives such a list; neither is re-checked here.
/// Preconditions (throw InvalidArgument): n_tokens >= 0 (0 launches nothing), penalty > 0 and
/// finite, non-null pointers. Throws CudaError if the launch fails.
void repeat_penalty(float* logits, const int32_t* tokens, int64_t n_tokens, float penalty,
                    cudaStream_t stream);

}  // namespace lio::cuda
