// random_inputs.h — the random test inputs every kernel test draws (fixed seeds, never zeros).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace lio::testing {

/// n floats uniform in [lo, hi), from a Mersenne Twister seeded with `seed` (same seed, same values).
inline std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

}  // namespace lio::testing
