// flash_forward.cu — the GIVEN launcher of chapter 07's Task 6 kernel (flash_forward.h): it checks
// every shape and pointer, then launches flash_forward_kernel, whose body is the learner's
// (exercises|solutions/07_flash_attention/flash_attention_kernel.cu, linked through lio_ch07_cuda).
// Kernels trust, launchers verify: the kernel sees only shapes that passed these checks.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "flash_forward.h"
#include "lio/error.h"

namespace lio::cuda {

namespace {

/// Dynamic shared memory a kernel may use without opting in (CUDA C++ Programming Guide, "Shared
/// Memory": 48 KiB; sm_80 / sm_90 allow up to 163 / 227 KiB per block after opting in).
constexpr size_t kDefaultSmemBytes = 48 * 1024;
static_assert(
    flash_forward_smem_bytes(kFlashForwardMaxHeadDim) <= kDefaultSmemBytes,
    "at every head_dim the tiles fit the default 48 KiB: no launch needs the opt-in today");

[[noreturn]] void refuse(const std::string& what) {
  throw InvalidArgument("launch_flash_forward: " + what);
}

/// Whether [a, a + a_elems) and [b, b + b_elems) share a float (compared as addresses).
bool overlaps(const float* a, int64_t a_elems, const float* b, int64_t b_elems) {
  const auto a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  const uintptr_t a1 = a0 + static_cast<uintptr_t>(a_elems) * sizeof(float);
  const uintptr_t b1 = b0 + static_cast<uintptr_t>(b_elems) * sizeof(float);
  return a0 < b1 && b0 < a1;
}

}  // namespace

void launch_flash_forward(const float* q, const float* k, const float* v, float* out, int64_t n_q,
                          int64_t start_pos, int64_t n_ctx, int64_t n_heads, int64_t n_kv_heads,
                          int64_t head_dim, float scale, cudaStream_t stream) {
  // ---- shapes: every check before any CUDA call, so they hold on a machine without a GPU ----
  if (n_q < 0) refuse("n_q must be >= 0, got " + std::to_string(n_q));
  if (start_pos < 0) refuse("start_pos must be >= 0, got " + std::to_string(start_pos));
  if (n_heads < 1 || n_kv_heads < 1) {
    refuse("n_heads and n_kv_heads must be >= 1, got " + std::to_string(n_heads) + " and " +
           std::to_string(n_kv_heads));
  }
  if (n_heads % n_kv_heads != 0) {
    refuse("n_heads (" + std::to_string(n_heads) + ") must be a multiple of n_kv_heads (" +
           std::to_string(n_kv_heads) + ")");
  }
  if (n_heads > 65535) {
    refuse("n_heads " + std::to_string(n_heads) +
           " exceeds the grid's y limit of 65,535 (one block row per head)");
  }
  if (head_dim < kFlashForwardHeadDimStep || head_dim > kFlashForwardMaxHeadDim ||
      head_dim % kFlashForwardHeadDimStep != 0) {
    refuse("head_dim must be a multiple of " + std::to_string(kFlashForwardHeadDimStep) + " in " +
           std::to_string(kFlashForwardHeadDimStep) + " .. " +
           std::to_string(kFlashForwardMaxHeadDim) + ", got " + std::to_string(head_dim));
  }
  if (n_ctx < start_pos + n_q) {
    refuse("n_ctx (" + std::to_string(n_ctx) + ") < start_pos + n_q (" + std::to_string(start_pos) +
           " + " + std::to_string(n_q) + "): the last query's own key is not in the cache");
  }
  if (start_pos + n_q > INT32_MAX) {
    refuse("start_pos + n_q = " + std::to_string(start_pos + n_q) +
           " exceeds INT32_MAX (positions are int)");
  }
  if (n_ctx > INT64_MAX / (n_kv_heads * head_dim)) {
    refuse("n_ctx x n_kv_heads x head_dim overflows int64 (n_ctx " + std::to_string(n_ctx) + ")");
  }
  if (!std::isfinite(scale)) refuse("scale must be finite, got " + std::to_string(scale));
  if (n_q == 0) return;
  if (q == nullptr || k == nullptr || v == nullptr || out == nullptr) {
    refuse("q, k, v and out must be non-null device pointers");
  }
  const int64_t q_elems = n_q * n_heads * head_dim;
  const int64_t kv_elems = n_ctx * n_kv_heads * head_dim;
  if (overlaps(out, q_elems, q, q_elems) || overlaps(out, q_elems, k, kv_elems) ||
      overlaps(out, q_elems, v, kv_elems)) {
    refuse("out overlaps q, k or v (the kernel reads its inputs while it writes out)");
  }

  // ---- launch -------------------------------------------------------------------------------
  const size_t smem_bytes = flash_forward_smem_bytes(head_dim);
  if (smem_bytes > kDefaultSmemBytes) {
    // Past 48 KiB a kernel must opt in (cudaFuncAttributeMaxDynamicSharedMemorySize), up to the
    // device's per-block maximum. Unreachable with the tiles of flash_forward.h (static_assert
    // above); it keeps a larger kFlashForwardKeys (64 keys at head_dim 128: 64 KiB) launchable.
    int device = 0, max_optin = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (smem_bytes > static_cast<size_t>(max_optin)) {
      refuse("the tiles need " + std::to_string(smem_bytes) +
             " bytes of shared memory; this GPU allows " + std::to_string(max_optin) +
             " per block");
    }
    CUDA_CHECK(cudaFuncSetAttribute(flash_forward_kernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem_bytes)));
  }
  const dim3 grid(static_cast<unsigned>((n_q + kFlashForwardRows - 1) / kFlashForwardRows),
                  static_cast<unsigned>(n_heads));
  flash_forward_kernel<<<grid, kFlashForwardThreads, smem_bytes, stream>>>(
      q, k, v, out, static_cast<int>(n_q), static_cast<int>(start_pos), static_cast<int>(n_heads),
      static_cast<int>(n_kv_heads), static_cast<int>(head_dim), scale);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace lio::cuda
