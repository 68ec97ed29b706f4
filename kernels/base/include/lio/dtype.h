// dtype.h — tensor element types as GGUF/ggml stores them, their block layouts,
// and exact (de)quantization of one row.
//
// Source for every layout: ggml's `ggml-common.h` (block_q4_0, block_q4_1, block_q8_0,
// block_q5_0, block_q5_1, block_q4_K, block_q6_K) and the GGUF spec (docs/gguf.md in the ggml repository). A
// quantized row is a run of blocks of 32 elements, each storing its scale (and for Q4_1 its
// minimum) as f16; the K-quants (Q4_K, Q6_K) use super-blocks of 256 with quantized
// sub-block scales. LIO reads and runs Q5_0, Q5_1 and the K-quants (dequantize_row; the CPU
// and CUDA matmul kernels decode them in place) but does not write them: llama.cpp's Q4_K_M
// files mix Q4_K and Q6_K with Q5_0 and Q8_0 for rows that are not whole super-blocks.
// Q3_0 / Q3_1 are LIO's own packed 3-bit blocks (type ids 1000 / 1001, outside ggml's range):
// `lio quantize --bits 3` writes them unless asked for llama.cpp's 4-bit blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

// Marks the block helpers CUDA kernels share with host code (empty outside nvcc).
#if defined(__CUDACC__)
#define LIO_HOST_DEVICE __host__ __device__
#else
#define LIO_HOST_DEVICE
#endif

namespace lio {

/// Element type of a tensor. Values are the ggml type ids GGUF writes on disk.
enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,   ///< read only (no encoder): llama.cpp's fallback for Q4_K rows not a multiple of 256
  Q5_1 = 7,   ///< read only (no encoder)
  Q8_0 = 8,
  Q4_K = 12,  ///< read only (no encoder); run by the CPU and CUDA kernels as stored
  Q6_K = 14,  ///< read only (no encoder); run by the CPU and CUDA kernels as stored
  BF16 = 30,
  Q3_0 = 1000,  ///< LIO's own packed 3-bit block (no ggml type; llama.cpp cannot read it)
  Q3_1 = 1001,  ///< LIO's own packed 3-bit block with a minimum (no ggml type)
};

/// Elements per quantization block (32 for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, source: ggml-common.h QK4_0 ... QK8_0).
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
/// Q5_0 block: x[i] = d * (q[i] - 16), q in [0, 31]: the low 4 bits in qs with Q4_0's nibble
/// layout, the fifth bit of element i in bit i of qh (read as a little-endian uint32).
/// 22 bytes per 32 elements (5.5 bits per weight).
struct BlockQ5_0 {
  uint16_t d;       ///< scale, f16 bits
  uint8_t qh[4];    ///< 32 fifth bits
  uint8_t qs[16];   ///< 32 x low 4 bits
};
/// Q5_1 block: x[i] = d * q[i] + m, q in [0, 31]; bits laid out as Q5_0's. 24 bytes per 32.
struct BlockQ5_1 {
  uint16_t d;       ///< scale, f16 bits
  uint16_t m;       ///< minimum, f16 bits
  uint8_t qh[4];    ///< 32 fifth bits
  uint8_t qs[16];   ///< 32 x low 4 bits
};
/// Q8_0 block: x[i] = d * q[i], q in [-128, 127]. 34 bytes per 32 elements.
struct BlockQ8_0 {
  uint16_t d;       ///< scale, f16 bits
  int8_t qs[32];    ///< 32 x int8 quants
};
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ8_0) == 34 &&
                  sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24,
              "block layouts must match ggml-common.h byte for byte");

/// Q3_0 block, LIO's own (ggml has no 32-wide 3-bit type; its Q3_K needs rows of whole
/// 256-element super-blocks): x[i] = d * (q[i] - 4), q in [0, 7]. 14 bytes per 32 elements
/// (3.5 bits per weight). Element i: its low 2 bits are bits 2 * (i / 8) .. + 1 of qs[i % 8]
/// (so qs read as one little-endian uint64 holds element i's low bits at 8 * (i % 8) + 2 *
/// (i / 8)), its third bit is bit i of qh (read as a little-endian uint32, as in Q5_0).
/// `lio quantize --bits 3` writes it for symmetric grids; the ggml type id is 1000.
struct BlockQ3_0 {
  uint16_t d;       ///< scale, f16 bits
  uint8_t qh[4];    ///< 32 third bits
  uint8_t qs[8];    ///< 32 x low 2 bits
};
/// Q3_1 block, LIO's own: x[i] = d * q[i] + m, q in [0, 7]; bits laid out as Q3_0's. 16 bytes
/// per 32 (4 bits per weight); written for asymmetric 3-bit grids; ggml type id 1001.
struct BlockQ3_1 {
  uint16_t d;       ///< scale, f16 bits
  uint16_t m;       ///< minimum, f16 bits
  uint8_t qh[4];    ///< 32 third bits
  uint8_t qs[8];    ///< 32 x low 2 bits
};
static_assert(sizeof(BlockQ3_0) == 14 && sizeof(BlockQ3_1) == 16, "packed 3-bit blocks");

