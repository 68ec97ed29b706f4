// Chapter 03, Task 5 — YOUR implementation: AWQ's scale search. `lio quantize --method awq`
// picks every layer's scales through it. Declaration and contract:
// common/model/include/lio/quantization.h.
// Grade: ctest -R ch03_task_5
#include <algorithm>
#include <cmath>
#include <limits>

#include "lio/error.h"
#include "lio/quantization.h"

namespace lio {

AwqSearch awq_search_scales(std::span<const float> mean_abs_x, int n_grid,
                            const std::function<double(std::span<const float> scales)>& loss) {
  // TODO(Task 5): the grid search of lio/quantization.h: the n_grid exponents it lists, each
  //   one's scales as section 3 of docs/03_quantization.md derives them, scored by `loss`;
  //   return the winner (the first on a tie) with its loss and scales.
  //   Must hold: alpha 0 is plain RTN, so the result never loses to RTN on `loss`; every
  //   candidate passed to `loss` is normalized. Lesson: docs/03_quantization.md, section 3.
  //   Throw InvalidArgument for n_grid < 1 or no channels.
  (void)mean_abs_x;
  (void)n_grid;
  (void)loss;
  throw NotImplemented("Task 5 (exercises/03_quantization/awq.cpp): awq_search_scales — "
                       "lesson docs/03_quantization.md, section 3 (AWQ) and Task 5");
}

}  // namespace lio
