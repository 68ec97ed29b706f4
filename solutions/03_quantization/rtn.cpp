// Chapter 03, Tasks 2-3 — reference solution: round-to-nearest of one 32-weight block into
// llama.cpp's Q8_0, Q4_0 (symmetric) and Q4_1 (asymmetric), bit for bit as ggml's
// quantize_row_*_ref. Declarations and contracts: common/model/include/lio/quantization.h.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "lio/quantization.h"

namespace lio {

BlockQ8_0 quantize_block_q8_0(std::span<const float, kQuantBlockElems> x) {
  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ8_0 b{};
  b.d = f32_to_f16(d);
  for (int64_t i = 0; i < kQuantBlockElems; ++i) b.qs[i] = static_cast<int8_t>(std::roundf(x[i] * id));
  return b;
}

BlockQ4_0 quantize_block_q4_0(std::span<const float, kQuantBlockElems> x) {
  float amax = 0.0f, m = 0.0f;  // m: the value of largest magnitude, sign kept
  for (float v : x) {
    if (amax < std::fabs(v)) {
      amax = std::fabs(v);
      m = v;
    }
  }
  const float d = m / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ4_0 b{};
  b.d = f32_to_f16(d);
  constexpr int64_t half = kQuantBlockElems / 2;
  for (int64_t i = 0; i < half; ++i) {
    const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[i] * id + 8.5f)));
    const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[i + half] * id + 8.5f)));
    b.qs[i] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
  return b;
}

BlockQ4_1 quantize_block_q4_1(std::span<const float, kQuantBlockElems> x) {
  float lo = FLT_MAX, hi = -FLT_MAX;
  for (float v : x) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  const float d = (hi - lo) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ4_1 b{};
  b.d = f32_to_f16(d);
  b.m = f32_to_f16(lo);
  constexpr int64_t half = kQuantBlockElems / 2;
  for (int64_t i = 0; i < half; ++i) {
    const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[i] - lo) * id + 0.5f)));
    const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>((x[i + half] - lo) * id + 0.5f)));
    b.qs[i] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
  return b;
}

}  // namespace lio
