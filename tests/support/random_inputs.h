// random_inputs.h — the random test inputs every kernel test draws (fixed seeds, never zeros).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "lio/dtype.h"

namespace lio::testing {

/// n floats uniform in [lo, hi), from a Mersenne Twister seeded with `seed` (same seed, same values).
inline std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

/// n token ids drawn uniformly from [lo, hi] with `seed` (a tiny model's prompts).
inline std::vector<int32_t> random_token_ids(size_t n, uint32_t seed, int32_t lo = 3, int32_t hi = 250) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(lo, hi);
  std::vector<int32_t> out(n);
  for (int32_t& t : out) t = id(rng);
  return out;
}

/// A (rows, cols) matrix of random blocks of a dtype LIO reads but cannot encode (Q5_0, Q5_1,
/// Q4_K, Q6_K), or of LIO's packed Q3_0 / Q3_1 (every code pattern, not only those an encoder
/// makes; cols a multiple of the block): random code, scale and minimum bytes under small fixed
/// f16 scales (Q5_*: d = 1e-2, m = -0.15; Q4_K: d = 2e-4, dmin = 1e-4; Q6_K: d = 2e-5; Q3_*:
/// d = 5e-2, m = -0.2), so values stay in about [-0.3, 0.3]. Tests read them back through lio::dequantize_row.
inline std::vector<std::byte> random_read_only_blocks(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> raw(static_cast<size_t>(rows * dtype_row_bytes(t, cols)));
  for (std::byte& b : raw) b = static_cast<std::byte>(rng() & 255);
  const int64_t block_bytes = dtype_info(t).block_bytes;
  // Where each block's f16 fields sit (ggml-common.h) and the values they get.
  auto set_f16 = [&](std::byte* blk, size_t offset, float value) {
    const uint16_t h = f32_to_f16(value);
    std::memcpy(blk + offset, &h, 2);
  };
  for (int64_t i = 0; i < static_cast<int64_t>(raw.size()) / block_bytes; ++i) {
    std::byte* blk = raw.data() + i * block_bytes;
    switch (t) {
      case DType::Q5_0: set_f16(blk, offsetof(BlockQ5_0, d), 1e-2f); break;
      case DType::Q5_1:
        set_f16(blk, offsetof(BlockQ5_1, d), 1e-2f);
        set_f16(blk, offsetof(BlockQ5_1, m), -0.15f);
        break;
      case DType::Q4_K:
        set_f16(blk, offsetof(BlockQ4_K, d), 2e-4f);
        set_f16(blk, offsetof(BlockQ4_K, dmin), 1e-4f);
        break;
      case DType::Q6_K: set_f16(blk, offsetof(BlockQ6_K, d), 2e-5f); break;
      case DType::Q3_0: set_f16(blk, offsetof(BlockQ3_0, d), 5e-2f); break;
      case DType::Q3_1:
        set_f16(blk, offsetof(BlockQ3_1, d), 5e-2f);
        set_f16(blk, offsetof(BlockQ3_1, m), -0.2f);
        break;
      default: break;  // other dtypes have an encoder: use lio::quantize_row
    }
  }
  return raw;
}

}  // namespace lio::testing
