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
  // TODO(Task 2): llama.cpp's Q8_0 block of x: one f16 scale d and 32 int8 codes in
  //   [-127, 127] with x[i] ~ d * qs[i], the largest |x| exactly representable. The test compares
  //   your bytes with ggml's quantize_row_q8_0_ref on 200 random blocks, so round as ggml does
  //   (lesson: docs/03_quantization.md, section 2 and "Task 2"; an all-zero block is d = 0).
  (void)x;
  throw NotImplemented("Task 2 (exercises/03_quantization/rtn.cpp): quantize_block_q8_0 — "
                       "lesson docs/03_quantization.md, section 2 and Task 2");
}

BlockQ4_0 quantize_block_q4_0(std::span<const float, kQuantBlockElems> x) {
  // TODO(Task 2): llama.cpp's Q4_0 block of x: one f16 scale d and 32 unsigned 4-bit codes with
  //   x[i] ~ d * (q[i] - 8), packed two to a byte as ggml packs them (element i in the low
  //   nibble of qs[i], element i + 16 in the high one). Bit-compared with ggml's
  //   quantize_row_q4_0_ref: which x sets the scale, and how ggml rounds, are in the lesson
  //   (docs/03_quantization.md, section 2 and "Task 2").
  (void)x;
  throw NotImplemented("Task 2 (exercises/03_quantization/rtn.cpp): quantize_block_q4_0 — "
                       "lesson docs/03_quantization.md, section 2 and Task 2");
}

// ---- Task 3 -----------------------------------------------------------------------------------

BlockQ4_1 quantize_block_q4_1(std::span<const float, kQuantBlockElems> x) {
  // TODO(Task 3): llama.cpp's Q4_1 block of x: an f16 scale d, an f16 offset m and 32 4-bit
  //   codes with x[i] ~ d * q[i] + m, packed as in Q4_0; the block's smallest and largest x are
  //   both on the grid. Bit-compared with ggml's quantize_row_q4_1_ref (lesson:
  //   docs/03_quantization.md, section 2 and "Task 3").
  (void)x;
  throw NotImplemented("Task 3 (exercises/03_quantization/rtn.cpp): quantize_block_q4_1 — "
                       "lesson docs/03_quantization.md, section 2 and Task 3");
}

}  // namespace lio
