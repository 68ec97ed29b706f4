// fused_kernels.cpp — FusedKernels (fused_kernels.h): issue 45's fused kernels, chosen in one place.
#include "fused_kernels.h"

#include "gemv.h"
#include "gemv_fused.h"

namespace lio::cuda {

bool FusedKernels::wide_q4_1_gemv(const DeviceMatrix& w, int64_t n_rows) const {
  return enabled_ && n_rows == 1 && gemv_wide_supports(w);
}

bool FusedKernels::rmsnorm_gemv(int64_t dim, std::span<const DeviceMatrix* const> weights, int64_t n_rows) const {
  if (!enabled_ || n_rows != 1 || weights.empty() || weights.size() > static_cast<size_t>(kMaxFusedGemvOuts)) {
    return false;
  }
  if (!fused_gemv_supports(dim) || weights[0] == nullptr) return false;
  const DType dtype = weights[0]->dtype;
  for (const DeviceMatrix* w : weights) {
    if (w == nullptr || w->cols != dim || w->dtype != dtype) return false;
  }
  return true;
}

}  // namespace lio::cuda
