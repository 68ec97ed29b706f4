// Chapter 03, Task 6 — YOUR implementation: W8A8's per-token INT8 activations and the
// integer dot product with its scales. Under `--activations int8-token` the CPU backend rounds
// the input of every matmul through quantize_row_int8. Declarations and contracts:
// common/model/include/lio/quantization.h.
// Grade: ctest -R ch03_task_6
#include <cmath>
#include <cstdint>

#include "lio/error.h"
#include "lio/quantization.h"

namespace lio {

float quantize_row_int8(std::span<const float> x, std::span<int8_t> q) {
  // TODO(Task 6): one token's symmetric INT8 codes and their one scale, as lio/quantization.h
  //   defines them (docs/03_quantization.md, section 4). Must hold: the largest |x[i]| maps to
  //   +-127 and x[i] ~ s * q[i]; a row of zeros does not divide by zero.
  //   Throw InvalidArgument when the sizes differ or an x[i] is not finite.
  (void)x;
  (void)q;
  throw NotImplemented("Task 6 (exercises/03_quantization/int8.cpp): quantize_row_int8 — "
                       "lesson docs/03_quantization.md, section 4 and Task 6");
}

float int8_dot(std::span<const int8_t> qa, float scale_a, std::span<const int8_t> qb, float scale_b) {
  // TODO(Task 6): a . b for a ~ scale_a * qa and b ~ scale_b * qb, with the products summed
  //   exactly in integers, as lio/quantization.h states (what an INT8 dot instruction does).
  //   Throw InvalidArgument when the lengths differ or exceed kInt8DotMaxLen.
  (void)qa;
  (void)scale_a;
  (void)qb;
  (void)scale_b;
  throw NotImplemented("Task 6 (exercises/03_quantization/int8.cpp): int8_dot — "
                       "lesson docs/03_quantization.md, section 4 and Task 6");
}

}  // namespace lio
