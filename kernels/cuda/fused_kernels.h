// fused_kernels.h — which of issue 45's fused decode kernels run: the one place the choice is made.
// A backend holds one FusedKernels and asks it before each candidate operator; the kernels
// (gemv_fused.h, gemv.h's gemv_q4_1_wide, rope.h's rope_qk) and cuda::matmul know no flag. Off by
// default until a GPU check has compared them with the unfused kernels (--fused-kernels turns
// them on; CudaBackend::set_fused_kernels).
#pragma once

#include <cstdint>
#include <span>

#include "device_matrix.h"

namespace lio::cuda {

/// The fused-kernel policy (issue 45). Host-only, no GPU needed: every answer is arithmetic on
/// shapes and dtypes. Each method says when its fused kernel replaces the unfused sequence; a
/// `false` means the caller runs the unfused kernels (same results up to summation order, or bit
/// for bit for rope_qk).
class FusedKernels {
 public:
  /// `enabled`: --fused-kernels. Disabled, every method answers false.
  explicit FusedKernels(bool enabled = false) : enabled_(enabled) {}

  /// Whether the fused kernels are on at all (--fused-kernels).
  bool enabled() const { return enabled_; }

  /// gemv_q4_1_wide() instead of matmul()'s gemv(): on, one row of x (n_rows == 1), and
  /// gemv_wide_supports(w) (Q4_1, cols a multiple of 32 up to kGemvMaxSharedCols, 4-byte aligned).
  bool wide_q4_1_gemv(const DeviceMatrix& w, int64_t n_rows) const;

  /// rmsnorm_gemv_many() (or rmsnorm_gemv_swiglu() for a gate/up pair) instead of rmsnorm() and
  /// one gemv() per matrix: on, one row, 1 .. kMaxFusedGemvOuts matrices, all of the first one's
  /// dtype with cols == dim, and fused_gemv_supports(dim). The caller adds its own conditions
  /// (a matrix whose x it rounds to int8 takes gemv_int8 instead). Null entries answer false.
  bool rmsnorm_gemv(int64_t dim, std::span<const DeviceMatrix* const> weights, int64_t n_rows) const;

  /// rope_qk() (one launch, bitwise the two rope() calls) instead of rope() on Q then on K: on.
  bool rope_qk() const { return enabled_; }

 private:
  bool enabled_ = false;
};

}  // namespace lio::cuda
