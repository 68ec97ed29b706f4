// Chapter 03, Task 1 — YOUR implementation: memory for a parameter count at a bit width.
// Declarations and contracts: common/model/include/lio/quantization.h.
// Grade: ctest -R ch03_task_1
#include <cmath>
#include <string>

#include "lio/error.h"
#include "lio/quantization.h"

namespace lio {

int64_t weight_bytes(int64_t n_params, double bits_per_weight) {
  // TODO(Task 1): the bytes n_params weights take at bits_per_weight bits each, rounded up to a
  //   whole byte (lio/quantization.h; lesson: docs/03_quantization.md, section 1 and Task 1).
  //   Must hold: 7 x 10^9 weights at 4 bits -> 3,500,000,000; 3 weights at 4 bits -> 2.
  //   Throw InvalidArgument unless n_params >= 0 and 0 < bits_per_weight <= 64.
  (void)n_params, (void)bits_per_weight;
  throw NotImplemented("Task 1 (exercises/03_quantization/memory.cpp): weight_bytes — "
                       "lesson docs/03_quantization.md, section 1 and Task 1");
}

bool model_fits(int64_t n_params, double bits_per_weight, int64_t overhead_bytes, int64_t budget_bytes) {
  // TODO(Task 1): whether the weights and the overhead fit in the budget together
  //   (lio/quantization.h). Throw InvalidArgument for a negative overhead or budget.
  (void)n_params, (void)bits_per_weight, (void)overhead_bytes, (void)budget_bytes;
  throw NotImplemented("Task 1 (exercises/03_quantization/memory.cpp): model_fits — "
                       "lesson docs/03_quantization.md, Task 1");
}

}  // namespace lio
