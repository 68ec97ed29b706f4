// utf8.h — private to the tokenizer: UTF-8 validation, repair (U+FFFD) and encoding of code
// points, used by encode() (input repair), the pre-tokenizer (stepping one character), the
// GPT-2 byte map and the streaming detokenizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lio::tokenizer_detail {

/// Length of the valid UTF-8 sequence starting at s[i], or 0 if none starts there
/// (bad lead byte, missing continuation, overlong form, surrogate, > U+10FFFF).
size_t utf8_valid_length(std::string_view s, size_t i);

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

/// `s` with every byte that does not start a valid UTF-8 sequence replaced by U+FFFD.
std::string sanitize_utf8(std::string_view s);

/// True when every byte of `s` belongs to a valid UTF-8 sequence.
bool is_valid_utf8(std::string_view s);

/// Appends the UTF-8 encoding of code point `cp` (at most U+10FFFF) to `out`.
void append_utf8(std::string& out, uint32_t cp);

/// Decodes one code point of valid UTF-8 at s[i], advancing i.
uint32_t next_code_point(std::string_view s, size_t& i);

}  // namespace lio::tokenizer_detail
