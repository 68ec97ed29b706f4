// quant_grid.h — chapter 03: the quantization grids GPTQ and AWQ round onto, and how a matrix
// rounded onto one is stored in llama.cpp's block types.
//
// A grid is a bit width (8, 4 or 3), a group size (32, 64 or 128 consecutive weights of a row
// sharing one scale, or the whole row: per-output-channel, LLM.int8()'s and SmoothQuant's
// weight granularity) and a symmetry: symmetric codes q in [qmin, qmax] stand for scale * q;
// asymmetric codes q in [0, 2^bits - 1] for scale * q + min. Scale and min are kept as f16
// values, as llama.cpp stores them, so the value a code stands for here is the value llama.cpp
// dequantizes. Storage: 8 and 4 bits fit a llama.cpp 32-wide block type — Q8_0, Q4_0
// (symmetric) or Q4_1 (asymmetric); a group of 64 or 128 repeats its scale in each of its
// 32-wide blocks (a per-channel grid repeats the row's). llama.cpp has no 32-wide 3-bit type
// (its Q3_K needs rows of whole 256-element super-blocks), so 3 bits go to LIO's packed Q3_0 /
// Q3_1 (3.5 / 4 bits per weight, lio/dtype.h), which llama.cpp cannot read, or, with
// QuantGrid::llama_blocks, to Q4_0 / Q4_1 using 8 of their 16 levels (llama.cpp runs the file,
// at 4-bit memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "lio/dtype.h"

namespace lio {

/// group_size of a per-output-channel grid: one scale (and min) per row of W.
inline constexpr int64_t kPerChannel = 0;

/// A quantization grid (see the file comment).
struct QuantGrid {
  int bits = 4;             ///< 8, 4 or 3
  int64_t group_size = 32;  ///< weights per scale along a row: 32, 64, 128 or kPerChannel
  bool asymmetric = false;  ///< codes 0 .. 2^bits - 1 with a per-group minimum (4 and 3 bits)
  bool llama_blocks = false;  ///< 3 bits: store in Q4_0 / Q4_1 (llama.cpp reads it) not Q3_0 / Q3_1

  /// Smallest code: -127 (8 bits, as Q8_0), -2^(bits-1) symmetric, 0 asymmetric.
  int qmin() const;
  /// Largest code: 127 (8 bits), 2^(bits-1) - 1 symmetric, 2^bits - 1 asymmetric.
  int qmax() const;
  /// "int4 g128 sym"-style name ("int8 per-channel sym" for kPerChannel).
  std::string name() const;
  /// Columns one group spans in a row of `cols`: group_size, or cols for kPerChannel.
  int64_t group_cols(int64_t cols) const { return group_size == kPerChannel ? cols : group_size; }
};

/// Throws UnsupportedError for bits other than 8, 4, 3, a group size other than 32, 64, 128 or
/// kPerChannel, or an asymmetric 8-bit grid (Q8_0 is symmetric).
void check_grid(const QuantGrid& g);

/// The block type a grid is stored in: Q8_0 (8 bits), Q4_0 / Q4_1 (4 bits, or 3 bits with
/// llama_blocks), Q3_0 / Q3_1 (3 bits; symmetric / asymmetric). Throws as check_grid.
DType grid_container(const QuantGrid& g);

/// One group's parameters, both exactly representable in f16.
struct GroupParams {
  float scale = 0.0f;  ///< step between codes (may be negative: Q4_0's rule)
  float min = 0.0f;    ///< asymmetric: the value code 0 stands for; symmetric: 0
};

/// The parameters RTN picks for the weights of one group (ggml's rules generalized):
/// 8 bits: scale = max|w| / 127; 4 / 3 bits symmetric: scale = m / qmin with m the weight of
/// largest magnitude, sign kept (so m is exactly representable); asymmetric: scale = (max -
/// min) / (2^bits - 1), min = min(w). Both rounded to f16. `values` must be finite.
GroupParams grid_params(const QuantGrid& g, std::span<const float> values);

/// The code nearest w on the group's grid: clamp(round((w - min) / scale), qmin, qmax); 0 when
/// scale is 0 (symmetric; asymmetric also 0, standing for min).
int grid_code(const QuantGrid& g, const GroupParams& p, float w);

/// The value code q stands for: scale * q + min (llama.cpp's dequantization, in f32).
inline float grid_value(const GroupParams& p, int q) { return p.scale * static_cast<float>(q) + p.min; }

/// A (rows, cols) matrix rounded onto a grid: one GroupParams per (row, group), one code per
/// weight. Groups are consecutive columns c0 .. c0 + group_size - 1; when cols is not a
/// multiple of the group size the last group is shorter (SmolLM2's d_model of 576 is 4.5
/// groups of 128). cols must be a multiple of 32 (the container's block).
struct QuantizedMatrix {
  QuantGrid grid;                    ///< the grid
  int64_t rows = 0;                  ///< rows of W (output channels)
  int64_t cols = 0;                  ///< columns of W (input channels)
  std::vector<GroupParams> params;   ///< (rows, groups())
  std::vector<int8_t> codes;         ///< (rows, cols), each in [qmin, qmax]

  /// Allocates params and codes for (rows, cols) on `grid`. Throws InvalidArgument when cols is
  /// not a positive multiple of 32, and as check_grid.
  QuantizedMatrix(const QuantGrid& grid, int64_t rows, int64_t cols);
  /// Groups per row.
  int64_t groups() const { return (cols + grid.group_cols(cols) - 1) / grid.group_cols(cols); }
  /// The parameters of the group holding (r, c).
  GroupParams& group(int64_t r, int64_t c) {
    return params[static_cast<size_t>(r * groups() + c / grid.group_cols(cols))];
  }
  /// As group(), read only.
  const GroupParams& group(int64_t r, int64_t c) const {
    return params[static_cast<size_t>(r * groups() + c / grid.group_cols(cols))];
  }
  /// The value element (r, c) stands for.
  float value(int64_t r, int64_t c) const { return grid_value(group(r, c), codes[static_cast<size_t>(r * cols + c)]); }
  /// All values, (rows, cols) row-major.
  std::vector<float> dequantized() const;
  /// Row r in grid_container(grid)'s blocks: dtype_row_bytes(container, cols) bytes at `out`.
  void encode_row(int64_t r, std::byte* out) const;
};

/// Round-to-nearest of w (rows, cols) row-major onto `g`, every group through grid_params.
/// Throws InvalidArgument for a non-finite weight (naming row and column), and as
/// QuantizedMatrix.
QuantizedMatrix rtn_quantize(const QuantGrid& g, const float* w, int64_t rows, int64_t cols);

}  // namespace lio
