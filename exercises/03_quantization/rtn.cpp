// Chapter 03, Tasks 2-3 — YOUR implementation: round-to-nearest of one 32-weight block into
// llama.cpp's Q8_0, Q4_0 (symmetric) and Q4_1 (asymmetric). `lio quantize` runs every block
// of the model through these. Declarations and contracts: common/model/include/lio/quantization.h.
// Grade: ctest -R ch03_task_K (K = 2, 3)
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "lio/error.h"
#include "lio/quantization.h"

namespace lio {

// ---- Task 2 -----------------------------------------------------------------------------------

BlockQ8_0 quantize_block_q8_0(std::span<const float, kQuantBlockElems> x) {
  // TODO(Task 2): d = max|x| / 127 (as f16 via f32_to_f16), q[i] = roundf(x[i] / d); multiply
  //   by 1/d computed once (0 when d is 0), as ggml does, or your bits will differ.
  (void)x;
  throw NotImplemented("Task 2 (exercises/03_quantization/rtn.cpp): quantize_block_q8_0 — "
                       "one scale per 32 weights, int8 in [-127, 127]");
}

BlockQ4_0 quantize_block_q4_0(std::span<const float, kQuantBlockElems> x) {
  // TODO(Task 2): m = the x of largest magnitude (sign kept), d = m / -8, q = min(15,
  //   (int8_t)(x * (1/d) + 8.5f)); pack element i and i + 16 into qs[i] (low, high nibble).
  (void)x;
  throw NotImplemented("Task 2 (exercises/03_quantization/rtn.cpp): quantize_block_q4_0 — "
                       "symmetric 4 bits: 16 levels around zero");
}

// ---- Task 3 -----------------------------------------------------------------------------------

BlockQ4_1 quantize_block_q4_1(std::span<const float, kQuantBlockElems> x) {
  // TODO(Task 3): d = (max - min) / 15, m = min (both f16), q = min(15, (int8_t)((x - min) *
  //   (1/d) + 0.5f)); nibbles as in Q4_0.
  (void)x;
  throw NotImplemented("Task 3 (exercises/03_quantization/rtn.cpp): quantize_block_q4_1 — "
                       "asymmetric 4 bits: a scale and a minimum per block");
}

}  // namespace lio
