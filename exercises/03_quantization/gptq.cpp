// Chapter 03, Task 4 — YOUR implementation: GPTQ's column loop. `lio quantize --method gptq`
// quantizes every matrix of the model through it. Declaration and contract:
// common/model/include/lio/quantization.h.
// Grade: ctest -R ch03_task_4
#include <algorithm>
#include <string>
#include <vector>

#include "lio/error.h"
#include "lio/quantization.h"

namespace lio {

void gptq_quantize_columns(std::span<float> wt, int64_t rows, std::span<const float> u,
                           const RoundColumn& round_column) {
  // TODO(Task 4): GPTQ's column loop (Frantar et al. 2023, Algorithm 1) over wt = W^T, in place:
  //   each column rounded by round_column in order, its rounding error moved onto the columns
  //   not yet quantized through the Cholesky factor u. Section 3 of docs/03_quantization.md
  //   derives the update from the OBS solution; lio/quantization.h states the shapes and what
  //   the rows of wt must hold when round_column(j, ...) is called.
  //   Must hold: the first column's update is the OBS closed form; the layer's output error
  //   ends below round-to-nearest's. Lazy batches of 128 columns are allowed (same result).
  //   Throw InvalidArgument when wt.size() != cols * rows or u.size() != cols * cols.
  (void)wt;
  (void)rows;
  (void)u;
  (void)round_column;
  throw NotImplemented("Task 4 (exercises/03_quantization/gptq.cpp): gptq_quantize_columns — "
                       "lesson docs/03_quantization.md, section 3 (GPTQ) and Task 4");
}

}  // namespace lio
