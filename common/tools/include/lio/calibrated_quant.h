// calibrated_quant.h — chapter 03: the quantization methods that look at activations. The
// engine runs a calibration text and records, for each group of linear layers sharing one
// input, H = sum of x x^T and sum |x| over its input rows; GPTQ (Frantar et al. 2023) rounds
// each matrix column by column and compensates with H, AWQ (Lin et al. 2024) picks per-channel
// scales from mean |x| that protect the salient channels. Both minimize a layer's output
// error ||W X^T - Q X^T||^2 = tr((W - Q) H (W - Q)^T), which output_error() computes.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "lio/model_loader.h"
#include "lio/quant_grid.h"
#include "lio/quantization.h"

namespace lio {

/// The input a group of linear layers shares.
enum class LinearInput {
  Attn,     ///< the AttnNorm output: W_q, W_k, W_v (MLA: W_q, W_kv_a); (d_model)
  AttnOut,  ///< attention's output: W_o; (n_heads * head_dim)
  Ffn,      ///< the FfnNorm output: W_gate, W_up; (d_model)
  FfnDown,  ///< silu(gate) * up: W_down; (d_ff)
};
/// Number of LinearInput values.
inline constexpr int kLinearInputs = 4;

/// Statistics of one input over the calibration tokens.
struct InputStats {
  int64_t dim = 0;               ///< input width
  int64_t n_tokens = 0;          ///< rows seen
  std::vector<double> xtx;       ///< (dim, dim) sum over rows of x x^T; H = 2 xtx / n_tokens
  std::vector<double> abs_sum;   ///< (dim) sum over rows of |x_c|
  std::vector<float> abs_max;    ///< (dim) max over rows of |x_c| (SmoothQuant's activation range)
  /// (dim) mean |x_c| (AWQ's activation magnitude).
  std::vector<float> mean_abs() const;
};

/// Every layer's input statistics.
struct CalibrationStats {
  int64_t n_tokens = 0;  ///< calibration tokens run
  int64_t n_chunks = 0;  ///< chunks they were run in
  std::vector<std::array<InputStats, kLinearInputs>> layers;  ///< (n_layers)
  /// Layer l's statistics of input `in`.
  const InputStats& at(int64_t l, LinearInput in) const {
    return layers[static_cast<size_t>(l)][static_cast<size_t>(in)];
  }
};

/// Runs the model on the CPU over `tokens` (a calibration text, tokenized) cut into
/// min(n_chunks, tokens / n_ctx) chunks of n_ctx tokens, each from an empty cache with its
/// first token replaced by bos_id when bos_id >= 0 (as lio::perplexity does), and records
/// every layer's InputStats (GPTQ calibrates on the unquantized model's activations, as
/// AutoAWQ does for its scales). `on_chunk(done, total)` reports progress. Throws
/// InvalidArgument when the text has fewer than n_ctx tokens, n_ctx < 2 or past the model's
/// context, or n_chunks == 0 (-1: all).
CalibrationStats collect_calibration(const LoadedModel& m, std::span<const int32_t> tokens, int32_t bos_id,
                                     int64_t n_ctx, int64_t n_chunks,
                                     const std::function<void(int64_t, int64_t)>& on_chunk = {});

/// tr((W - Q) xtx (W - Q)^T): the summed squared output error of replacing W by Q over the
/// calibration rows. w, q: (rows, cols) row-major; xtx: (cols, cols). Throws InvalidArgument
/// on a size mismatch.
double output_error(const float* w, const float* q, int64_t rows, int64_t cols, std::span<const double> xtx);

/// GPTQ's settings.
struct GptqOptions {
  double damp = 0.01;      ///< λ: H += λ mean(diag H) I before inverting (the paper's 1%)
  bool act_order = false;  ///< quantize columns by decreasing H_cc ("act-order"); groups
                           ///< are then fixed from the original weights before the loop
};

/// GPTQ of w (rows, cols) row-major onto grid `g`, calibrated by `stats` (its xtx; dim ==
/// cols): H = 2 xtx / n + damping (a column no token touched gets H_cc = 1 and weight 0, as
/// the reference code does), U = the upper Cholesky factor of H^-1, then chapter 03's Task 4
/// (gptq_quantize_columns) with a rounding step that sets a group's parameters (grid_params)
/// from its weights as updated so far when the loop reaches its first column (fixed from the
/// original weights under act-order, so groups stay contiguous for llama.cpp's blocks).
/// Throws InvalidArgument on a size mismatch, a non-finite weight, no calibration tokens, or
/// an H + damping that is not positive definite (the message says to raise damp).
QuantizedMatrix gptq_quantize(const QuantGrid& g, const float* w, int64_t rows, int64_t cols, const InputStats& stats,
                              const GptqOptions& o = {});

/// One matrix reading an input AWQ scales: w (rows, cols) row-major.
struct AwqMatrix {
  const float* w = nullptr;  ///< (rows, cols)
  int64_t rows = 0;          ///< output channels
};

/// AWQ's scales for one input shared by `mats` (all with `stats.dim` columns): chapter 03's
/// Task 5 (awq_search_scales over n_grid exponents) on mean |x| with loss(s) = sum over the
/// matrices of output_error(W, RTN(W diag(s)) diag(s)^-1). The caller then stores RTN(W
/// diag(s)) and folds diag(s)^-1 into whatever produces the input (a norm's weight, W_up's
/// rows). Throws InvalidArgument on a size mismatch.
AwqSearch awq_scales(const QuantGrid& g, std::span<const AwqMatrix> mats, const InputStats& stats, int n_grid = 20);

}  // namespace lio