/// The 3-bit code of element i (0..31) of a Q3_0 / Q3_1 block from its qh and qs bytes.
LIO_HOST_DEVICE constexpr int q3_code(const uint8_t* qh, const uint8_t* qs, int i) {
  return ((qs[i % 8] >> (2 * (i / 8))) & 3) | (((qh[i / 8] >> (i % 8)) & 1) << 2);
}

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

/// A Q4_K sub-block's 6-bit scale and minimum, as integers in [0, 63].
struct KQuantScaleMin {
  int scale;  ///< sc_j: the sub-block's scale is d * sc_j
  int min;    ///< m_j: the sub-block's minimum is dmin * m_j
};

/// Unpacks sub-block j (0..7) of a Q4_K super-block's 12 `scales` bytes (ggml-quants.c
/// get_scale_min_k4): j < 4 takes the low 6 bits of bytes j (scale) and j + 4 (minimum); j >= 4
/// takes the nibbles of byte j + 4 (low: scale, high: minimum) with their top 2 bits from the
/// top 2 bits of bytes j - 4 (scale) and j (minimum). Host and device code share it.
LIO_HOST_DEVICE constexpr KQuantScaleMin q4_k_scale_min(const uint8_t* scales, int j) {
  if (j < 4) return {scales[j] & 63, scales[j + 4] & 63};
  return {(scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4), (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4)};
}

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
/// Q5_0, Q5_1, Q4_K and Q6_K (read only). Q3_0 / Q3_1 (LIO's own) round to nearest on 8
/// levels as Q4_0 / Q4_1 do on 16: d = max / -4 (max: the signed value of largest magnitude)
/// or d = (max - min) / 7. Every quantized block goes through quantize_block's rules.
void quantize_row(DType dtype, const float* src, void* dst, int64_t n_elems);

/// Round-to-nearest of ONE block of kQuantBlockElems (32) floats x into `dtype` at `dst`
/// (dtype_info(dtype).block_bytes; unaligned is fine): Q8_0, Q4_0 and Q4_1 by ggml's
/// quantize_row_*_ref rules, Q3_0 / Q3_1 by LIO's (see quantize_row). The engine's one RTN
/// quantizer: quantize_row runs every block through it, and chapter 03's reference answer to
/// Tasks 2-3 (solutions/03_quantization/rtn.cpp, what `lio quantize --method rtn` calls) is
/// this function; the learner's quantize_block_* are graded against it. It sits here, below
/// every chapter, because the GGUF writers and the loader's --dtype conversion need it whichever
/// chapters a learner has switched to exercises. Throws UnsupportedError for a dtype without a
/// 32-element RTN block (F32, F16, BF16, Q5_0, Q5_1, Q4_K, Q6_K), InvalidArgument on a null
/// pointer or a NaN/Inf element.
void quantize_block(DType dtype, const float* x, void* dst);

/// Packs 32 3-bit codes (each in [0, 7]) into a Q3_0 / Q3_1 block's qh (4 bytes) and qs (8
/// bytes), the layout q3_code reads. Throws InvalidArgument for a code outside [0, 7].
void pack_q3_codes(const int* codes, uint8_t* qh, uint8_t* qs);

/// Writes one Q3_0 (`dtype` Q3_0; m unused) or Q3_1 block at `dst` (14 / 16 bytes, unaligned
/// is fine): d and m rounded to f16, the 32 codes (each in [0, 7], Q3_0's stored as q = code +
/// 4 by the caller) packed by pack_q3_codes. Throws InvalidArgument for another dtype or a
/// code outside [0, 7].
void write_q3_block(DType dtype, const int* codes, float d, float m, void* dst);

}  // namespace lio
