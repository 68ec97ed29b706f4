// dtype.cpp — dtype facts, f16/bf16 conversion and exact (de)quantization of Q8_0/Q4_0/Q4_1 (and LIO's Q3_0/Q3_1).
//
// Sources: ggml-common.h (block layouts), ggml-quants.c (quantize_row_*_ref and
// dequantize_row_*), IEEE 754-2008 binary16, and the bfloat16 definition (the upper
// 16 bits of an IEEE binary32).
#include "lio/dtype.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "lio/error.h"

namespace lio {

// =========================================================================================
// Type tables
// =========================================================================================

namespace {

// ggml's type table (ggml.h enum ggml_type), ids 0..39. Empty entries are ids ggml removed
// (Q4_2, Q4_3, the Q4_0_N_M and IQ4_NL_N_M repacks); they print as "type<N>".
// clang-format off
constexpr std::array<std::string_view, 40> kGgmlTypeNames = {
    "F32",     "F16",    "Q4_0",    "Q4_1",  "",      "",       "Q5_0",  "Q5_1",
    "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",  "Q5_K",   "Q6_K",  "Q8_K",
    "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
    "I8",      "I16",    "I32",     "I64",   "F64",   "IQ1_M",  "BF16",  "",
    "",        "",       "TQ1_0",   "TQ2_0", "",      "",       "",      "MXFP4",
};
// clang-format on

// "type<N>" for N < 1000, built at compile time so ggml_type_name can hand out a
// string_view without any mutable storage.
constexpr int kNumberedNames = 1000;
constexpr int kNumberedNameChars = 8;  // "type999" + NUL
constexpr auto kNumberedTypeNames = [] {
  std::array<std::array<char, kNumberedNameChars>, kNumberedNames> names{};
  for (int n = 0; n < kNumberedNames; ++n) {
    auto& s = names[n];
    s[0] = 't';
    s[1] = 'y';
    s[2] = 'p';
    s[3] = 'e';
    int pos = 4;
    if (n >= 100) s[pos++] = static_cast<char>('0' + n / 100);
    if (n >= 10) s[pos++] = static_cast<char>('0' + n / 10 % 10);
    s[pos++] = static_cast<char>('0' + n % 10);
    s[pos] = '\0';
  }
  return names;
}();

}  // namespace

std::optional<DType> dtype_from_ggml(uint32_t ggml_type) {
  switch (ggml_type) {
    case 0: return DType::F32;
    case 1: return DType::F16;
    case 2: return DType::Q4_0;
    case 3: return DType::Q4_1;
    case 6: return DType::Q5_0;
    case 7: return DType::Q5_1;
    case 8: return DType::Q8_0;
    case 12: return DType::Q4_K;
    case 14: return DType::Q6_K;
    case 30: return DType::BF16;
    case 1000: return DType::Q3_0;  // LIO's own
    case 1001: return DType::Q3_1;
    default: return std::nullopt;
  }
}

std::string_view ggml_type_name(uint32_t ggml_type) {
  if (ggml_type < kGgmlTypeNames.size() && !kGgmlTypeNames[ggml_type].empty()) {
    return kGgmlTypeNames[ggml_type];
  }
  if (ggml_type < static_cast<uint32_t>(kNumberedNames)) {
    return std::string_view(kNumberedTypeNames[ggml_type].data());
  }
  if (ggml_type == 1000) return "Q3_0";
  if (ggml_type == 1001) return "Q3_1";
  return "type>=1000";
}

DTypeInfo dtype_info(DType dtype) {
  switch (dtype) {
    case DType::F32: return {"F32", 1, 4};
    case DType::F16: return {"F16", 1, 2};
    case DType::BF16: return {"BF16", 1, 2};
    case DType::Q4_0: return {"Q4_0", kQuantBlockElems, sizeof(BlockQ4_0)};
    case DType::Q4_1: return {"Q4_1", kQuantBlockElems, sizeof(BlockQ4_1)};
    case DType::Q5_0: return {"Q5_0", kQuantBlockElems, sizeof(BlockQ5_0)};
    case DType::Q5_1: return {"Q5_1", kQuantBlockElems, sizeof(BlockQ5_1)};
    case DType::Q8_0: return {"Q8_0", kQuantBlockElems, sizeof(BlockQ8_0)};
    case DType::Q4_K: return {"Q4_K", kKQuantBlockElems, sizeof(BlockQ4_K)};
    case DType::Q6_K: return {"Q6_K", kKQuantBlockElems, sizeof(BlockQ6_K)};
    case DType::Q3_0: return {"Q3_0", kQuantBlockElems, sizeof(BlockQ3_0)};
    case DType::Q3_1: return {"Q3_1", kQuantBlockElems, sizeof(BlockQ3_1)};
  }
  throw InvalidArgument("dtype_info: invalid DType value " +
                        std::to_string(static_cast<uint32_t>(dtype)));
}

int64_t dtype_row_bytes(DType dtype, int64_t n_elems) {
  const DTypeInfo info = dtype_info(dtype);
  if (n_elems < 0) {
    throw InvalidArgument("dtype_row_bytes: negative element count " + std::to_string(n_elems) +
                          " for " + std::string(info.name));
  }
  if (n_elems % info.block_elems != 0) {
    throw InvalidArgument("dtype_row_bytes: " + std::to_string(n_elems) + " elements of " +
                          std::string(info.name) + " is not a multiple of its block size " +
                          std::to_string(info.block_elems));
  }
  const int64_t n_blocks = n_elems / info.block_elems;
  if (n_blocks > INT64_MAX / info.block_bytes) {
    throw InvalidArgument("dtype_row_bytes: " + std::to_string(n_elems) + " elements of " +
                          std::string(info.name) + " overflow a 64-bit byte count");
  }
  return n_blocks * info.block_bytes;
}

// =========================================================================================
// f16 / bf16 conversion
// =========================================================================================

float f16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in f32 (needs at most 10 significant bits).
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  if (exponent == 0x1f) {
    // Inf (mantissa 0) or NaN (payload kept in the top mantissa bits).
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  }
  // Normal: rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t f32_to_f16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) {
    // NaN: keep the top payload bits, force the quiet bit so it stays a NaN.
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x477ff000u) {
    // >= 65520 (halfway between the largest half 65504 and 2^16) rounds to infinity.
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (abs < 0x38800000u) {
    // Below 2^-14: result is subnormal (or rounds up to the smallest normal). Adding 0.5
    // puts the value's 2^-24 units in the low mantissa bits; the FPU's round-to-nearest-even
    // does the rounding.
    const float shifted = std::bit_cast<float>(abs) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3f000000u));
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped bits to nearest even; a
  // carry out of the mantissa correctly bumps the exponent.
  const uint32_t mantissa_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mantissa_odd;  // 0xc8000000 == -(112 << 23) mod 2^32
  return static_cast<uint16_t>(sign | (abs >> 13));
}

