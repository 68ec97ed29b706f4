// paged_decode.cu — the GIVEN launcher of chapter 04's Task 6 kernel (paged_decode.h): it checks
// every shape and pointer, then launches paged_decode_kernel, whose body is the learner's
// (exercises|solutions/04_paged_attention/paged_decode_kernel.cu, linked through lio_ch04_cuda).
// Kernels trust, launchers verify: the kernel sees only shapes that passed these checks. The
// block tables and context lengths live on the device: their contract is the caller's
// (paged_decode.h), as in the engine's paged_attention.cu.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "lio/error.h"
#include "paged_decode.h"

namespace lio::cuda {

namespace {

/// Dynamic shared memory a kernel may use without opting in (CUDA C++ Programming Guide, "Shared
/// Memory": 48 KiB).
constexpr size_t kDefaultSmemBytes = 48 * 1024;
static_assert(paged_decode_smem_bytes(kPagedDecodeMaxHeadDim) <= kDefaultSmemBytes,
              "at every head_dim the tiles fit the default 48 KiB: no launch needs the opt-in");

[[noreturn]] void refuse(const std::string& what) {
  throw InvalidArgument("launch_paged_decode: " + what);
}

/// Whether the float ranges [a, a + a_elems) and [b, b + b_elems) share an address.
bool ranges_overlap(const float* a, int64_t a_elems, const float* b, int64_t b_elems) {
  const auto a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  return a0 < b0 + static_cast<uintptr_t>(b_elems) * sizeof(float) &&
         b0 < a0 + static_cast<uintptr_t>(a_elems) * sizeof(float);
}

}  // namespace

void launch_paged_decode(const float* q, const float* k_pool, const float* v_pool, float* out,
                         const int32_t* block_tables, const int32_t* seq_lens, int64_t n_seqs,
                         int64_t n_blocks, int64_t block_size, int64_t max_blocks_per_seq,
                         int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale,
                         cudaStream_t stream) {
  // ---- shapes: every check before any CUDA call, so they hold on a machine without a GPU ----
  if (n_seqs < 0 || n_seqs > INT32_MAX) {
    refuse("n_seqs must be in 0 .. INT32_MAX (one block column per sequence), got " +
           std::to_string(n_seqs));
  }
  if (n_blocks < 1 || block_size < 1 || max_blocks_per_seq < 1) {
    refuse("n_blocks, block_size and max_blocks_per_seq must be >= 1, got " +
           std::to_string(n_blocks) + ", " + std::to_string(block_size) + " and " +
           std::to_string(max_blocks_per_seq));
  }
  if (max_blocks_per_seq > INT32_MAX / block_size) {
    refuse("max_blocks_per_seq x block_size (" + std::to_string(max_blocks_per_seq) + " x " +
           std::to_string(block_size) + ") exceeds INT32_MAX (positions are int)");
  }
  if (n_heads < 1 || n_kv_heads < 1) {
    refuse("n_heads and n_kv_heads must be >= 1, got " + std::to_string(n_heads) + " and " +
           std::to_string(n_kv_heads));
  }
  if (n_heads % n_kv_heads != 0) {
    refuse("n_heads (" + std::to_string(n_heads) + ") must be a multiple of n_kv_heads (" +
           std::to_string(n_kv_heads) + ")");
  }
  if (n_heads > 65535) {
    refuse("n_heads " + std::to_string(n_heads) + " exceeds 65,535 (n_kv_heads is the grid's y)");
  }
  if (head_dim < kPagedDecodeHeadDimStep || head_dim > kPagedDecodeMaxHeadDim ||
      head_dim % kPagedDecodeHeadDimStep != 0) {
    refuse("head_dim must be a multiple of " + std::to_string(kPagedDecodeHeadDimStep) + " in " +
           std::to_string(kPagedDecodeHeadDimStep) + " .. " +
           std::to_string(kPagedDecodeMaxHeadDim) + ", got " + std::to_string(head_dim));
  }
  if (n_blocks > INT64_MAX / block_size / (n_kv_heads * head_dim)) {
    refuse("the pool's n_blocks x block_size x n_kv_heads x head_dim overflows int64 (n_blocks " +
           std::to_string(n_blocks) + ", block_size " + std::to_string(block_size) + ")");
  }
  if (!std::isfinite(scale)) refuse("scale must be finite, got " + std::to_string(scale));
  if (n_seqs == 0) return;
  if (q == nullptr || k_pool == nullptr || v_pool == nullptr || out == nullptr ||
      block_tables == nullptr || seq_lens == nullptr) {
    refuse("q, k_pool, v_pool, out, block_tables and seq_lens must be non-null device pointers");
  }
  const int64_t q_elems = n_seqs * n_heads * head_dim;
  const int64_t pool_elems = n_blocks * block_size * n_kv_heads * head_dim;
  if (ranges_overlap(out, q_elems, q, q_elems) || ranges_overlap(out, q_elems, k_pool, pool_elems) ||
      ranges_overlap(out, q_elems, v_pool, pool_elems)) {
    refuse("out overlaps q, k_pool or v_pool (the kernel reads its inputs while it writes out)");
  }

  // ---- launch -------------------------------------------------------------------------------
  const dim3 grid(static_cast<unsigned>(n_seqs), static_cast<unsigned>(n_kv_heads),
                  static_cast<unsigned>(paged_decode_blocks_per_group(n_heads, n_kv_heads)));
  paged_decode_kernel<<<grid, kPagedDecodeThreads, paged_decode_smem_bytes(head_dim), stream>>>(
      q, k_pool, v_pool, out, block_tables, seq_lens, static_cast<int>(max_blocks_per_seq),
      static_cast<int>(block_size), static_cast<int>(n_heads), static_cast<int>(n_kv_heads),
      static_cast<int>(head_dim), scale);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace lio::cuda
