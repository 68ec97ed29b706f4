// byte_level.h — private to the tokenizer: GPT-2's byte <-> unicode map (bytes_to_unicode),
// which lets a byte-level BPE vocabulary store any byte as a visible character, and the
// decoding of vocabulary strings back to raw bytes.
//
// Source: GPT-2 encoder.py (Radford et al. 2019), bytes_to_unicode.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace lio::tokenizer_detail {

/// GPT-2 bytes_to_unicode: printable bytes (33..126, 161..172, 174..255) map to the code
/// point of the same value; the other 68 bytes map to 256, 257, ... in increasing byte order.
/// So every byte becomes a visible character and a space becomes "Ġ" (U+0120).
struct ByteUnicodeMap {
  std::array<std::string, 256> byte_to_utf8;  // byte -> UTF-8 of its code point
  std::array<int16_t, 256 + 68> cp_to_byte;   // code point -> byte, -1 if not in the image

  ByteUnicodeMap();  // fills both tables
};

/// The one map, built on first use and immutable after.
const ByteUnicodeMap& byte_unicode_map();

/// Byte-level vocabulary string -> raw bytes. Characters outside the byte map (found in
/// some vocabularies) are kept as their UTF-8.
std::string byte_level_decode(std::string_view text);

/// "<0xAB>" -> 0xAB, or -1 (SentencePiece-style byte tokens, GGUF token type 6).
int parse_byte_token(std::string_view text);

}  // namespace lio::tokenizer_detail
