// Shared by chapter 03's Task 2 and 3 grading tests: random blocks and a byte comparison
// against lio::quantize_row, the engine's ggml-rule quantizer. The real-model test
// Quantize.RealF32CopyRequantizedToQ4_1IsTheShippedFile ties those rules to a file llama.cpp
// wrote.
#pragma once

#include <array>
#include <cstring>
#include <random>

#include "lio/dtype.h"

namespace ch03 {

using Block = std::array<float, lio::kQuantBlockElems>;

/// A block of N(0, scale) weights with one outlier of `outlier` at index `at` (none if at < 0).
inline Block random_block(uint32_t seed, float scale, int at = -1, float outlier = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  Block b{};
  for (float& v : b) v = dist(rng);
  if (at >= 0) b[static_cast<size_t>(at)] = outlier;
  return b;
}

/// The bytes lio::quantize_row writes for `x` in `t`.
template <typename B>
B reference(lio::DType t, const Block& x) {
  B b{};
  lio::quantize_row(t, x.data(), &b, lio::kQuantBlockElems);
  return b;
}

template <typename B>
bool same_bytes(const B& a, const B& b) {
  return std::memcmp(&a, &b, sizeof(B)) == 0;
}

}  // namespace ch03