float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint16_t f32_to_bf16(float value) {
  uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    // NaN: truncating could clear every payload bit and make it Inf; set the quiet bit.
    return static_cast<uint16_t>((x >> 16) | 0x40u);
  }
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even; overflow carries into Inf
  return static_cast<uint16_t>(x >> 16);
}

// =========================================================================================
// Dequantization (ggml-quants.c dequantize_row_q8_0 / q4_0 / q4_1)
// =========================================================================================

namespace {

void check_row(DType dtype, const void* src, const void* dst, int64_t n_elems,
               const char* function) {
  const DTypeInfo info = dtype_info(dtype);
  if (n_elems < 0 || n_elems % info.block_elems != 0) {
    throw InvalidArgument(std::string(function) + ": " + std::to_string(n_elems) + " elements of " +
                          std::string(info.name) +
                          " is not a non-negative multiple of the block size " +
                          std::to_string(info.block_elems));
  }
  if (n_elems > 0 && (src == nullptr || dst == nullptr)) {
    throw InvalidArgument(std::string(function) + ": null buffer for " + std::to_string(n_elems) +
                          " elements");
  }
}

// Blocks may sit at any byte offset inside a mapped file, so they are copied out with
// memcpy instead of dereferenced through a possibly misaligned pointer.
template <typename Block>
Block load_block(const std::byte* src, int64_t index) {
  Block block;
  std::memcpy(&block, src + index * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return block;
}

template <typename Block>
void store_block(std::byte* dst, int64_t index, const Block& block) {
  std::memcpy(dst + index * static_cast<int64_t>(sizeof(Block)), &block, sizeof(Block));
}

// Quantizers cast scaled values to int8; a NaN or Inf there is undefined behaviour in C++
// (ggml leaves it undefined too), so such input is rejected up front.
void check_finite_block(const float* x, int64_t block_index, DType dtype, const char* function) {
  for (int64_t j = 0; j < kQuantBlockElems; ++j) {
    if (!std::isfinite(x[j])) {
      throw InvalidArgument(std::string(function) + ": element " +
                            std::to_string(block_index * kQuantBlockElems + j) +
                            " is not finite; " + std::string(dtype_info(dtype).name) +
                            " can only hold finite values");
    }
  }
}

uint16_t load_u16(const std::byte* src, int64_t index) {
  uint16_t v;
  std::memcpy(&v, src + 2 * index, 2);
  return v;
}

}  // namespace

void dequantize_row(DType dtype, const void* src, float* dst, int64_t n_elems) {
  check_row(dtype, src, dst, n_elems, "dequantize_row");
  const auto* bytes = static_cast<const std::byte*>(src);
  constexpr int64_t qk = kQuantBlockElems;
  switch (dtype) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n_elems) * sizeof(float)); return;
    case DType::F16:
      for (int64_t i = 0; i < n_elems; ++i) dst[i] = f16_to_f32(load_u16(bytes, i));
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n_elems; ++i) dst[i] = bf16_to_f32(load_u16(bytes, i));
      return;
    case DType::Q8_0:
      for (int64_t b = 0; b < n_elems / qk; ++b) {
        const auto block = load_block<BlockQ8_0>(bytes, b);
        const float d = f16_to_f32(block.d);
        for (int64_t j = 0; j < qk; ++j) dst[b * qk + j] = static_cast<float>(block.qs[j]) * d;
      }
      return;
    case DType::Q4_0:
      for (int64_t b = 0; b < n_elems / qk; ++b) {
        const auto block = load_block<BlockQ4_0>(bytes, b);
        const float d = f16_to_f32(block.d);
        for (int64_t j = 0; j < qk / 2; ++j) {
          const int x0 = (block.qs[j] & 0x0f) - 8;
          const int x1 = (block.qs[j] >> 4) - 8;
          dst[b * qk + j] = static_cast<float>(x0) * d;
          dst[b * qk + j + qk / 2] = static_cast<float>(x1) * d;
        }
      }
      return;
    case DType::Q4_1:
      for (int64_t b = 0; b < n_elems / qk; ++b) {
        const auto block = load_block<BlockQ4_1>(bytes, b);
        const float d = f16_to_f32(block.d);
        const float m = f16_to_f32(block.m);
        for (int64_t j = 0; j < qk / 2; ++j) {
          const int x0 = block.qs[j] & 0x0f;
          const int x1 = block.qs[j] >> 4;
          dst[b * qk + j] = static_cast<float>(x0) * d + m;
          dst[b * qk + j + qk / 2] = static_cast<float>(x1) * d + m;
        }
      }
      return;
    case DType::Q3_0:
    case DType::Q3_1:
      // q3_code: low 2 bits from qs[j % 8] at bit 2 * (j / 8), third bit = bit j of qh.
      // Q3_0: d * (q - 4); Q3_1: d * q + m.
      for (int64_t b = 0; b < n_elems / qk; ++b) {
        if (dtype == DType::Q3_1) {
          const auto block = load_block<BlockQ3_1>(bytes, b);
          const float d = f16_to_f32(block.d), m = f16_to_f32(block.m);
          for (int j = 0; j < qk; ++j) dst[b * qk + j] = static_cast<float>(q3_code(block.qh, block.qs, j)) * d + m;
        } else {
          const auto block = load_block<BlockQ3_0>(bytes, b);
          const float d = f16_to_f32(block.d);
          for (int j = 0; j < qk; ++j) dst[b * qk + j] = static_cast<float>(q3_code(block.qh, block.qs, j) - 4) * d;
        }
      }
      return;
    case DType::Q5_0:
    case DType::Q5_1:
      // Element j < 16: low nibble of qs[j]; element j + 16: its high nibble; the fifth bit of
      // element i is bit i of qh (little-endian). Q5_0: d * (q - 16); Q5_1: d * q + m.
      for (int64_t b = 0; b < n_elems / qk; ++b) {
        const bool has_min = dtype == DType::Q5_1;
        uint16_t d_bits, m_bits = 0;
        uint8_t qh_bytes[4], qs[16];
        if (has_min) {
          const auto block = load_block<BlockQ5_1>(bytes, b);
          d_bits = block.d;
          m_bits = block.m;
          std::memcpy(qh_bytes, block.qh, 4);
          std::memcpy(qs, block.qs, 16);
        } else {
          const auto block = load_block<BlockQ5_0>(bytes, b);
          d_bits = block.d;
          std::memcpy(qh_bytes, block.qh, 4);
          std::memcpy(qs, block.qs, 16);
        }
        const uint32_t qh = uint32_t{qh_bytes[0]} | uint32_t{qh_bytes[1]} << 8 | uint32_t{qh_bytes[2]} << 16 |
                            uint32_t{qh_bytes[3]} << 24;
        const float d = f16_to_f32(d_bits);
        const float m = f16_to_f32(m_bits);
        for (int64_t j = 0; j < qk / 2; ++j) {
          const int q0 = (qs[j] & 0x0f) | static_cast<int>((qh >> j) & 1) << 4;
          const int q1 = (qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1) << 4;
          dst[b * qk + j] = has_min ? static_cast<float>(q0) * d + m : static_cast<float>(q0 - 16) * d;
          dst[b * qk + j + qk / 2] = has_min ? static_cast<float>(q1) * d + m : static_cast<float>(q1 - 16) * d;
        }
      }
      return;
    case DType::Q4_K:
      // Sub-block j of a super-block: scale d * sc_j, minimum dmin * m_j; 6-bit sc/m packed
      // into 12 bytes: j < 4 in the low 6 bits of bytes j (sc) and j + 4 (m); j >= 4 in the
      // nibbles of byte j + 4 (low: sc, high: m) with their top 2 bits in the top 2 bits of
      // bytes j - 4 (sc) and j (m). qs: 4 groups of 32 bytes, each the low nibbles of
      // sub-block 2g and the high nibbles of sub-block 2g + 1.
      for (int64_t b = 0; b < n_elems / kKQuantBlockElems; ++b) {
        const auto block = load_block<BlockQ4_K>(bytes, b);
        const float d = f16_to_f32(block.d);
        const float dmin = f16_to_f32(block.dmin);
        float* y = dst + b * kKQuantBlockElems;
        for (int j = 0; j < 8; ++j) {
          const KQuantScaleMin sm = q4_k_scale_min(block.scales, j);
          const float scale = d * static_cast<float>(sm.scale);
          const float min = dmin * static_cast<float>(sm.min);
          const uint8_t* qs = block.qs + (j / 2) * 32;
          for (int l = 0; l < 32; ++l) {
            const int v = j % 2 == 0 ? qs[l] & 0x0f : qs[l] >> 4;
            y[j * 32 + l] = scale * static_cast<float>(v) - min;
          }
        }
      }
      return;
    case DType::Q6_K:
      // Each half (128 elements) uses 64 bytes of ql, 32 of qh and 8 scales: element
      // 32 * k + l (k = 0..3, l = 0..31) takes its low 4 bits from ql[l + 32 * (k % 2)]
      // (low nibble for k < 2, high for k >= 2), its high 2 bits from bits 2k..2k+1 of
      // qh[l], and scale scales[l / 16 + 2k]; value d * scale * (q - 32).
      for (int64_t b = 0; b < n_elems / kKQuantBlockElems; ++b) {
        const auto block = load_block<BlockQ6_K>(bytes, b);
        const float d = f16_to_f32(block.d);
        float* y = dst + b * kKQuantBlockElems;
        for (int half = 0; half < 2; ++half) {
          const uint8_t* ql = block.ql + 64 * half;
          const uint8_t* qh = block.qh + 32 * half;
          const int8_t* sc = block.scales + 8 * half;
          for (int k = 0; k < 4; ++k) {
            for (int l = 0; l < 32; ++l) {
              const uint8_t low_byte = ql[l + 32 * (k % 2)];
              const int low = k < 2 ? low_byte & 0x0f : low_byte >> 4;
              const int high = (qh[l] >> (2 * k)) & 3;
              const int q = (low | (high << 4)) - 32;
              y[128 * half + 32 * k + l] = d * static_cast<float>(sc[l / 16 + 2 * k]) * static_cast<float>(q);
            }
          }
        }
      }
      return;
  }
}

