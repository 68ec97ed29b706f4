// Chapter 03, Tasks 2-3 — reference solution: round-to-nearest of one 32-weight block into
// llama.cpp's Q8_0, Q4_0 (symmetric) and Q4_1 (asymmetric), bit for bit as ggml's
// quantize_row_*_ref. Declarations and contracts: common/model/include/lio/quantization.h.
//
// The loops are written once, in the engine's base: lio::quantize_block
// (kernels/base/src/dtype.cpp, encode_block), which the GGUF writers and the loader's --dtype
// conversion need below every chapter, whichever chapters run on exercises. Read the worked
// answer there. This file names it, so the reference answer and the engine's quantizer cannot
// drift apart; your exercises/03_quantization/rtn.cpp writes the loops itself, and the grading
// tests compare its bytes with quantize_block's.
#include "lio/quantization.h"

namespace lio {

BlockQ8_0 quantize_block_q8_0(std::span<const float, kQuantBlockElems> x) {
  BlockQ8_0 b{};
  quantize_block(DType::Q8_0, x.data(), &b);
  return b;
}

BlockQ4_0 quantize_block_q4_0(std::span<const float, kQuantBlockElems> x) {
  BlockQ4_0 b{};
  quantize_block(DType::Q4_0, x.data(), &b);
  return b;
}

BlockQ4_1 quantize_block_q4_1(std::span<const float, kQuantBlockElems> x) {
  BlockQ4_1 b{};
  quantize_block(DType::Q4_1, x.data(), &b);
  return b;
}

}  // namespace lio
