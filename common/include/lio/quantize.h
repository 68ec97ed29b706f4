// quantize.h — `lio quantize` (chapter 03): rewrite a GGUF model's weight matrices at a lower
// bit width, as llama.cpp's `llama-quantize` does, so the file runs in our engine and in
// llama.cpp alike. Round-to-nearest (RTN) into llama.cpp's 32-wide block types: Q8_0 (INT8
// symmetric, one f16 scale per 32 weights), Q4_0 (INT4 symmetric) and Q4_1 (INT4 asymmetric: a
// scale and a minimum per 32). ggml's reference quantizers (quantize_row_*_ref) define the
// rounding; llama.cpp/ggml/src/ggml-quants.c.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lio/dtype.h"

namespace lio {

/// What `lio quantize` writes.
struct QuantizeOptions {
  std::string method = "rtn";  ///< rtn (gptq, awq: not built yet)
  int bits = 4;                ///< 8 or 4
  bool asymmetric = false;     ///< 4 bits: Q4_1 (scale + minimum) instead of Q4_0 (scale only)
  int64_t group_size = 32;     ///< weights per scale; llama.cpp's block types fix it at 32
  /// Tensors kept at a higher precision: each entry is {dtype, name prefix}; a tensor whose
  /// name starts with the prefix (e.g. "token_embd", "output.") is written in that dtype
  /// (F32, F16, BF16 or Q8_0) instead (mixed precision; llama.cpp keeps a tied embedding at
  /// Q8_0 in its 4-bit files).
  std::vector<std::pair<DType, std::string>> keep;
};

/// Parses --keep "f32:token_embd,output" (a dtype, a colon, comma-separated name prefixes;
/// several such groups separated by ';'). Throws InvalidArgument for an empty prefix list or
/// a dtype other than f32, f16, bf16, q8_0.
std::vector<std::pair<DType, std::string>> parse_keep(const std::string& text);

/// The block type `o` asks for: Q8_0, Q4_0 or Q4_1. Throws UnsupportedError for a method other
/// than rtn, bits other than 8 and 4, or a group size other than 32 (the llama.cpp block types
/// this command writes), and InvalidArgument for --asymmetric with 8 bits.
DType quantize_target(const QuantizeOptions& o);

/// What quantize_gguf did.
struct QuantizeReport {
  int64_t n_tensors = 0;         ///< tensors written
  int64_t n_quantized = 0;       ///< matrices rewritten at the target type
  int64_t bytes_in = 0;          ///< tensor bytes read
  int64_t bytes_out = 0;         ///< tensor bytes written
  int64_t params_quantized = 0;  ///< weights in the rewritten matrices
};

/// Reads the GGUF at `in_path`, writes `out_path` with the same metadata (general.file_type
/// set to llama.cpp's ftype for the target) and tensors: 2-D ".weight" matrices whose rows are
/// a multiple of 32 are dequantized to f32 and re-quantized by RTN to quantize_target(o) (each
/// block through chapter 03's quantize_block_*, lio/quantization.h),
/// unless `o.keep` names them; everything else (norms, odd shapes) is copied unchanged.
/// `on_layer(done, total)` reports progress by decoder block (blk.N). Throws as GgufFile::open
/// for a bad input, InvalidArgument when out_path equals in_path or cannot be written or a weight
/// is not finite (naming the tensor and row), and as
/// quantize_target for unsupported options. The input is never modified.
QuantizeReport quantize_gguf(const std::string& in_path, const std::string& out_path, const QuantizeOptions& o,
                             const std::function<void(int64_t, int64_t)>& on_layer = {});

}  // namespace lio
