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
  // TODO(Task 4): cols = wt.size() / rows (check the sizes). For j = 0 .. cols - 1:
  //   q = a copy of row j of wt; round_column(j, q);
  //   err[r] = (wt[j][r] - q[r]) / u[j][j];  row j of wt = q;
  //   for k > j: wt[k][r] -= u[j][k] * err[r].
  //   (Optional: the paper's lazy batches — apply updates past a block of 128 columns once
  //   per block. Same result, fewer passes over memory.)
  (void)wt;
  (void)rows;
  (void)u;
  (void)round_column;
  throw NotImplemented("Task 4 (exercises/03_quantization/gptq.cpp): gptq_quantize_columns — "
                       "round a column, spread its error over the columns after it");
}

}  // namespace lio
