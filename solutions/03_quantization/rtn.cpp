// Chapter 03, Tasks 2-3 — reference solution: round-to-nearest of one 32-weight block into
// llama.cpp's Q8_0, Q4_0 (symmetric) and Q4_1 (asymmetric), bit for bit as ggml's
// quantize_row_*_ref (ggml-quants.c). Declarations and contracts:
// common/model/include/lio/quantization.h. Lesson: docs/03_quantization.md, section 2.
//
// The engine's base has its own copy of these loops (lio::quantize_block in
// kernels/base/src/dtype.cpp: the GGUF writers and the loader's --dtype conversion need them
// below every chapter); the grading tests compare this file's bytes, and yours, with it, so the
// two cannot drift apart. `lio quantize` writes its Q8_0 / Q4_0 / Q4_1 files through these
// functions (common/tools/src/quantize.cpp), the learner's when chapter 03 runs on exercises.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "lio/dtype.h"
#include "lio/quantization.h"

namespace lio {

// ---- Task 2 -----------------------------------------------------------------------------------

BlockQ8_0 quantize_block_q8_0(std::span<const float, kQuantBlockElems> x) {
  float amax = 0.0f;  // the scale maps the largest magnitude to 127
  for (const float v : x) amax = std::max(amax, std::fabs(v));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;  // multiply by 1/d, as ggml does (an all-zero block: d = 0)
  BlockQ8_0 b{};
  b.d = f32_to_f16(d);
  for (size_t j = 0; j < x.size(); ++j) b.qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
  return b;
}

BlockQ4_0 quantize_block_q4_0(std::span<const float, kQuantBlockElems> x) {
  // The element of largest magnitude, its sign kept, becomes code 0 (value -8 d): the 16 levels
  // -8 .. 7 are asymmetric, and this puts the longer side where the extreme weight is.
  float amax = 0.0f, max = 0.0f;
  for (const float v : x) {
    if (amax < std::fabs(v)) {
      amax = std::fabs(v);
      max = v;
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ4_0 b{};
  b.d = f32_to_f16(d);
  constexpr size_t half = kQuantBlockElems / 2;
  for (size_t j = 0; j < half; ++j) {  // element j in the low nibble, element j + 16 in the high
    const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));  // + 8.5, truncated: round
    const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + half] * id + 8.5f)));
    b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
  return b;
}

// ---- Task 3 -----------------------------------------------------------------------------------

BlockQ4_1 quantize_block_q4_1(std::span<const float, kQuantBlockElems> x) {
  float min = FLT_MAX, max = -FLT_MAX;  // the 16 levels span [min, max]: x = d q + m
  for (const float v : x) {
    min = std::min(min, v);
    max = std::max(max, v);
  }
  const float d = (max - min) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ4_1 b{};
  b.d = f32_to_f16(d);
  b.m = f32_to_f16(min);
  constexpr size_t half = kQuantBlockElems / 2;
  for (size_t j = 0; j < half; ++j) {
    const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
    const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j + half] - min) * id + 0.5f)));
    b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
  return b;
}

}  // namespace lio
