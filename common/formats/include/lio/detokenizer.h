// detokenizer.h — streaming detokenization: token ids in, text pieces out that never end inside
// a UTF-8 character (what a server streams to a client token by token).
#pragma once

#include <cstdint>
#include <string>

#include "lio/tokenizer.h"

namespace lio {

/// Turns a stream of token ids into text pieces that are always complete UTF-8:
/// bytes of a partial character are held back until the character completes.
class StreamingDetokenizer {
 public:
  /// Keeps a pointer to `tokenizer`, which must outlive this object.
  explicit StreamingDetokenizer(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
  /// Returns the newly completed text (possibly empty) after appending `id`.
  std::string push(int32_t id);
  /// Returns any held-back bytes (invalid trailing bytes become U+FFFD).
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;
};

}  // namespace lio