// =========================================================================================
// Quantization (ggml-quants.c quantize_row_q8_0_ref / q4_0_ref / q4_1_ref, same rounding)
// =========================================================================================

void pack_q3_codes(const int* codes, uint8_t* qh, uint8_t* qs) {
  std::memset(qh, 0, 4);
  std::memset(qs, 0, 8);
  for (int i = 0; i < static_cast<int>(kQuantBlockElems); ++i) {
    if (codes[i] < 0 || codes[i] > 7) {
      throw InvalidArgument("pack_q3_codes: code " + std::to_string(codes[i]) + " at " + std::to_string(i) +
                            " is outside [0, 7]");
    }
    qs[i % 8] = static_cast<uint8_t>(qs[i % 8] | ((codes[i] & 3) << (2 * (i / 8))));
    qh[i / 8] = static_cast<uint8_t>(qh[i / 8] | ((codes[i] >> 2) << (i % 8)));
  }
}

void write_q3_block(DType dtype, const int* codes, float d, float m, void* dst) {
  if (dtype != DType::Q3_0 && dtype != DType::Q3_1) {
    throw InvalidArgument("write_q3_block: " + std::string(dtype_info(dtype).name) + " is not Q3_0 or Q3_1");
  }
  uint8_t qh[4], qs[8];
  pack_q3_codes(codes, qh, qs);
  if (dtype == DType::Q3_0) {
    BlockQ3_0 block;
    block.d = f32_to_f16(d);
    std::memcpy(block.qh, qh, 4);
    std::memcpy(block.qs, qs, 8);
    std::memcpy(dst, &block, sizeof block);
  } else {
    BlockQ3_1 block;
    block.d = f32_to_f16(d);
    block.m = f32_to_f16(m);
    std::memcpy(block.qh, qh, 4);
    std::memcpy(block.qs, qs, 8);
    std::memcpy(dst, &block, sizeof block);
  }
}

