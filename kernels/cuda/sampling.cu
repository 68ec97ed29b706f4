// sampling.cu — the greedy sampler on the GPU: repetition penalty, then argmax of the logits
// row, so a decode step copies 12 bytes back to the host instead of vocab_size floats.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "sampling.h"
#include "lio/error.h"
#include "reduce.cuh"

namespace lio::cuda {

namespace {

constexpr int kArgmaxThreads = 1024;  // one block per row: 49k logits = 48 loads per thread
constexpr int kPenaltyThreads = 128;

/// Grid: (n_rows). Block: (kArgmaxThreads). Thread t walks columns t, t + kArgmaxThreads, ...
/// (coalesced) keeping its best candidate, then the block reduces the candidates with
/// argmax_combine — an order-independent choice, so the result is lio::argmax's. Invalid
/// (NaN, +inf) and masked (-inf) values are counted alongside.
__global__ void argmax_kernel(const float* x,     // (n_rows, n)
                              ArgmaxResult* out,  // (n_rows)
                              int64_t n) {
  using detail::ArgmaxCandidate;
  const float* row = x + static_cast<int64_t>(blockIdx.x) * n;
  ArgmaxCandidate best;
  int32_t n_invalid = 0, n_masked = 0;
  for (int64_t i = threadIdx.x; i < n; i += kArgmaxThreads) {
    const float v = row[i];
    n_invalid += !(v < INFINITY);  // NaN or +inf
    n_masked += v == -INFINITY;
    // Columns rise within a thread, so a strict "beats" keeps the first of equal values.
    const ArgmaxCandidate c{v, static_cast<int32_t>(i)};
    if (detail::argmax_beats(c, best)) best = c;
  }
  best = detail::warp_argmax(best);
  constexpr int kWarps = kArgmaxThreads / detail::kWarpSize;
  // Plain arrays: a __shared__ variable may not have a constructor (ArgmaxCandidate has one).
  __shared__ float warp_value[kWarps];
  __shared__ int32_t warp_index[kWarps], warp_invalid[kWarps], warp_masked[kWarps];
  const int lane = threadIdx.x % detail::kWarpSize;
  const int warp = threadIdx.x / detail::kWarpSize;
  n_invalid = __reduce_add_sync(0xffffffffu, n_invalid);  // sm_80+
  n_masked = __reduce_add_sync(0xffffffffu, n_masked);
  if (lane == 0) {
    warp_value[warp] = best.value;
    warp_index[warp] = best.index;
    warp_invalid[warp] = n_invalid;
    warp_masked[warp] = n_masked;
  }
  __syncthreads();
  if (warp != 0) return;
  static_assert(kWarps == detail::kWarpSize, "the first warp reduces one partial per lane");
  best = detail::warp_argmax(ArgmaxCandidate{warp_value[lane], warp_index[lane]});
  n_invalid = __reduce_add_sync(0xffffffffu, warp_invalid[lane]);
  n_masked = __reduce_add_sync(0xffffffffu, warp_masked[lane]);
  if (lane == 0) {
    // No candidate at all means every value was NaN; lio::argmax answers 0 then.
    out[blockIdx.x] =
        ArgmaxResult{best.index == ArgmaxCandidate::kNoIndex ? 0 : best.index, n_invalid, n_masked};
  }
}

/// Grid: (n_rows). Block: (1). The scalar loop argmax_kernel is equivalent to.
__global__ void argmax_naive_kernel(const float* x,     // (n_rows, n)
                                    ArgmaxResult* out,  // (n_rows)
                                    int64_t n) {
  const float* row = x + static_cast<int64_t>(blockIdx.x) * n;
  ArgmaxResult r{0, 0, 0};
  float best = -INFINITY;
  bool any = false;
  for (int64_t i = 0; i < n; ++i) {
    const float v = row[i];
    r.n_invalid += !(v < INFINITY);
    r.n_masked += v == -INFINITY;
    if (v > best || (!any && v == best)) {  // the first non-NaN value starts the search
      best = v;
      r.index = static_cast<int32_t>(i);
      any = true;
    }
  }
  *(out + blockIdx.x) = r;
}

/// Grid: (ceil(n_tokens / kPenaltyThreads)). Block: (kPenaltyThreads). One thread per token id;
/// the ids are distinct, so no two threads touch the same logit. The formula is
/// lio::repeat_penalty_logit's (lio/sampler.h): divide positive logits, multiply the rest.
__global__ void repeat_penalty_kernel(float* logits,          // (vocab_size)
                                      const int32_t* tokens,  // (n_tokens) distinct ids
                                      int64_t n_tokens, float penalty) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_tokens) return;
  float& l = logits[tokens[i]];
  l = l > 0.0f ? l / penalty : l * penalty;
}

/// The launch checks argmax() and argmax_naive() share.
void check_argmax_args(const char* who, const float* x, const ArgmaxResult* out, int64_t n_rows,
                       int64_t n) {
  const std::string name = std::string("cuda::") + who;
  if (n_rows < 0 || n_rows > INT32_MAX) {
    throw InvalidArgument(name + ": n_rows must be in [0, INT32_MAX], got " +
                          std::to_string(n_rows));
  }
  if (n <= 0 || n > INT32_MAX) {
    throw InvalidArgument(name + ": row length must be in [1, INT32_MAX], got " +
                          std::to_string(n));
  }
  if (n_rows > 0 && (x == nullptr || out == nullptr)) {
    throw InvalidArgument(name + ": null device pointer (x or out)");
  }
}

}  // namespace

void argmax(const float* x, ArgmaxResult* out, int64_t n_rows, int64_t n, cudaStream_t stream) {
  check_argmax_args("argmax", x, out, n_rows, n);
  if (n_rows == 0) return;
  argmax_kernel<<<static_cast<unsigned>(n_rows), kArgmaxThreads, 0, stream>>>(x, out, n);
  CUDA_CHECK(cudaGetLastError());
}

void argmax_naive(const float* x, ArgmaxResult* out, int64_t n_rows, int64_t n,
                  cudaStream_t stream) {
  check_argmax_args("argmax_naive", x, out, n_rows, n);
  if (n_rows == 0) return;
  argmax_naive_kernel<<<static_cast<unsigned>(n_rows), 1, 0, stream>>>(x, out, n);
  CUDA_CHECK(cudaGetLastError());
}

void repeat_penalty(float* logits, const int32_t* tokens, int64_t n_tokens, float penalty,
                    cudaStream_t stream) {
  if (n_tokens < 0) {
    throw InvalidArgument("cuda::repeat_penalty: n_tokens must be >= 0, got " +
                          std::to_string(n_tokens));
  }
  if (!(penalty > 0.0f && penalty < INFINITY)) {
    throw InvalidArgument("cuda::repeat_penalty: penalty must be > 0 and finite, got " +
                          std::to_string(penalty));
  }
  if (n_tokens == 0) return;
  if (logits == nullptr || tokens == nullptr) {
    throw InvalidArgument("cuda::repeat_penalty: null device pointer (logits or tokens)");
  }
  const auto n_blocks = static_cast<unsigned>((n_tokens + kPenaltyThreads - 1) / kPenaltyThreads);
  repeat_penalty_kernel<<<n_blocks, kPenaltyThreads, 0, stream>>>(logits, tokens, n_tokens,
                                                                  penalty);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace lio::cuda
