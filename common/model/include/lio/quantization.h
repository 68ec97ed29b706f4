// quantization.h — chapter 03's exercise points: the memory a model needs at a bit width,
// round-to-nearest quantization of one 32-weight block into llama.cpp's Q8_0, Q4_0 and Q4_1
// (ggml's quantize_row_*_ref rules, ggml/src/ggml-quants.c), GPTQ's column loop, AWQ's
// scale search, and W8A8's per-token INT8 activations with their integer dot product. Declared here, defined twice:
// solutions/03_quantization (reference) and exercises/03_quantization (your code); the engine
// links one of them (LIO_EXERCISES). `lio quantize` quantizes every block through these, and
// the CPU backend rounds every matmul input through Task 6 under --activations int8-token.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "lio/dtype.h"

namespace lio {

// ---- Task 1 (exercises/03_quantization/memory.cpp) ----------------------------------------

/// Bytes that hold n_params weights at bits_per_weight bits each, rounded up to a whole byte
/// (docs/03_quantization.md, section 1 and "Task 1"). Fractional widths count a block's scales
/// (Q4_0: 4.5, Q4_1: 5, Q8_0: 8.5). Examples: 7 x 10^9 weights at 4 bits are 3,500,000,000
/// bytes, one Q8_0 block (32 weights at 8.5) 34 bytes, 3 weights at 4 bits 2 bytes. Throws
/// InvalidArgument for n_params < 0 or bits_per_weight outside (0, 64].
int64_t weight_bytes(int64_t n_params, double bits_per_weight);

/// Whether a model's weights (weight_bytes) and `overhead_bytes` more (KV cache, activations,
/// runtime) fit in budget_bytes together; a budget met exactly fits. 13 x 10^9 weights with
/// 2 x 10^9 bytes of overhead fit in 16 x 10^9 bytes at 8 bits, not at 16. Throws as
/// weight_bytes, and InvalidArgument for a negative overhead or budget.
bool model_fits(int64_t n_params, double bits_per_weight, int64_t overhead_bytes, int64_t budget_bytes);

// ---- Task 2 (exercises/03_quantization/rtn.cpp): symmetric -------------------------------
// Tasks 2-3 are what `lio quantize --method rtn` runs on every block (common/tools/src/
// quantize.cpp), so with chapter 03 on exercises it writes the learner's bytes. The grading
// tests compare those bytes with llama.cpp's (ggml's quantize_row_*_ref) on random blocks; how
// the scale is chosen and the codes rounded is docs/03_quantization.md, section 2.

/// Q8_0 (symmetric INT8) of one block x (32 finite floats), bit-identical to ggml's
/// quantize_row_q8_0_ref: an f16 scale d and codes q[i] in [-127, 127] (all 0, d = 0, for an
/// all-zero block). Dequantized: x[i] ≈ d * q[i].
BlockQ8_0 quantize_block_q8_0(std::span<const float, kQuantBlockElems> x);

/// Q4_0 (symmetric INT4) of one block x (32 finite floats), bit-identical to ggml's
/// quantize_row_q4_0_ref: an f16 scale d and codes q[i] in [0, 15]; element i < 16 in the low
/// nibble of qs[i], element i + 16 in its high nibble. Dequantized: x[i] ≈ d * (q[i] - 8).
BlockQ4_0 quantize_block_q4_0(std::span<const float, kQuantBlockElems> x);

// ---- Task 3 (exercises/03_quantization/rtn.cpp): asymmetric ------------------------------

/// Q4_1 (asymmetric INT4) of one block x (32 finite floats), bit-identical to ggml's
/// quantize_row_q4_1_ref: f16 d and m, codes q[i] in [0, 15], nibbles as Q4_0. Dequantized:
/// x[i] ≈ d * q[i] + m.
BlockQ4_1 quantize_block_q4_1(std::span<const float, kQuantBlockElems> x);

// ---- Task 4 (exercises/03_quantization/gptq.cpp): GPTQ ----------------------------------

/// Rounds column j of W onto the quantization grid: `column` (rows values) holds W[:, j] on
/// entry and must hold the grid values on return.
using RoundColumn = std::function<void(int64_t j, std::span<float> column)>;

/// GPTQ's column loop (Frantar et al. 2023, Algorithm 1; the OBS update of Frantar & Alistarh
/// 2022, eq. 3-4): quantize W's columns one at a time, j = 0 .. cols - 1, and after each one
/// move its rounding error onto the columns not yet quantized, the way that least raises the
/// layer's output error ||W X^T - Q X^T||^2 (docs/03_quantization.md, section 3, derives the
/// update through U). wt: W^T, (cols, rows) row-major (column j of W is row j of wt,
/// contiguous), updated in place; on return row j holds column j's grid values. u: (cols,
/// cols) row-major, the upper Cholesky factor of H^-1 (H^-1 = U^T U; H = 2 X^T X + damping, X
/// the layer's calibration inputs). Columns before j never change once j is rounded: the
/// update only moves error forward. round_column is called once per
/// j in increasing order; when it is called for j, the rows of wt from j to the end of j's
/// 128-column block (128 * floor(j / 128) + 127, or cols - 1) hold every update from the
/// columns before j (the caller reads a whole group's updated weights there to set its scale;
/// groups of 32, 64 and 128 never straddle such a block). Lazy batching (the paper's blocks of 128 columns) is allowed under
/// that rule and gives the same result. Throws InvalidArgument when wt.size() != cols * rows or
/// u.size() != cols * cols.
void gptq_quantize_columns(std::span<float> wt, int64_t rows, std::span<const float> u,
                           const RoundColumn& round_column);

// ---- Task 5 (exercises/03_quantization/awq.cpp): AWQ -------------------------------------

/// What awq_search_scales found.
struct AwqSearch {
  double alpha = 0.0;         ///< the exponent picked
  double loss = 0.0;          ///< loss(scales) at that exponent
  std::vector<float> scales;  ///< (cols) the per-input-channel scales s at that exponent
};

/// AWQ's scale search (Lin et al. 2024, sec. 3.2-3.3, eq. 4-5; AutoAWQ's search_best_scale):
/// tries n_grid exponents alpha, evenly spaced over [0, 1) starting at 0, each with the
/// per-input-channel scales docs/03_quantization.md, section 3 ("AWQ") derives from mean_abs_x
/// for it (AutoAWQ's floor of 1e-4 included), and returns the exponent whose scales give the
/// smallest loss(s) (the first on a tie), with that loss and those scales. loss(s) is the
/// output error of the layers reading this input when W diag(s) is rounded and diag(s)^-1
/// folded back; it is called once per exponent, in increasing order.
/// Must hold: every candidate s has mean_abs_x.size() positive entries with max(s) * min(s) = 1
/// (normalized); alpha = 0 is s = 1, plain RTN, so the result never loses to RTN on `loss`.
/// mean_abs_x: (cols) mean |x_c| over the calibration tokens, each >= 0. Throws
/// InvalidArgument for n_grid < 1 or an empty mean_abs_x.
AwqSearch awq_search_scales(std::span<const float> mean_abs_x, int n_grid,
                            const std::function<double(std::span<const float> scales)>& loss);

// ---- Task 6 (exercises/03_quantization/int8.cpp): W8A8 --------------------------------

/// Largest length int8_dot accepts: 128 * 128 * n fits an int32 (2^31 - 1) for any int8 codes.
inline constexpr int64_t kInt8DotMaxLen = 131071;

/// Per-token symmetric INT8 of one activation row (dynamic: the scale is found at run time,
/// one per token; LLM.int8()'s "vector-wise" quantization of X, Dettmers et al. 2022 sec. 3.1;
/// SmoothQuant's per-token activations, Xiao et al. 2023 sec. 3; docs/03_quantization.md,
/// section 4). Writes q (x.size() codes in [-127, 127]) and returns the row's one scale s:
/// the largest |x[i]| becomes +-127 (s is the f32 quotient of that magnitude by 127), and each
/// q[i] is the code nearest x[i] / s, halves away from zero as std::round, so x[i] ≈ s * q[i].
/// A row of zeros gives s = 0 and q = 0. Example: x = (0.6, -1.27, 0.02) gives s = 0.01 and
/// q = (60, -127, 2). Throws InvalidArgument when q.size() != x.size() or an x[i] is not finite.
float quantize_row_int8(std::span<const float> x, std::span<int8_t> q);

/// The dot product a . b of two INT8 vectors given with their scales, a ≈ scale_a * qa and
/// b ≈ scale_b * qb (docs/03_quantization.md, section 4). The code products are summed exactly
/// in int32 (what _mm256_maddubs_epi16 / _mm256_madd_epi16 on a CPU, dp4a or an INT8
/// tensor-core MMA on a GPU compute) and the sum is converted to float once, so 4,096 products
/// of 127 x 127 give exactly 66,064,384 (a float accumulator drops ones past 2^24). Example:
/// qa = (1, 2, 3), qb = (4, -5, -6), scales 0.5 and 0.25 -> -3. W8A8's y[t][j] is this with
/// a = the token's row (quantize_row_int8) and b = the weight row j (per output channel).
/// Throws InvalidArgument when qa.size() != qb.size() or the length exceeds kInt8DotMaxLen.
float int8_dot(std::span<const int8_t> qa, float scale_a, std::span<const int8_t> qb, float scale_b);

}  // namespace lio
