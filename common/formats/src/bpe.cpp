// bpe.cpp — byte-pair encoding by merge rank: the merge list's "left right" line format and
// the merge loop Tokenizer::Impl::bpe runs on each pre-tokenized piece.
//
// Source: GPT-2 encoder.py (Radford et al. 2019) bpe(); llama.cpp llm_tokenizer_bpe_session.
#include <functional>
#include <queue>

#include "byte_level.h"
#include "tokenizer_impl.h"

namespace lio {
namespace tokenizer_detail {

std::pair<std::string, std::string> split_merge(const std::string& line) {
  const size_t space = line.find(' ', 1);
  if (space == std::string::npos) return {};
  return {line.substr(0, space), line.substr(space + 1)};
}

}  // namespace tokenizer_detail

using tokenizer_detail::ByteUnicodeMap;
using tokenizer_detail::byte_unicode_map;
using tokenizer_detail::pair_key;

/// BPE on one pre-tokenized piece (raw bytes): start from one symbol per byte, repeatedly
/// merge the adjacent pair of lowest merge rank (leftmost on ties), as GPT-2's bpe() does.
/// A linked list plus a min-heap of candidate pairs makes it O(n log n) in the piece length
/// (llama.cpp llm_tokenizer_bpe_session uses the same scheme).
void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  const ByteUnicodeMap& map = byte_unicode_map();
  if (ignore_merges) {
    std::string encoded;
    for (const char c : piece) encoded += map.byte_to_utf8[static_cast<unsigned char>(c)];
    auto it = text_to_id.find(encoded);
    if (it != text_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  const auto n = static_cast<int32_t>(piece.size());
  std::vector<Symbol> symbols(piece.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_token[static_cast<unsigned char>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }
  struct Candidate {
    int32_t rank;
    int32_t left;  // symbol index of the left half
    int32_t left_id;
    int32_t right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push_pair = [&](int32_t left) {
    if (left < 0 || symbols[left].next < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[l.next];
    if (l.id < 0 || r.id < 0) return;
    auto it = merges.find(pair_key(l.id, r.id));
    if (it != merges.end()) heap.push({it->second.rank, left, l.id, r.id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = symbols[c.left];
    // Stale if either half was merged into something else since the pair was pushed.
    if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) continue;
    const int32_t right_index = left.next;
    Symbol& right = symbols[right_index];
    left.id = merges.at(pair_key(c.left_id, c.right_id)).result_id;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.id = -2;  // dead
    push_pair(left.prev);
    push_pair(c.left);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    if (symbols[i].id >= 0) {
      out.push_back(symbols[i].id);
    } else if (unk >= 0) {
      out.push_back(unk);  // a byte missing from the vocabulary
    }
  }
}

}  // namespace lio
