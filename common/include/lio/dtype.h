// dtype.h — tensor element types as GGUF/ggml stores them, their block layouts,
// and exact (de)quantization of one row.
//
// Source for every layout: ggml's `ggml-common.h` (block_q4_0, block_q4_1, block_q8_0,
// block_q4_K, block_q6_K) and the GGUF spec (docs/gguf.md in the ggml repository). A
// quantized row is a run of blocks of 32 elements, each storing its scale (and for Q4_1 its
// minimum) as f16; the K-quants (Q4_K, Q6_K) use super-blocks of 256 with quantized
// sub-block scales. LIO reads K-quants (dequantize_row) but does not write them, and the
// loader keeps their matrices as f32 (no K-quant kernels yet).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace lio {

/// Element type of a tensor. Values are the ggml type ids GGUF writes on disk.
enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q8_0 = 8,
  Q4_K = 12,  ///< read only: dequantized to f32 at load
  Q6_K = 14,  ///< read only: dequantized to f32 at load
  BF16 = 30,
};

/// Elements per quantization block (32 for Q4_0/Q4_1/Q8_0, source: ggml-common.h QK4_0/QK4_1/QK8_0).
inline constexpr int64_t kQuantBlockElems = 32;

/// Q4_0 block: x[i] = d * (q[i] - 8), q in [0, 15]. 18 bytes per 32 elements.
/// Nibble layout: qs[j] low nibble is element j, high nibble is element j + 16.
struct BlockQ4_0 {
  uint16_t d;       ///< scale, IEEE f16 bits
  uint8_t qs[16];   ///< 32 x 4-bit quants
};
/// Q4_1 block: x[i] = d * q[i] + m, q in [0, 15]. 20 bytes per 32 elements. Same nibble layout.
struct BlockQ4_1 {
  uint16_t d;       ///< scale, f16 bits
  uint16_t m;       ///< minimum, f16 bits
  uint8_t qs[16];   ///< 32 x 4-bit quants
};
/// Q8_0 block: x[i] = d * q[i], q in [-128, 127]. 34 bytes per 32 elements.
struct BlockQ8_0 {
  uint16_t d;       ///< scale, f16 bits
  int8_t qs[32];    ///< 32 x int8 quants
};
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ8_0) == 34,
              "block layouts must match ggml-common.h byte for byte");

/// Elements per K-quant super-block (ggml-common.h QK_K).
inline constexpr int64_t kKQuantBlockElems = 256;

/// Q4_K super-block: 8 sub-blocks of 32, sub-block j with a 6-bit scale sc_j and 6-bit
/// minimum m_j (packed in `scales`, see dequantize_row); x = d * sc_j * q - dmin * m_j with
/// q in [0, 15]. 144 bytes per 256 elements (4.5 bits per weight). Each 32-byte group of qs
/// holds two sub-blocks: low nibbles the first, high nibbles the second.
struct BlockQ4_K {
  uint16_t d;           ///< super-block scale of the sub-block scales, f16 bits
  uint16_t dmin;        ///< super-block scale of the sub-block minimums, f16 bits
  uint8_t scales[12];   ///< 8 scales and 8 minimums, 6 bits each
  uint8_t qs[128];      ///< 256 x 4-bit quants
};
/// Q6_K super-block: 16 sub-blocks of 16 with int8 scales; x = d * scale_j * (q - 32), q in
/// [0, 63] from 4 low bits (ql) and 2 high bits (qh). 210 bytes per 256 elements (6.5625 bits
/// per weight).
struct BlockQ6_K {
  uint8_t ql[128];      ///< low 4 bits of the quants
  uint8_t qh[64];       ///< high 2 bits of the quants
  int8_t scales[16];    ///< sub-block scales
  uint16_t d;           ///< super-block scale, f16 bits
};
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ6_K) == 210,
              "K-quant layouts must match ggml-common.h byte for byte");

/// Static facts about one dtype.
struct DTypeInfo {
  std::string_view name;  ///< "F32", "Q4_1", ... as ggml names them
  int64_t block_elems;    ///< elements per block (1 for F32/F16/BF16)
  int64_t block_bytes;    ///< bytes per block
};

/// True for the types LIO reads but has no kernels for (Q4_K, Q6_K): the loader keeps their
/// matrices as f32.
constexpr bool is_read_only(DType d) { return d == DType::Q4_K || d == DType::Q6_K; }

/// Returns the dtype for a ggml type id, or nullopt when LIO does not support it.
std::optional<DType> dtype_from_ggml(uint32_t ggml_type);

/// Name of a ggml type id even when unsupported (e.g. 12 -> "Q4_K"), for error messages.
/// Ids without a ggml name (removed types, ids past the table) give "type<N>" for N < 1000.
std::string_view ggml_type_name(uint32_t ggml_type);

/// Facts about a supported dtype.
DTypeInfo dtype_info(DType dtype);

/// Bytes taken by `n_elems` elements stored in `dtype`.
/// Throws InvalidArgument if n_elems is negative, not a multiple of the block size, or the
/// byte count overflows int64.
int64_t dtype_row_bytes(DType dtype, int64_t n_elems);

/// IEEE 754 half (bits) -> float, exact.
float f16_to_f32(uint16_t bits);
/// float -> IEEE 754 half bits, round to nearest even (used by writers and tests).
uint16_t f32_to_f16(float value);
/// bfloat16 (bits) -> float, exact.
float bf16_to_f32(uint16_t bits);
/// float -> bfloat16 bits, round to nearest even.
uint16_t f32_to_bf16(float value);

/// Dequantizes one row of `n_elems` elements from `src` (in `dtype`) into `dst` (f32).
/// Exact: each element equals the format's formula evaluated in f32. `src` may be unaligned
/// (blocks are read with memcpy). Throws InvalidArgument when n_elems is not a non-negative
/// multiple of the block size of `dtype`.
void dequantize_row(DType dtype, const void* src, float* dst, int64_t n_elems);

/// Quantizes one f32 row into `dtype` (`dst` must hold dtype_row_bytes(dtype, n_elems)).
/// Same rounding rules as ggml's reference quantizers (quantize_row_*_ref), so a row
/// written here reads back as ggml would read it (checked bit for bit against gguf-py's
/// numpy port). F32/F16/BF16 are plain conversions. Used by the test-model writers.
/// Throws InvalidArgument on a partial block, or on a NaN/Inf input for a quantized
/// dtype (ggml's cast of such a value to int8 is undefined behaviour); UnsupportedError for
/// Q4_K and Q6_K (read only).
void quantize_row(DType dtype, const float* src, void* dst, int64_t n_elems);

}  // namespace lio
