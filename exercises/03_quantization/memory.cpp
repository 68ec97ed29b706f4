// Chapter 03, Task 1 — YOUR implementation: memory for a parameter count at a bit width.
// Declarations and contracts: common/model/include/lio/quantization.h.
// Grade: ctest -R ch03_task_1
#include <cmath>
#include <string>

#include "lio/error.h"
#include "lio/quantization.h"

namespace lio {

int64_t weight_bytes(int64_t n_params, double bits_per_weight) {
  // TODO(Task 1): throw InvalidArgument unless n_params >= 0 and 0 < bits_per_weight <= 64;
  //   return the bytes n_params weights take at bits_per_weight bits each, rounded up.
  (void)n_params, (void)bits_per_weight;
  throw NotImplemented("Task 1 (exercises/03_quantization/memory.cpp): weight_bytes — "
                       "parameters x bits / 8, rounded up");
}

bool model_fits(int64_t n_params, double bits_per_weight, int64_t overhead_bytes, int64_t budget_bytes) {
  // TODO(Task 1): throw InvalidArgument for a negative overhead or budget; the weights plus the
  //   overhead must not exceed the budget.
  (void)n_params, (void)bits_per_weight, (void)overhead_bytes, (void)budget_bytes;
  throw NotImplemented("Task 1 (exercises/03_quantization/memory.cpp): model_fits — "
                       "weights + overhead <= budget?");
}

}  // namespace lio
