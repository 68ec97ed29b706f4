// gguf_format.h — private to the GGUF reader and writer: the layout constants both sides must
// agree on (magic, default alignment, nesting and rank limits) and the two helpers both use.
//
// Source: GGUF specification (ggml repository, docs/gguf.md).
#pragma once

#include <bit>
#include <cstdint>

#include "lio/gguf.h"

namespace lio::gguf_detail {

static_assert(std::endian::native == std::endian::little,
              "GGUF is read by memcpy of little-endian fields; big-endian hosts are unsupported");

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;   // spec: used when general.alignment is absent
constexpr uint32_t kMaxDims = 4;             // spec / GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;            // arrays of arrays nest at most this deep

/// True for a value type id the spec defines.
inline bool is_valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::F64); }

/// `n` rounded up to a multiple of `alignment` (> 0).
inline uint64_t align_up(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

}  // namespace lio::gguf_detail
