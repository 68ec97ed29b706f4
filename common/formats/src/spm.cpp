// spm.cpp — SentencePiece-style BPE by token score (Kudo & Richardson 2018, "SentencePiece";
// the merge loop of llama.cpp's llm_tokenizer_spm_session, GGUF tokenizer.ggml.model "llama"):
// start from one symbol per UTF-8 character, repeatedly merge the adjacent pair whose
// concatenation is a vocabulary token of the highest score (leftmost on ties), then emit each
// symbol's token, or, for a character the vocabulary lacks, its bytes as byte-fallback tokens
// <0xXX>. Spaces arrive as U+2581 "▁"
// (Tokenizer::encode escapes them), as SentencePiece stores them.
#include <algorithm>
#include <queue>
#include <string>
#include <vector>

#include "lio/error.h"
#include "tokenizer_impl.h"

namespace lio {

namespace {

/// Bytes of the UTF-8 sequence `lead` starts (1 for a continuation or invalid byte), as
/// llama.cpp's unicode_len_utf8: invalid input still tokenizes, byte by byte.
size_t utf8_len(unsigned char lead) {
  if (lead < 0x80 || lead < 0xc0) return 1;
  if (lead < 0xe0) return 2;
  if (lead < 0xf0) return 3;
  return lead < 0xf8 ? 4 : 1;
}

struct Symbol {
  size_t offset = 0;  // into the piece
  size_t n = 0;       // bytes; 0 once merged into its left neighbour
  int prev = -1, next = -1;
};

struct Bigram {
  int left = 0, right = 0;
  float score = 0;
  size_t size = 0;  // bytes of the merged text, to spot a stale entry
};

/// Highest score first; on equal scores the leftmost pair (llama.cpp's llm_bigram_spm::comparator).
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

void Tokenizer::Impl::spm(std::string_view piece, std::vector<int32_t>& out) const {
  std::vector<Symbol> symbols;
  for (size_t offs = 0; offs < piece.size();) {
    Symbol s;
    s.offset = offs;
    s.n = std::min(utf8_len(static_cast<unsigned char>(piece[offs])), piece.size() - offs);
    offs += s.n;
    s.prev = static_cast<int>(symbols.size()) - 1;
    s.next = offs == piece.size() ? -1 : static_cast<int>(symbols.size()) + 1;
    symbols.push_back(s);
  }
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  const auto text_of = [&](int left, int right) {
    const Symbol& l = symbols[static_cast<size_t>(left)];
    return std::string(piece.substr(l.offset, l.n + symbols[static_cast<size_t>(right)].n));
  };
  const auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string text = text_of(left, right);
    const auto it = text_to_id.find(text);
    if (it == text_to_id.end()) return;
    queue.push({left, right, scores[static_cast<size_t>(it->second)], text.size()});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(b.left)];
    Symbol& right = symbols[static_cast<size_t>(b.right)];
    if (left.n == 0 || right.n == 0 || left.n + right.n != b.size) continue;  // a side merged since
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }
  // Every merge made a token, so a symbol is a token unless it is one character the vocabulary
  // lacks: that one becomes its bytes' <0xXX> tokens (byte fallback). (llama.cpp's resegment
  // also splits a symbol that is no token back into its two halves; a merged symbol always is one.)
  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    const std::string_view text = piece.substr(s.offset, s.n);
    const auto it = text_to_id.find(std::string(text));
    if (it != text_to_id.end()) {
      out.push_back(it->second);
      continue;
    }
    for (const char c : text) {
      const int32_t id = byte_token[static_cast<unsigned char>(c)];
      if (id < 0) {
        throw FormatError(source + ": the vocabulary has no byte-fallback token <0x..> for byte " +
                          std::to_string(static_cast<unsigned char>(c)));
      }
      out.push_back(id);
    }
  }
}

}  // namespace lio
