// byte_level.cpp — GPT-2's byte <-> unicode map and byte-level decoding (byte_level.h).
#include "byte_level.h"

#include "utf8.h"

namespace lio::tokenizer_detail {

ByteUnicodeMap::ByteUnicodeMap() {
  cp_to_byte.fill(-1);
  uint32_t next_extra = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    const uint32_t cp = printable ? b : next_extra++;
    append_utf8(byte_to_utf8[b], cp);
    cp_to_byte[cp] = static_cast<int16_t>(b);
  }
}

const ByteUnicodeMap& byte_unicode_map() {
  static const ByteUnicodeMap map;  // immutable after construction
  return map;
}

std::string byte_level_decode(std::string_view text) {
  const ByteUnicodeMap& map = byte_unicode_map();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    const uint32_t cp = next_code_point(text, i);
    if (cp < map.cp_to_byte.size() && map.cp_to_byte[cp] >= 0) {
      out += static_cast<char>(map.cp_to_byte[cp]);
    } else {
      out.append(text.substr(start, i - start));
    }
  }
  return out;
}

int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (const char c : text.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') value |= c - '0';
    else if (c >= 'A' && c <= 'F') value |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') value |= c - 'a' + 10;
    else return -1;
  }
  return value;
}

}  // namespace lio::tokenizer_detail
