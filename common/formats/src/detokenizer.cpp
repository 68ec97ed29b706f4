// detokenizer.cpp — StreamingDetokenizer: token ids to text pieces that never end inside a
// UTF-8 character (lio/detokenizer.h).
#include "lio/detokenizer.h"

#include <algorithm>
#include <span>

#include "utf8.h"

namespace lio {

using tokenizer_detail::sanitize_utf8;

namespace {

/// Index where a trailing, still-incomplete UTF-8 sequence starts (its lead byte announces
/// more bytes than follow, and all that follow are continuation bytes); s.size() if none.
size_t incomplete_tail_start(std::string_view s) {
  const size_t lookback = std::min<size_t>(s.size(), 3);
  for (size_t k = 1; k <= lookback; ++k) {
    const auto c = static_cast<unsigned char>(s[s.size() - k]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > k ? s.size() - k : s.size();
  }
  return s.size();
}

}  // namespace

std::string StreamingDetokenizer::push(int32_t id) {
  pending_ += tokenizer_->decode(std::span<const int32_t>(&id, 1));
  const size_t cut = incomplete_tail_start(pending_);
  std::string ready = sanitize_utf8(std::string_view(pending_).substr(0, cut));
  pending_.erase(0, cut);
  return ready;
}

std::string StreamingDetokenizer::flush() {
  std::string rest = sanitize_utf8(pending_);
  pending_.clear();
  return rest;
}

}  // namespace lio
