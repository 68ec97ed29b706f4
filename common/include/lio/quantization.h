// quantization.h — chapter 03's exercise points: the memory a model needs at a bit width, and
// round-to-nearest quantization of one 32-weight block into llama.cpp's Q8_0, Q4_0 and Q4_1
// (ggml's quantize_row_*_ref rules, ggml/src/ggml-quants.c). Declared here, defined twice:
// solutions/03_quantization (reference) and exercises/03_quantization (your code); the engine
// links one of them (LIO_EXERCISES). `lio quantize` quantizes every block through these.
#pragma once

#include <cstdint>
#include <span>

#include "lio/dtype.h"

namespace lio {

// ---- Task 1 (exercises/03_quantization/memory.cpp) ----------------------------------------

/// Bytes that hold n_params weights at bits_per_weight bits each, rounded up to a whole byte:
/// ceil(n_params * bits_per_weight / 8). Fractional widths count a block's scales (Q4_0:
/// 4.5, Q4_1: 5, Q8_0: 8.5). Throws InvalidArgument for n_params < 0 or bits_per_weight
/// outside (0, 64].
int64_t weight_bytes(int64_t n_params, double bits_per_weight);

/// Whether a model fits a memory budget: weight_bytes(n_params, bits_per_weight) +
/// overhead_bytes <= budget_bytes (overhead: KV cache, activations, runtime). Throws as
/// weight_bytes, and InvalidArgument for a negative overhead or budget.
bool model_fits(int64_t n_params, double bits_per_weight, int64_t overhead_bytes, int64_t budget_bytes);

// ---- Task 2 (exercises/03_quantization/rtn.cpp): symmetric -------------------------------

/// Q8_0 (symmetric INT8) of one block x (32 finite floats): d = max|x| / 127,
/// q[i] = round(x[i] / d) (half away from zero; 0 when d = 0), d stored as f16. Dequantized:
/// x[i] ≈ d * q[i].
BlockQ8_0 quantize_block_q8_0(std::span<const float, kQuantBlockElems> x);

/// Q4_0 (symmetric INT4) of one block x (32 finite floats): m = the x of largest magnitude,
/// sign kept; d = m / -8; q[i] = min(15, trunc(x[i] / d + 8.5)) (0 when d = 0), d stored as
/// f16; element i < 16 in the low nibble of qs[i], element i + 16 in its high nibble.
/// Dequantized: x[i] ≈ d * (q[i] - 8).
BlockQ4_0 quantize_block_q4_0(std::span<const float, kQuantBlockElems> x);

// ---- Task 3 (exercises/03_quantization/rtn.cpp): asymmetric ------------------------------

/// Q4_1 (asymmetric INT4) of one block x (32 finite floats): d = (max - min) / 15,
/// q[i] = min(15, trunc((x[i] - min) / d + 0.5)) (0 when d = 0); d and min stored as f16;
/// nibbles as Q4_0. Dequantized: x[i] ≈ d * q[i] + min.
BlockQ4_1 quantize_block_q4_1(std::span<const float, kQuantBlockElems> x);

}  // namespace lio
