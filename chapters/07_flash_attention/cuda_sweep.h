// cuda_sweep.h — chapter 07's kernel sweep on the GPU: naive attention (materialized scores)
// against FlashAttention in f32 and on bf16 tensor cores, over sequence lengths, plus decode
// with and without Flash-Decoding's split. Needs no CUDA headers, so main.cpp (a .cpp) includes
// it; the body, cuda_sweep.cu, is built only when LIO_HAVE_CUDA.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace lio::ch07 {

/// Times chapter 07's CUDA kernels on device 0 for each N in `ns`, one sequence of N tokens:
///   prefill (causal, all N rows, f32 paged pool with block_size 16 and a shuffled block table):
///     naive_attention, flash_attention (f32) and flash_attention_bf16 (the same q, k, v rounded
///     to bf16, contiguous (heads, N, head_dim));
///   decode (one row at position N - 1 over the same pool): flash_attention with and without the
///     split (Flash-Decoding).
/// Random q, k, v uniform in [-1, 1) (seeded by N). Each time is the median of `repeats` runs
/// after one warm-up, measured with CUDA events on one stream, in ms.
/// Returns {"device": "<name>, <SMs> SMs, driver <x.y>, runtime <x.y>", "n_heads", "n_kv_heads",
/// "head_dim", "block_size", "repeats", "rows": [per N: "n", "naive_ms", "flash_f32_ms",
/// "flash_bf16_ms", "speedup_f32" (naive / flash f32), "tflops_bf16" (causal FLOPs,
/// cuda::flash_attention_bf16_flops, per second, 1e12), "naive_scores_bytes" (S: n_heads N^2
/// floats), "flash_workspace_bytes" (the prefill's FlashWorkspace: 0, it never splits),
/// "max_abs_diff" (flash f32 vs naive outputs), "max_abs_diff_bf16" (bf16 vs flash f32),
/// "decode_split_ms", "decode_nosplit_ms", "decode_splits", "decode_workspace_bytes"]}.
/// A naive run that does not fit in device memory reports naive_ms, speedup_f32, max_abs_diff
/// and naive_scores_bytes as null and "naive_error" with the message.
/// Throws lio::UnsupportedError if no usable GPU is present; lio::InvalidArgument for an empty
/// `ns`, an N < 1, head_dim other than 64 or 128, n_heads not a positive multiple of
/// n_kv_heads, or repeats < 1; lio::cuda::CudaError on a device failure.
nlohmann::ordered_json cuda_attention_sweep(const std::vector<int64_t>& ns, int64_t n_heads, int64_t n_kv_heads,
                                            int64_t head_dim, int repeats);

}  // namespace lio::ch07