namespace {

/// Whether `dtype` has a round-to-nearest block quantizer (quantize_block).
bool has_rtn_block(DType dtype) {
  return dtype == DType::Q8_0 || dtype == DType::Q4_0 || dtype == DType::Q4_1 ||
         dtype == DType::Q3_0 || dtype == DType::Q3_1;
}

/// One block of kQuantBlockElems finite floats x into `dtype` (has_rtn_block) at dst: the one
/// round-to-nearest quantizer (quantize_block, quantize_row, chapter 03's Tasks 2-3).
void encode_block(DType dtype, const float* x, std::byte* dst) {
  constexpr int64_t qk = kQuantBlockElems;
  switch (dtype) {
    case DType::Q8_0: {
      float amax = 0.0f;
      for (int64_t j = 0; j < qk; ++j) amax = std::max(amax, std::fabs(x[j]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;  // multiply by 1/d, as ggml does, never divide
      BlockQ8_0 block;
      block.d = f32_to_f16(d);
      for (int64_t j = 0; j < qk; ++j) block.qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
      store_block(dst, 0, block);
      return;
    }
    case DType::Q4_0: {
      // The element of largest magnitude, sign kept: it maps to q = 0 (value -8 * d),
      // which uses the asymmetric end of the [-8, 7] range.
      float amax = 0.0f;
      float max = 0.0f;
      for (int64_t j = 0; j < qk; ++j) {
        if (amax < std::fabs(x[j])) {
          amax = std::fabs(x[j]);
          max = x[j];
        }
      }
      const float d = max / -8.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      BlockQ4_0 block;
      block.d = f32_to_f16(d);
      for (int64_t j = 0; j < qk / 2; ++j) {  // element j in the low nibble, j + 16 in the high
        const float x0 = x[j] * id;
        const float x1 = x[j + qk / 2] * id;
        const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 8.5f)));  // truncates
        const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 8.5f)));
        block.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
      }
      store_block(dst, 0, block);
      return;
    }
    case DType::Q4_1: {
      float min = FLT_MAX;
      float max = -FLT_MAX;
      for (int64_t j = 0; j < qk; ++j) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
      }
      const float d = (max - min) / 15.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      BlockQ4_1 block;
      block.d = f32_to_f16(d);
      block.m = f32_to_f16(min);
      for (int64_t j = 0; j < qk / 2; ++j) {
        const float x0 = (x[j] - min) * id;
        const float x1 = (x[j + qk / 2] - min) * id;
        const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 0.5f)));
        const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 0.5f)));
        block.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
      }
      store_block(dst, 0, block);
      return;
    }
    case DType::Q3_0:
    case DType::Q3_1: {
      // Round to nearest like Q4_0 / Q4_1 on 8 levels: Q3_0 maps the element of largest
      // magnitude to q = 0 (d = max / -4), Q3_1 spans [min, max] (d = (max - min) / 7).
      int codes[qk];
      float d = 0.0f, min = 0.0f;
      if (dtype == DType::Q3_0) {
        float amax = 0.0f, max = 0.0f;
        for (int64_t j = 0; j < qk; ++j) {
          if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
          }
        }
        d = max / -4.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int64_t j = 0; j < qk; ++j)
          codes[j] = std::clamp(static_cast<int>(std::nearbyint(x[j] * id)) + 4, 0, 7);
      } else {
        min = *std::min_element(x, x + qk);
        const float max = *std::max_element(x, x + qk);
        d = (max - min) / 7.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int64_t j = 0; j < qk; ++j)
          codes[j] = std::clamp(static_cast<int>(std::nearbyint((x[j] - min) * id)), 0, 7);
      }
      write_q3_block(dtype, codes, d, min, dst);
      return;
    }
    default: break;
  }
  LIO_CHECK(false,
            "encode_block: no round-to-nearest block for " + std::string(dtype_info(dtype).name));
}

}  // namespace

