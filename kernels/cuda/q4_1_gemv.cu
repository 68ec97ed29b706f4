// q4_1_gemv.cu — the GIVEN launcher of chapter 03's Task 7 kernel (q4_1_gemv.h): it checks every
// shape and pointer, then launches q4_1_gemv_kernel, whose body is the learner's
// (exercises|solutions/03_quantization/q4_1_gemv_kernel.cu, linked through lio_ch03_cuda).
// Kernels trust, launchers verify: the kernel sees only shapes that passed these checks.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "lio/error.h"
#include "q4_1_gemv.h"

namespace lio::cuda {

namespace {

static_assert(q4_1_gemv_smem_bytes(kQ4_1GemvMaxBatch, 1536) <= kQ4_1GemvMaxSmemBytes,
              "8 rows of SmolLM2's widest input (1,536) fit the default 48 KiB");

[[noreturn]] void refuse(const std::string& what) {
  throw InvalidArgument("launch_q4_1_gemv: " + what);
}

/// Whether the byte ranges [a, a + a_bytes) and [b, b + b_bytes) share an address.
bool ranges_overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  return a0 < b0 + static_cast<uintptr_t>(b_bytes) && b0 < a0 + static_cast<uintptr_t>(a_bytes);
}

}  // namespace

void launch_q4_1_gemv(const BlockQ4_1* w, const float* x, float* y, int64_t n_rows, int64_t n_cols,
                      int64_t n_batch, bool accumulate, cudaStream_t stream) {
  // ---- shapes: every check before any CUDA call, so they hold on a machine without a GPU ----
  if (n_rows < 0 || n_rows > INT32_MAX) {
    refuse("n_rows must be in 0 .. INT32_MAX (rows are int in the kernel), got " +
           std::to_string(n_rows));
  }
  if (n_cols < kQuantBlockElems || n_cols % kQuantBlockElems != 0 || n_cols > INT32_MAX) {
    refuse("n_cols must be a positive multiple of 32 (whole Q4_1 blocks) up to INT32_MAX, got " +
           std::to_string(n_cols));
  }
  if (n_batch < 1 || n_batch > kQ4_1GemvMaxBatch) {
    refuse("n_batch must be in 1 .. " + std::to_string(kQ4_1GemvMaxBatch) + ", got " +
           std::to_string(n_batch));
  }
  if (n_cols > static_cast<int64_t>(kQ4_1GemvMaxSmemBytes / sizeof(float)) / n_batch) {
    refuse("x (n_batch " + std::to_string(n_batch) + " x n_cols " + std::to_string(n_cols) +
           " floats) does not fit the " + std::to_string(kQ4_1GemvMaxSmemBytes) +
           " bytes of shared memory a block stages it in: at most 12,288 floats");
  }
  if (n_rows == 0) return;
  if (w == nullptr || x == nullptr || y == nullptr) {
    refuse("w, x and y must be non-null device pointers");
  }
  if (reinterpret_cast<uintptr_t>(w) % 4 != 0) {
    refuse("w must be 4-byte aligned (a block's fields are read as 32-bit words)");
  }
  const int64_t w_bytes = n_rows * (n_cols / kQuantBlockElems) * kQ4_1BlockBytes;
  const int64_t x_bytes = n_batch * n_cols * static_cast<int64_t>(sizeof(float));
  const int64_t y_bytes = n_batch * n_rows * static_cast<int64_t>(sizeof(float));
  if (ranges_overlap(y, y_bytes, w, w_bytes) || ranges_overlap(y, y_bytes, x, x_bytes)) {
    refuse("y overlaps w or x (the kernel reads its inputs while it writes y)");
  }

  // ---- launch -------------------------------------------------------------------------------
  q4_1_gemv_kernel<<<static_cast<unsigned>(q4_1_gemv_blocks(n_rows)), kQ4_1GemvThreads,
                     q4_1_gemv_smem_bytes(n_batch, n_cols), stream>>>(
      w, x, y, static_cast<int>(n_rows), static_cast<int>(n_cols), static_cast<int>(n_batch),
      accumulate);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace lio::cuda
