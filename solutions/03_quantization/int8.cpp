// Chapter 03, Task 6 — reference solution: W8A8's per-token INT8 activations and the integer
// dot product with its two scales. Declarations and contracts: common/model/include/lio/quantization.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "lio/error.h"
#include "lio/quantization.h"

namespace lio {

float quantize_row_int8(std::span<const float> x, std::span<int8_t> q) {
  if (q.size() != x.size()) {
    throw InvalidArgument("quantize_row_int8: " + std::to_string(x.size()) + " values but room for " +
                          std::to_string(q.size()) + " codes");
  }
  float amax = 0.0f;
  for (float v : x) {
    if (!std::isfinite(v)) throw InvalidArgument("quantize_row_int8: a non-finite activation");
    amax = std::max(amax, std::fabs(v));
  }
  // s = max_i |x[i]| / 127;  q[i] = round(x[i] / s), halves away from zero.
  const float s = amax / 127.0f;
  for (size_t i = 0; i < x.size(); ++i) q[i] = s > 0.0f ? static_cast<int8_t>(std::round(x[i] / s)) : int8_t{0};
  return s;
}

float int8_dot(std::span<const int8_t> qa, float scale_a, std::span<const int8_t> qb, float scale_b) {
  if (qa.size() != qb.size()) {
    throw InvalidArgument("int8_dot: lengths " + std::to_string(qa.size()) + " and " + std::to_string(qb.size()) +
                          " differ");
  }
  if (static_cast<int64_t>(qa.size()) > kInt8DotMaxLen) {
    throw InvalidArgument("int8_dot: length " + std::to_string(qa.size()) + " could overflow the int32 sum (max " +
                          std::to_string(kInt8DotMaxLen) + ")");
  }
  int32_t acc = 0;
  for (size_t i = 0; i < qa.size(); ++i) acc += static_cast<int32_t>(qa[i]) * static_cast<int32_t>(qb[i]);
  return static_cast<float>(acc) * scale_a * scale_b;  // float(sum) * scale_a * scale_b
}

}  // namespace lio
