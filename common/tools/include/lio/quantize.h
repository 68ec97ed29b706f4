// quantize.h — `lio quantize` (chapter 03): rewrite a GGUF model's weight matrices at a lower
// bit width, as llama.cpp's `llama-quantize` does, so the file runs in our engine and in
// llama.cpp alike. Methods: round-to-nearest (RTN), GPTQ and AWQ (lio/calibrated_quant.h);
// grids of 8, 4 or 3 bits in groups of 32, 64 or 128, stored in llama.cpp's 32-wide block
// types (lio/quant_grid.h): Q8_0 (INT8 symmetric, one f16 scale per 32 weights), Q4_0 (INT4
// symmetric) and Q4_1 (INT4 asymmetric: a scale and a minimum per 32); 3 bits in LIO's packed
// Q3_0 / Q3_1 (no llama.cpp type fits 576-wide rows) unless asked for Q4 blocks. ggml's
// reference quantizers (quantize_row_*_ref, llama.cpp/ggml/src/ggml-quants.c) define RTN's
// rounding.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lio/dtype.h"
#include "lio/quant_grid.h"

namespace lio {

/// What `lio quantize` writes.
struct QuantizeOptions {
  std::string method = "rtn";  ///< rtn, gptq (Frantar et al. 2023), awq (Lin et al. 2024) or smoothquant (Xiao et al. 2023)
  int bits = 4;                ///< 8, 4 or 3 (3 bits: LIO's packed Q3_0 / Q3_1, or Q4 blocks with llama_blocks)
  bool asymmetric = false;     ///< 4 / 3 bits: a minimum per group (Q4_1 / Q3_1) instead of scale only (Q4_0 / Q3_0)
  bool llama_blocks = false;   ///< 3 bits: store the codes in Q4_0 / Q4_1 so llama.cpp can run the file
  int64_t group_size = 32;     ///< weights per scale: 32 (llama.cpp's block), 64, 128 or kPerChannel (0; the scale repeated)
  /// Tensors kept at a higher precision: each entry is {dtype, name prefix}; a tensor whose
  /// name starts with the prefix (e.g. "token_embd", "output.") is written in that dtype
  /// (F32, F16, BF16 or Q8_0) instead (mixed precision; llama.cpp keeps a tied embedding at
  /// Q8_0 in its 4-bit files).
  std::vector<std::pair<DType, std::string>> keep;
  std::string calib_path;      ///< gptq / awq: a text file to calibrate on (required for them)
  int64_t calib_ctx = 512;     ///< calibration tokens per chunk
  int64_t calib_chunks = 8;    ///< calibration chunks (-1: the whole text)
  double damp = 0.01;          ///< gptq: H += damp * mean(diag H) * I
  bool act_order = true;       ///< gptq: columns by decreasing H_cc (measured better here, section 4)
  int awq_grid = 20;           ///< awq: exponents tried (AutoAWQ's n_grid)
  double smooth_alpha = 0.8;   ///< smoothquant: migration strength alpha (llm-compressor's W8A8 example's smoothing_strength)
};

/// Parses --keep "f32:token_embd,output" (a dtype, a colon, comma-separated name prefixes;
/// several such groups separated by ';'). Throws InvalidArgument for an empty prefix list or
/// a dtype other than f32, f16, bf16, q8_0.
std::vector<std::pair<DType, std::string>> parse_keep(const std::string& text);

/// The grid `o` asks for (lio/quant_grid.h). Throws as check_grid.
QuantGrid quantize_grid(const QuantizeOptions& o);

/// The block type `o` writes its matrices in: grid_container(quantize_grid(o)). Throws
/// InvalidArgument for a method other than rtn, gptq, awq, smoothquant, for a calibrated method
/// without a calibration text, a calib_ctx < 2, calib_chunks == 0, a damp outside [0, 1), an
/// awq_grid < 1 or a smooth_alpha outside [0, 1], and as check_grid (UnsupportedError).
DType quantize_target(const QuantizeOptions& o);

/// What quantize_gguf did.
struct QuantizeReport {
  int64_t n_tensors = 0;         ///< tensors written
  int64_t n_quantized = 0;       ///< matrices rewritten at the target type
  int64_t bytes_in = 0;          ///< tensor bytes read
  int64_t bytes_out = 0;         ///< tensor bytes written
  int64_t params_quantized = 0;  ///< weights in the rewritten matrices
  int64_t calib_tokens = 0;      ///< gptq / awq / smoothquant: calibration tokens run
  double output_error_rtn = 0;   ///< gptq / awq: sum over the calibrated matrices of RTN's output error
  double output_error = 0;       ///< gptq / awq: the same for what was written (lower is better)
};

/// Reads the GGUF at `in_path`, writes `out_path` with the same metadata (general.file_type
/// set to llama.cpp's ftype for the container) and tensors: 2-D ".weight" matrices whose rows
/// are a multiple of 32 are dequantized to f32 and rounded onto quantize_grid(o), unless
/// `o.keep` names them; everything else (norms, odd shapes) is copied unchanged.
/// - rtn: round to nearest. At 8 and 4 bits with groups of 32 each block goes through chapter
///   03's quantize_block_* (Tasks 2-3, lio/quantization.h), bit for bit as llama-quantize;
///   other grids through rtn_quantize.
/// - gptq / awq: the model runs on the CPU over o.calib_path (collect_calibration); each
///   decoder block's q/k/v/o/gate/up/down matrices then go through gptq_quantize (Task 4), or
///   get AWQ scales (awq_scales, Task 5) for the inputs q/k/v, gate/up and down share, which
///   are folded into attn_norm, ffn_norm and W_up's rows (written as f32), the scaled matrices
///   then RTN-rounded. W_o is left to RTN under AWQ: it cannot be folded into W_v when K/V heads
///   are shared (GQA), as AutoAWQ also skips it. The LM head / embedding gets RTN.
/// - smoothquant: the same folding with SmoothQuant's scales (Xiao et al. 2023, eq. 4):
///   s_c = max|X_c|^alpha / max|W_c|^(1 - alpha), max|W_c| over the matrices sharing the input,
///   which moves the activations' outlier channels into the weights so that per-token INT8
///   activations (--activations int8-token, W8A8) lose less; then RTN. Meant for 8 bits.
/// `on_layer(done, total)` reports progress by decoder block (blk.N), `on_calib(done, total)`
/// by calibration chunk. Throws as GgufFile::open and load_model for a bad input,
/// InvalidArgument when out_path equals in_path or cannot be written, a weight is not finite
/// (naming the tensor and row), the calibration text cannot be read or is too short, and as
/// quantize_target for unsupported options. The input is never modified.
QuantizeReport quantize_gguf(const std::string& in_path, const std::string& out_path, const QuantizeOptions& o,
                             const std::function<void(int64_t, int64_t)>& on_layer = {},
                             const std::function<void(int64_t, int64_t)>& on_calib = {});

}  // namespace lio
