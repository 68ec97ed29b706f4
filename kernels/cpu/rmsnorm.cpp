// rmsnorm.cpp — RMSNorm on the CPU (Zhang & Sennrich 2019, "Root Mean Square Layer
// Normalization", eq. 4): out[r][j] = x[r][j] / sqrt(mean_j(x[r][j]^2) + eps) * weight[j].
//
// Numerics: the sum of squares of a row is accumulated in double (as ggml's
// ggml_compute_forward_rms_norm_f32 does with ggml_float), so the mean is exact to ~1e-16
// relative for any dim we meet; the scale 1/sqrt(mean + eps) is then rounded to float once
// and each output is two float multiplies, (x * scale) * weight, the order Hugging Face's
// LlamaRMSNorm and ggml (rms_norm then mul) use. The result is within ~2 ulp of the exact value.
#include <cmath>
#include <string>

#include "cpu_ops.h"
#include "lio/error.h"

namespace lio::cpu {

namespace {

// Below this many elements, spawning the OpenMP team costs more than the loop
// (a single 4096-wide decode row is ~1 us of work).
constexpr int64_t kParallelMinElems = int64_t{1} << 15;

}  // namespace

void rmsnorm(const float* x, const float* weight, float* out, int64_t n_rows, int64_t dim,
             float eps) {
  if (n_rows < 0 || dim <= 0) {
    throw InvalidArgument("cpu::rmsnorm: need n_rows >= 0 and dim > 0, got n_rows=" +
                          std::to_string(n_rows) + " dim=" + std::to_string(dim));
  }
  if (!(eps >= 0.0f) || !std::isfinite(eps)) {
    throw InvalidArgument("cpu::rmsnorm: eps must be finite and >= 0, got " + std::to_string(eps));
  }
  if (n_rows == 0) return;
  if (x == nullptr || weight == nullptr || out == nullptr) {
    throw InvalidArgument("cpu::rmsnorm: null pointer (x, weight or out)");
  }

  // Rows are independent; x and out may alias because row r's output is written only after
  // its whole input has been read for the sum, and each element is read before it is written.
#pragma omp parallel for schedule(static) if (n_rows > 1 && n_rows * dim >= kParallelMinElems)
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * dim;
    float* outr = out + r * dim;
    double sum_sq = 0.0;
    for (int64_t j = 0; j < dim; ++j) sum_sq += static_cast<double>(xr[j]) * xr[j];
    const float scale =
        static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(dim) + eps));
    for (int64_t j = 0; j < dim; ++j) outr[j] = (xr[j] * scale) * weight[j];
  }
}

}  // namespace lio::cpu
