// quant_grid.cpp — quantization grids and their llama.cpp containers (see lio/quant_grid.h).
#include "lio/quant_grid.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "lio/error.h"

namespace lio {

int QuantGrid::qmin() const {
  if (bits == 8) return -127;
  return asymmetric ? 0 : -(1 << (bits - 1));
}

int QuantGrid::qmax() const {
  if (bits == 8) return 127;
  return asymmetric ? (1 << bits) - 1 : (1 << (bits - 1)) - 1;
}

std::string QuantGrid::name() const {
  const std::string group = group_size == kPerChannel ? " per-channel" : " g" + std::to_string(group_size);
  return "int" + std::to_string(bits) + group + (asymmetric ? " asym" : " sym");
}

void check_grid(const QuantGrid& g) {
  if (g.bits != 8 && g.bits != 4 && g.bits != 3) {
    throw UnsupportedError("--bits " + std::to_string(g.bits) + ": want 8, 4 or 3");
  }
  if (g.group_size != 32 && g.group_size != 64 && g.group_size != 128 && g.group_size != kPerChannel) {
    throw UnsupportedError("--group-size " + std::to_string(g.group_size) +
                           ": want 32, 64, 128 (multiples of llama.cpp's 32-wide blocks) or channel");
  }
  if (g.bits == 8 && g.asymmetric) {
    throw UnsupportedError("--asymmetric: 8 bits are stored in Q8_0, which is symmetric");
  }
}

DType grid_container(const QuantGrid& g) {
  check_grid(g);
  if (g.bits == 8) return DType::Q8_0;
  if (g.bits == 3 && !g.llama_blocks) return g.asymmetric ? DType::Q3_1 : DType::Q3_0;
  return g.asymmetric ? DType::Q4_1 : DType::Q4_0;
}

namespace {
float to_f16_value(float v) { return f16_to_f32(f32_to_f16(v)); }
}  // namespace

GroupParams grid_params(const QuantGrid& g, std::span<const float> values) {
  GroupParams p;
  if (values.empty()) return p;
  if (g.asymmetric) {
    const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
    p.min = to_f16_value(*lo);
    p.scale = to_f16_value((*hi - *lo) / static_cast<float>(g.qmax()));
    return p;
  }
  float amax = 0.0f, m = 0.0f;
  for (float v : values) {
    if (std::fabs(v) > amax) {
      amax = std::fabs(v);
      m = v;
    }
  }
  p.scale = to_f16_value(g.bits == 8 ? amax / 127.0f : m / static_cast<float>(g.qmin()));
  return p;
}

int grid_code(const QuantGrid& g, const GroupParams& p, float w) {
  if (p.scale == 0.0f) return 0;  // symmetric: 0; asymmetric: min
  const float q = std::nearbyint((w - p.min) / p.scale);
  return static_cast<int>(std::clamp(q, static_cast<float>(g.qmin()), static_cast<float>(g.qmax())));
}

QuantizedMatrix::QuantizedMatrix(const QuantGrid& g, int64_t r, int64_t c) : grid(g), rows(r), cols(c) {
  check_grid(g);
  if (rows < 0 || cols <= 0 || cols % kQuantBlockElems != 0) {
    throw InvalidArgument("quantize: a (" + std::to_string(rows) + ", " + std::to_string(cols) +
                          ") matrix does not split into blocks of 32");
  }
  params.resize(static_cast<size_t>(rows * groups()));
  codes.resize(static_cast<size_t>(rows * cols));
}

std::vector<float> QuantizedMatrix::dequantized() const {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(r * cols + c)] = value(r, c);
  return out;
}

void QuantizedMatrix::encode_row(int64_t r, std::byte* out) const {
  const DType t = grid_container(grid);
  const int8_t* q = codes.data() + r * cols;
  constexpr int64_t B = kQuantBlockElems, half = B / 2;
  for (int64_t b = 0; b < cols / B; ++b) {
    const GroupParams& p = group(r, b * B);
    const int8_t* qb = q + b * B;
    if (t == DType::Q8_0) {
      BlockQ8_0 blk{};
      blk.d = f32_to_f16(p.scale);
      std::memcpy(blk.qs, qb, B);
      std::memcpy(out + b * static_cast<int64_t>(sizeof blk), &blk, sizeof blk);
    } else if (t == DType::Q4_0) {  // nibble = code + 8, value = d * (nibble - 8)
      BlockQ4_0 blk{};
      blk.d = f32_to_f16(p.scale);
      for (int64_t i = 0; i < half; ++i) blk.qs[i] = static_cast<uint8_t>((qb[i] + 8) | ((qb[i + half] + 8) << 4));
      std::memcpy(out + b * static_cast<int64_t>(sizeof blk), &blk, sizeof blk);
    } else if (t == DType::Q3_0 || t == DType::Q3_1) {  // Q3_0: stored code + 4; Q3_1: code
      int stored[B];
      for (int64_t i = 0; i < B; ++i) stored[i] = qb[i] + (t == DType::Q3_0 ? 4 : 0);
      write_q3_block(t, stored, p.scale, p.min, out + b * dtype_info(t).block_bytes);
    } else {  // Q4_1: nibble = code, value = d * nibble + m
      BlockQ4_1 blk{};
      blk.d = f32_to_f16(p.scale);
      blk.m = f32_to_f16(p.min);
      for (int64_t i = 0; i < half; ++i) blk.qs[i] = static_cast<uint8_t>(qb[i] | (qb[i + half] << 4));
      std::memcpy(out + b * static_cast<int64_t>(sizeof blk), &blk, sizeof blk);
    }
  }
}

QuantizedMatrix rtn_quantize(const QuantGrid& g, const float* w, int64_t rows, int64_t cols) {
  QuantizedMatrix m(g, rows, cols);
  const int64_t G = g.group_cols(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      if (!std::isfinite(row[c])) {
        throw InvalidArgument("quantize: non-finite weight at row " + std::to_string(r) + ", column " +
                              std::to_string(c));
      }
    }
    for (int64_t c0 = 0; c0 < cols; c0 += G) {
      const int64_t c1 = std::min(cols, c0 + G);
      GroupParams& p = m.group(r, c0);
      p = grid_params(g, std::span<const float>(row + c0, static_cast<size_t>(c1 - c0)));
      for (int64_t c = c0; c < c1; ++c) m.codes[static_cast<size_t>(r * cols + c)] = static_cast<int8_t>(grid_code(g, p, row[c]));
    }
  }
  return m;
}

}  // namespace lio
