// Chapter 03, Task 1 — reference solution: memory for a parameter count at a bit width.
// Declarations and contracts: common/model/include/lio/quantization.h.
#include <cmath>
#include <string>

#include "lio/error.h"
#include "lio/quantization.h"

namespace lio {

int64_t weight_bytes(int64_t n_params, double bits_per_weight) {
  if (n_params < 0 || !(bits_per_weight > 0.0 && bits_per_weight <= 64.0)) {
    throw InvalidArgument("weight_bytes: need n_params >= 0 and 0 < bits_per_weight <= 64, got " +
                          std::to_string(n_params) + " and " + std::to_string(bits_per_weight));
  }
  // parameters x bits / 8, rounded up: ceil(n_params * bits_per_weight / 8).
  return static_cast<int64_t>(std::ceil(static_cast<double>(n_params) * bits_per_weight / 8.0));
}

bool model_fits(int64_t n_params, double bits_per_weight, int64_t overhead_bytes, int64_t budget_bytes) {
  if (overhead_bytes < 0 || budget_bytes < 0) {
    throw InvalidArgument("model_fits: overhead and budget must be >= 0 bytes, got " + std::to_string(overhead_bytes) +
                          " and " + std::to_string(budget_bytes));
  }
  return weight_bytes(n_params, bits_per_weight) + overhead_bytes <= budget_bytes;
}

}  // namespace lio