void quantize_block(DType dtype, const float* x, void* dst) {
  if (!has_rtn_block(dtype)) {
    throw UnsupportedError(
        "quantize_block: " + std::string(dtype_info(dtype).name) +
        " has no round-to-nearest block (quantize_block writes Q8_0, Q4_0, Q4_1, Q3_0, Q3_1)");
  }
  if (x == nullptr || dst == nullptr) throw InvalidArgument("quantize_block: null buffer");
  check_finite_block(x, 0, dtype, "quantize_block");
  encode_block(dtype, x, static_cast<std::byte*>(dst));
}

void quantize_row(DType dtype, const float* src, void* dst, int64_t n_elems) {
  check_row(dtype, src, dst, n_elems, "quantize_row");
  auto* bytes = static_cast<std::byte*>(dst);
  switch (dtype) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n_elems) * sizeof(float)); return;
    case DType::F16:
      for (int64_t i = 0; i < n_elems; ++i) {
        const uint16_t v = f32_to_f16(src[i]);
        std::memcpy(bytes + 2 * i, &v, 2);
      }
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n_elems; ++i) {
        const uint16_t v = f32_to_bf16(src[i]);
        std::memcpy(bytes + 2 * i, &v, 2);
      }
      return;
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q3_0:
    case DType::Q3_1: {
      const int64_t block_bytes = dtype_info(dtype).block_bytes;
      for (int64_t b = 0; b < n_elems / kQuantBlockElems; ++b) {
        const float* x = src + b * kQuantBlockElems;
        check_finite_block(x, b, dtype, "quantize_row");
        encode_block(dtype, x, bytes + b * block_bytes);
      }
      return;
    }
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q6_K:
      throw UnsupportedError("quantize_row: LIO reads " + std::string(dtype_info(dtype).name) +
                             " but has no quantizer for it (lio quantize writes Q8_0, Q4_0, Q4_1, Q3_0, Q3_1)");
  }
}

}  // namespace lio
