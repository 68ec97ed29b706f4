// tokenizer.cpp — byte-level BPE: vocabulary loading (GGUF, tokenizer.json), regex
// pre-tokenization with PCRE2, merge-rank BPE, special-token partitioning, decoding and
// the streaming detokenizer. Chat templates live in chat_template.cpp.
//
// Pipeline of encode(), each step a banner section below:
//   text --(invalid UTF-8 -> U+FFFD)--> partition on special-token texts
//        --> each plain fragment split by the pre-tokenizer regexes (in sequence)
//        --> each piece's bytes mapped through GPT-2's bytes_to_unicode
//        --> BPE: repeatedly merge the adjacent pair of lowest merge rank
//        --> token ids.
//
// Sources: GPT-2 encoder.py (Radford et al. 2019) for bytes_to_unicode and the merge loop;
// llama.cpp src/llama-vocab.cpp + src/unicode.cpp for the per-`tokenizer.ggml.pre` regexes,
// the sequential regex split and the special-token partition; Hugging Face tokenizers
// (tokenizers/src/pre_tokenizers, models/bpe) for the tokenizer.json format.
//
// Why one ~950-line file (STYLE.md asks for a reason past 800): the two loaders (GGUF,
// tokenizer.json) fill the same private Impl and share its finishing step and the regex
// table; splitting them out (tokenizer_load.cpp) would need a private Impl header. The
// banner sections below are the natural cut if the file grows further.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "lio/tokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "lio/error.h"
#include "lio/gguf.h"

namespace lio {
namespace {

// ============================================================================================
// Token kinds and pre-tokenizer regexes
// ============================================================================================

/// Token types as GGUF stores them (llama.cpp enum llama_token_type).
enum class TokenKind : uint8_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

// GPT-2's pre-tokenizer (encoder.py `pat`), as llama.cpp writes it.
constexpr const char* kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
// Llama-3's, with llama.cpp's case-insensitive contractions spelled out (PR #6920).
constexpr const char* kLlama3Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen2's: Llama-3's with single digits.
constexpr const char* kQwen2Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// HF ByteLevel(use_regex=true): GPT-2's plus a final `\s+`. The extra alternative only
// matches whitespace the regex above leaves as a gap, and gaps are kept, so both split alike.
constexpr const char* kHfByteLevelRegex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct PreTokenizerSpec {
  std::vector<std::string> regexes;  // applied in sequence
  bool ignore_merges = false;        // a piece that is itself a token is not BPE-merged
  bool add_bos = false;              // default when tokenizer.ggml.add_bos_token is absent
};

/// llama.cpp llama_vocab::impl::load + llm_tokenizer_bpe: `tokenizer.ggml.pre` -> regexes.
PreTokenizerSpec pre_tokenizer_for(const std::string& pre, const std::string& file) {
  static const char* const kDigitThenGpt2[] = {"smollm", "starcoder", "refact", "command-r",
                                               "codeshell", "exaone", "minerva"};
  static const char* const kGpt2Only[] = {"gpt2", "gpt-2", "phi-2", "roberta-bpe", "mpt",
                                          "olmo", "jais", "trillion"};
  static const char* const kLlama3[] = {"llama-bpe", "llama3", "llama-v3", "falcon3"};
  auto in = [&](const auto& names) {
    return std::find(std::begin(names), std::end(names), pre) != std::end(names);
  };
  if (in(kDigitThenGpt2)) return {{"\\p{N}", kGpt2Regex}, false, false};
  if (in(kGpt2Only)) return {{kGpt2Regex}, false, false};
  if (in(kLlama3)) return {{kLlama3Regex}, true, true};
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return {{kQwen2Regex}, false, false};
  if (pre.empty() || pre == "default") {
    // llama.cpp's fallback for files converted before `pre` existed.
    return {{"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2Regex, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false};
  }
  throw UnsupportedError(file + ": tokenizer.ggml.pre '" + pre +
                         "' is not supported (known: smollm, starcoder, refact, command-r, "
                         "codeshell, exaone, minerva, gpt2, gpt-2, llama-bpe, llama3, qwen2, "
                         "default)");
}

/// A compiled PCRE2 pattern (UTF + Unicode properties), JIT-compiled when available.
/// pcre2_code is read-only during matching, so one Regex may serve many threads.
class Regex {
 public:
  explicit Regex(const std::string& pattern) : pattern_(pattern) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
    if (code == nullptr) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(error_code, message.data(), message.size());
      throw UnsupportedError("pre-tokenizer regex '" + pattern + "' does not compile at offset " +
                             std::to_string(error_offset) + ": " +
                             reinterpret_cast<const char*>(message.data()));
    }
    code_.reset(code);
    // JIT is an optimization only: on failure pcre2_match falls back to the interpreter.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  }
  pcre2_code* code() const { return code_.get(); }
  const std::string& pattern() const { return pattern_; }

 private:
  struct Free {
    void operator()(pcre2_code* c) const { pcre2_code_free(c); }
  };
  std::string pattern_;
  std::unique_ptr<pcre2_code, Free> code_;
};

struct MatchDataFree {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

/// A piece of the input: byte offset and length.
struct Span {
  size_t offset = 0;
  size_t n_bytes = 0;
};

// ============================================================================================
// UTF-8 and GPT-2's byte <-> unicode map
// ============================================================================================

/// Length of the valid UTF-8 sequence starting at s[i], or 0 if none starts there
/// (bad lead byte, missing continuation, overlong form, surrogate, > U+10FFFF).
size_t utf8_valid_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
  else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
  else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLength[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

/// `s` with every byte that does not start a valid UTF-8 sequence replaced by U+FFFD.
std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_valid_length(s, i);
    if (n == 0) {
      out += kReplacementChar;
      i += 1;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_valid_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// GPT-2 bytes_to_unicode: printable bytes (33..126, 161..172, 174..255) map to the code
/// point of the same value; the other 68 bytes map to 256, 257, ... in increasing byte order.
/// So every byte becomes a visible character and a space becomes "Ġ" (U+0120).
struct ByteUnicodeMap {
  std::array<std::string, 256> byte_to_utf8;  // byte -> UTF-8 of its code point
  std::array<int16_t, 256 + 68> cp_to_byte;   // code point -> byte, -1 if not in the image

  ByteUnicodeMap() {
    cp_to_byte.fill(-1);
    uint32_t next_extra = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      const uint32_t cp = printable ? b : next_extra++;
      append_utf8(byte_to_utf8[b], cp);
      cp_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteUnicodeMap& byte_unicode_map() {
  static const ByteUnicodeMap map;  // immutable after construction
  return map;
}

/// Decodes one code point of valid UTF-8 at s[i], advancing i.
uint32_t next_code_point(std::string_view s, size_t& i) {
  const size_t n = std::max<size_t>(utf8_valid_length(s, i), 1);
  const auto c = static_cast<unsigned char>(s[i]);
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
  i += n;
  return cp;
}

/// Byte-level vocabulary string -> raw bytes. Characters outside the byte map (found in
/// some vocabularies) are kept as their UTF-8.
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

/// "<0xAB>" -> 0xAB, or -1 (SentencePiece-style byte tokens, GGUF token type 6).
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

/// Splits a "left right" merge line at the first space after position 0 (llama.cpp does the
/// same, so a token starting with a literal space still parses). Empty pair on failure.
std::pair<std::string, std::string> split_merge(const std::string& line) {
  const size_t space = line.find(' ', 1);
  if (space == std::string::npos) return {};
  return {line.substr(0, space), line.substr(space + 1)};
}

constexpr uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Texts llama.cpp treats as end-of-generation in addition to EOS (llama-vocab.cpp).
constexpr std::string_view kEogTexts[] = {
    "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>",
    "<|eom_id|>", "<|end|>",       "<end_of_turn>", "<EOT>",
};

}  // namespace

// ============================================================================================
// Vocabulary state
// ============================================================================================

struct Tokenizer::Impl {
  std::string source;                  // file path, for messages
  std::vector<std::string> tokens;     // (vocab_size) id -> vocabulary string
  std::vector<TokenKind> kinds;        // (vocab_size) id -> kind
  std::unordered_map<std::string, int32_t> text_to_id;
  struct Merge {
    int32_t rank;       // position in the merge list; lower merges first
    int32_t result_id;  // id of left+right
  };
  std::unordered_map<uint64_t, Merge> merges;  // pair_key(left_id, right_id) -> merge
  std::array<int32_t, 256> byte_token{};       // byte -> id of its 1-char token, -1 if absent
  std::vector<Regex> regexes;                  // pre-tokenizer, applied in sequence
  std::vector<int32_t> special_ids;            // control/user-defined, longest text first
  std::vector<bool> eog;                       // (vocab_size)
  int32_t bos = -1;
  int32_t eos = -1;
  int32_t unk = -1;
  bool add_bos = false;
  bool ignore_merges = false;
  std::string chat_template;

  /// Builds the lookup tables once tokens, kinds, bos/eos and the pre-tokenizer are set.
  void finish(const std::vector<std::string>& merge_lefts,
              const std::vector<std::string>& merge_rights,
              const std::vector<std::string>& regex_patterns);

  void split_special(std::string_view text, bool parse_special,
                     std::vector<std::pair<int32_t, Span>>& fragments) const;
  void pre_tokenize(std::string_view text, Span fragment, pcre2_match_data* match,
                    std::vector<Span>& pieces) const;
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void check_id(int32_t id) const;
};

void Tokenizer::Impl::finish(const std::vector<std::string>& merge_lefts,
                             const std::vector<std::string>& merge_rights,
                             const std::vector<std::string>& regex_patterns) {
  const auto n_vocab = static_cast<int32_t>(tokens.size());
  text_to_id.reserve(tokens.size());
  for (int32_t id = 0; id < n_vocab; ++id) {
    if (kinds[id] == TokenKind::Unused && tokens[id].empty()) continue;
    text_to_id.emplace(tokens[id], id);  // first id wins on duplicates, as in HF
    if (kinds[id] == TokenKind::Unknown && unk < 0) unk = id;
  }
  const ByteUnicodeMap& map = byte_unicode_map();
  for (int b = 0; b < 256; ++b) {
    auto it = text_to_id.find(map.byte_to_utf8[b]);
    byte_token[b] = it == text_to_id.end() ? -1 : it->second;
  }
  // Merges whose parts or result are not tokens can never fire (HF rejects them at load).
  merges.reserve(merge_lefts.size());
  for (size_t rank = 0; rank < merge_lefts.size(); ++rank) {
    auto left = text_to_id.find(merge_lefts[rank]);
    auto right = text_to_id.find(merge_rights[rank]);
    auto result = text_to_id.find(merge_lefts[rank] + merge_rights[rank]);
    if (left == text_to_id.end() || right == text_to_id.end() || result == text_to_id.end()) {
      continue;
    }
    merges.emplace(pair_key(left->second, right->second),
                   Merge{static_cast<int32_t>(rank), result->second});
  }
  for (const std::string& pattern : regex_patterns) regexes.emplace_back(pattern);

  for (int32_t id = 0; id < n_vocab; ++id) {
    const bool special = kinds[id] == TokenKind::Control || kinds[id] == TokenKind::UserDefined ||
                         kinds[id] == TokenKind::Unknown;
    if (special && !tokens[id].empty()) special_ids.push_back(id);
  }
  // Longest text first, ties by id, so a longer token wins over a prefix of it.
  std::stable_sort(special_ids.begin(), special_ids.end(), [&](int32_t a, int32_t b) {
    return tokens[a].size() > tokens[b].size();
  });

  eog.assign(tokens.size(), false);
  if (eos >= 0) eog[eos] = true;
  for (std::string_view text : kEogTexts) {
    auto it = text_to_id.find(std::string(text));
    if (it != text_to_id.end() && kinds[it->second] != TokenKind::Normal) eog[it->second] = true;
  }
}

void Tokenizer::Impl::check_id(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(tokens.size())) {
    throw InvalidArgument("token id " + std::to_string(id) + " is out of range [0, " +
                          std::to_string(tokens.size()) + ") for tokenizer " + source);
  }
}

// ============================================================================================
// Encoding: special tokens, regex split, BPE
// ============================================================================================

/// llama.cpp tokenizer_st_partition: for each special token, longest first, cut every
/// remaining plain fragment at each occurrence of its text. Output fragments in text order:
/// (token id, span) for a special token, (-1, span) for plain text.
void Tokenizer::Impl::split_special(std::string_view text, bool parse_special,
                                    std::vector<std::pair<int32_t, Span>>& fragments) const {
  fragments.assign(1, {-1, Span{0, text.size()}});
  if (text.empty()) fragments.clear();
  std::vector<std::pair<int32_t, Span>> next;
  for (const int32_t id : special_ids) {
    if (!parse_special && kinds[id] != TokenKind::UserDefined) continue;
    const std::string& needle = tokens[id];
    next.clear();
    bool changed = false;
    for (const auto& [frag_id, span] : fragments) {
      if (frag_id >= 0 || span.n_bytes < needle.size()) {
        next.emplace_back(frag_id, span);
        continue;
      }
      const std::string_view hay = text.substr(span.offset, span.n_bytes);
      size_t start = 0;
      for (size_t hit = hay.find(needle); hit != std::string_view::npos;
           hit = hay.find(needle, start)) {
        if (hit > start) next.emplace_back(-1, Span{span.offset + start, hit - start});
        next.emplace_back(id, Span{span.offset + hit, needle.size()});
        start = hit + needle.size();
        changed = true;
      }
      if (start < hay.size()) next.emplace_back(-1, Span{span.offset + start, hay.size() - start});
    }
    if (changed) fragments.swap(next);
  }
}

/// Splits `fragment` of `text` by each regex in turn (llama.cpp unicode_regex_split):
/// a regex cuts a piece into its matches and the unmatched gaps between them, all kept in
/// order, and the next regex runs on each resulting piece. Lookarounds see only the piece.
void Tokenizer::Impl::pre_tokenize(std::string_view text, Span fragment, pcre2_match_data* match,
                                   std::vector<Span>& pieces) const {
  pieces.assign(1, fragment);
  std::vector<Span> next;
  PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
  for (const Regex& regex : regexes) {
    next.clear();
    for (const Span& piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + piece.offset);
      size_t emitted = 0;  // end of the last piece pushed, relative to piece.offset
      size_t search = 0;
      while (search < piece.n_bytes) {
        // Input was made valid UTF-8 by encode(), so PCRE2 need not check it again.
        const int rc = pcre2_match(regex.code(), subject, piece.n_bytes, search,
                                   PCRE2_NO_UTF_CHECK, match, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          std::array<PCRE2_UCHAR, 256> message{};
          pcre2_get_error_message(rc, message.data(), message.size());
          throw InternalError("pre-tokenizer regex '" + regex.pattern() + "' failed: " +
                              reinterpret_cast<const char*>(message.data()));
        }
        const size_t begin = ovector[0];
        const size_t end = ovector[1];
        if (end == begin) {  // empty match: step one character, keep it in the gap
          search = begin + std::max<size_t>(
                               utf8_valid_length(text, piece.offset + begin), 1);
          continue;
        }
        if (begin > emitted) next.push_back({piece.offset + emitted, begin - emitted});
        next.push_back({piece.offset + begin, end - begin});
        emitted = search = end;
      }
      if (emitted < piece.n_bytes) {
        next.push_back({piece.offset + emitted, piece.n_bytes - emitted});
      }
    }
    pieces.swap(next);
  }
}

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

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special,
                                       bool add_bos) const {
  const Impl& im = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && im.bos >= 0) out.push_back(im.bos);

  std::string cleaned;
  if (!is_valid_utf8(text)) {
    cleaned = sanitize_utf8(text);
    text = cleaned;
  }
  std::vector<std::pair<int32_t, Span>> fragments;
  im.split_special(text, parse_special, fragments);

  std::unique_ptr<pcre2_match_data, MatchDataFree> match(pcre2_match_data_create(1, nullptr));
  if (!match) throw std::bad_alloc();
  std::vector<Span> pieces;
  for (const auto& [id, span] : fragments) {
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    im.pre_tokenize(text, span, match.get(), pieces);
    for (const Span& piece : pieces) im.bpe(text.substr(piece.offset, piece.n_bytes), out);
  }
  return out;
}

// ============================================================================================
// Decoding
// ============================================================================================

std::string Tokenizer::token_bytes(int32_t id) const {
  impl_->check_id(id);
  const std::string& text = impl_->tokens[id];
  switch (impl_->kinds[id]) {
    case TokenKind::Control:
    case TokenKind::UserDefined:
    case TokenKind::Unknown:
    case TokenKind::Unused:
      return text;  // stored verbatim, not byte-level encoded
    case TokenKind::Byte: {
      const int value = parse_byte_token(text);
      if (value >= 0) return std::string(1, static_cast<char>(value));
      return byte_level_decode(text);
    }
    default:
      return byte_level_decode(text);
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  for (const int32_t id : ids) {
    impl_->check_id(id);
    const TokenKind kind = impl_->kinds[id];
    if (!render_special && (kind == TokenKind::Control || kind == TokenKind::Unknown)) continue;
    out += token_bytes(id);
  }
  return out;
}

const std::string& Tokenizer::token_text(int32_t id) const {
  impl_->check_id(id);
  return impl_->tokens[id];
}

int32_t Tokenizer::token_id(std::string_view text) const {
  auto it = impl_->text_to_id.find(std::string(text));
  return it == impl_->text_to_id.end() ? -1 : it->second;
}

int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(impl_->tokens.size()); }
int32_t Tokenizer::bos_id() const { return impl_->bos; }
int32_t Tokenizer::eos_id() const { return impl_->eos; }
bool Tokenizer::add_bos_default() const { return impl_->add_bos; }

bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && id < static_cast<int32_t>(impl_->eog.size()) && impl_->eog[id];
}

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < static_cast<int32_t>(impl_->kinds.size()) &&
         impl_->kinds[id] == TokenKind::Control;
}

const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

std::string Tokenizer::apply_chat_template(std::span<const ChatMessage> messages,
                                           bool add_generation_prompt) const {
  return render_chat_template(impl_->chat_template, messages, add_generation_prompt);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

// ============================================================================================
// Loading: GGUF
// ============================================================================================

namespace {

int32_t optional_token_id(const GgufFile& file, const std::string& key, size_t n_vocab) {
  if (!file.has(key)) return -1;
  const uint64_t id = file.get_uint(key);
  if (id >= n_vocab) {
    throw FormatError(file.path() + ": " + key + " = " + std::to_string(id) +
                      " is outside the vocabulary of " + std::to_string(n_vocab) + " tokens");
  }
  return static_cast<int32_t>(id);
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  auto impl = std::make_unique<Impl>();
  impl->source = file.path();
  const std::string model = file.get_string("tokenizer.ggml.model");
  if (model != "gpt2") {
    throw UnsupportedError(file.path() + ": tokenizer.ggml.model '" + model +
                           "' is not supported (LIO implements byte-level BPE, 'gpt2')");
  }
  const std::string pre = file.has("tokenizer.ggml.pre") ? file.get_string("tokenizer.ggml.pre")
                                                         : std::string();
  const PreTokenizerSpec spec = pre_tokenizer_for(pre, file.path());

  impl->tokens = file.get_string_array("tokenizer.ggml.tokens");
  const size_t n_vocab = impl->tokens.size();
  if (n_vocab == 0) throw FormatError(file.path() + ": tokenizer.ggml.tokens is empty");
  impl->kinds.assign(n_vocab, TokenKind::Normal);
  if (file.has("tokenizer.ggml.token_type")) {
    const std::vector<int64_t> types = file.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != n_vocab) {
      throw FormatError(file.path() + ": tokenizer.ggml.token_type has " +
                        std::to_string(types.size()) + " entries, tokenizer.ggml.tokens has " +
                        std::to_string(n_vocab));
    }
    for (size_t i = 0; i < n_vocab; ++i) {
      if (types[i] < 0 || types[i] > 6) {
        throw FormatError(file.path() + ": tokenizer.ggml.token_type[" + std::to_string(i) +
                          "] = " + std::to_string(types[i]) + " is not a token type (0..6)");
      }
      impl->kinds[i] = static_cast<TokenKind>(types[i]);
    }
  }
  std::vector<std::string> lefts, rights;
  const std::vector<std::string> merges = file.get_string_array("tokenizer.ggml.merges");
  lefts.reserve(merges.size());
  rights.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    auto [left, right] = split_merge(merges[i]);
    if (left.empty() || right.empty()) {
      throw FormatError(file.path() + ": tokenizer.ggml.merges[" + std::to_string(i) + "] = '" +
                        merges[i] + "' is not 'left right'");
    }
    lefts.push_back(std::move(left));
    rights.push_back(std::move(right));
  }
  impl->bos = optional_token_id(file, "tokenizer.ggml.bos_token_id", n_vocab);
  impl->eos = optional_token_id(file, "tokenizer.ggml.eos_token_id", n_vocab);
  impl->add_bos = file.has("tokenizer.ggml.add_bos_token")
                      ? file.get_bool("tokenizer.ggml.add_bos_token")
                      : spec.add_bos;
  impl->ignore_merges = spec.ignore_merges;
  if (file.has("tokenizer.chat_template")) {
    impl->chat_template = file.get_string("tokenizer.chat_template");
  }
  impl->finish(lefts, rights, spec.regexes);
  return Tokenizer(std::move(impl));
}

// ============================================================================================
// Loading: Hugging Face tokenizer.json (+ tokenizer_config.json)
// ============================================================================================

namespace {

using nlohmann::json;

json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument("cannot open '" + path + "'");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw FormatError(path + ": not valid JSON: " + e.what());
  }
}

/// Escapes `literal` so PCRE2 matches it verbatim (for Split{pattern: {String: ...}}).
std::string regex_escape(const std::string& literal) {
  std::string out;
  for (const char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

/// Appends the regexes equivalent to one HF pre_tokenizer node. Sets `byte_level` when a
/// ByteLevel node is present.
void add_hf_pre_tokenizer(const json& node, const std::string& path,
                          std::vector<std::string>& regexes, bool& byte_level) {
  if (node.is_null()) return;
  const std::string type = node.value("type", "");
  if (type == "Sequence") {
    for (const json& child : node.at("pretokenizers")) {
      add_hf_pre_tokenizer(child, path, regexes, byte_level);
    }
  } else if (type == "Split") {
    const std::string behavior = node.value("behavior", "");
    if (behavior != "Isolated" || node.value("invert", false)) {
      throw UnsupportedError(path + ": pre_tokenizer Split with behavior '" + behavior +
                             "'" + (node.value("invert", false) ? " and invert" : "") +
                             " is not supported (only Isolated, not inverted)");
    }
    const json& pattern = node.at("pattern");
    if (pattern.contains("Regex")) {
      regexes.push_back(pattern.at("Regex").get<std::string>());
    } else if (pattern.contains("String")) {
      regexes.push_back(regex_escape(pattern.at("String").get<std::string>()));
    } else {
      throw FormatError(path + ": pre_tokenizer Split pattern has neither Regex nor String");
    }
  } else if (type == "Digits") {
    regexes.push_back(node.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+");
  } else if (type == "ByteLevel") {
    if (node.value("add_prefix_space", false)) {
      throw UnsupportedError(path + ": pre_tokenizer ByteLevel with add_prefix_space is not "
                                    "supported");
    }
    if (node.value("use_regex", true)) regexes.push_back(kHfByteLevelRegex);
    byte_level = true;
  } else {
    throw UnsupportedError(path + ": pre_tokenizer type '" + type +
                           "' is not supported (Sequence, Split, Digits, ByteLevel)");
  }
}

/// tokenizer_config.json's bos_token / eos_token: a string, {"content": ...}, or null.
std::string config_token_text(const json& config, const char* key) {
  if (!config.contains(key) || config[key].is_null()) return {};
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v["content"].get<std::string>();
  return {};
}

}  // namespace

Tokenizer Tokenizer::from_hf_json(const std::string& tokenizer_json_path) {
  auto impl = std::make_unique<Impl>();
  impl->source = tokenizer_json_path;
  const std::string& path = tokenizer_json_path;
  const json root = read_json_file(path);
  std::vector<std::string> lefts, rights, regexes;
  try {
    const json& model = root.at("model");
    const std::string type = model.value("type", "BPE");
    if (type != "BPE") {
      throw UnsupportedError(path + ": model.type '" + type + "' is not supported (only BPE)");
    }
    if (model.value("byte_fallback", false)) {
      throw UnsupportedError(path + ": BPE with byte_fallback (SentencePiece-style) is not "
                                    "supported; LIO implements byte-level BPE");
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (model.contains(key) && !model[key].is_null() && !model[key].get<std::string>().empty()) {
        throw UnsupportedError(path + ": BPE model." + key + " is not supported");
      }
    }
    if (root.contains("normalizer") && !root["normalizer"].is_null()) {
      throw UnsupportedError(path + ": normalizer '" +
                             root["normalizer"].value("type", std::string("?")) +
                             "' is not supported (byte-level BPE has none)");
    }
    impl->ignore_merges = model.value("ignore_merges", false);

    // Vocabulary: model.vocab plus added_tokens; ids may leave gaps (marked Unused).
    int64_t max_id = -1;
    for (const auto& [text, id] : model.at("vocab").items()) max_id = std::max<int64_t>(max_id, id);
    const json added = root.value("added_tokens", json::array());
    for (const json& t : added) max_id = std::max<int64_t>(max_id, t.at("id").get<int64_t>());
    if (max_id < 0) throw FormatError(path + ": model.vocab is empty");
    if (max_id >= (int64_t{1} << 31) - 1) throw FormatError(path + ": token id out of range");
    impl->tokens.assign(static_cast<size_t>(max_id + 1), std::string());
    impl->kinds.assign(static_cast<size_t>(max_id + 1), TokenKind::Unused);
    for (const auto& [text, id] : model.at("vocab").items()) {
      const int64_t i = id.get<int64_t>();
      if (i < 0) throw FormatError(path + ": model.vocab['" + text + "'] has a negative id");
      impl->tokens[i] = text;
      impl->kinds[i] = TokenKind::Normal;
    }
    for (const json& t : added) {
      const int64_t i = t.at("id").get<int64_t>();
      if (i < 0) throw FormatError(path + ": added_tokens has a negative id");
      impl->tokens[i] = t.at("content").get<std::string>();
      impl->kinds[i] = t.value("special", false) ? TokenKind::Control : TokenKind::UserDefined;
    }
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      auto& name = model["unk_token"].get_ref<const std::string&>();
      for (size_t i = 0; i < impl->tokens.size(); ++i) {
        if (impl->tokens[i] == name) impl->kinds[i] = TokenKind::Unknown;
      }
    }

    // Merges: "left right" strings (older files) or ["left", "right"] pairs (newer).
    const json& merges = model.at("merges");
    lefts.reserve(merges.size());
    rights.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      std::pair<std::string, std::string> lr;
      if (merges[i].is_string()) {
        lr = split_merge(merges[i].get<std::string>());
      } else if (merges[i].is_array() && merges[i].size() == 2) {
        lr = {merges[i][0].get<std::string>(), merges[i][1].get<std::string>()};
      }
      if (lr.first.empty() || lr.second.empty()) {
        throw FormatError(path + ": model.merges[" + std::to_string(i) + "] = " +
                          merges[i].dump() + " is not 'left right' or [left, right]");
      }
      lefts.push_back(std::move(lr.first));
      rights.push_back(std::move(lr.second));
    }

    bool byte_level = false;
    add_hf_pre_tokenizer(root.value("pre_tokenizer", json()), path, regexes, byte_level);
    if (root.contains("decoder") && root["decoder"].is_object() &&
        root["decoder"].value("type", "") == "ByteLevel") {
      byte_level = true;
    }
    if (!byte_level) {
      throw UnsupportedError(path + ": not a byte-level BPE (no ByteLevel pre_tokenizer or "
                                    "decoder); LIO implements byte-level BPE only");
    }
  } catch (const json::exception& e) {
    throw FormatError(path + ": unexpected tokenizer.json structure: " + e.what());
  }

  // tokenizer_config.json beside it: special token names, BOS policy, chat template.
  const std::filesystem::path config_path =
      std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    const json config = read_json_file(config_path.string());
    auto lookup = [&](const char* key) -> int32_t {
      const std::string text = config_token_text(config, key);
      if (text.empty()) return -1;
      for (size_t i = 0; i < impl->tokens.size(); ++i) {
        if (impl->tokens[i] == text) return static_cast<int32_t>(i);
      }
      throw FormatError(config_path.string() + ": " + key + " '" + text +
                        "' is not in the vocabulary of " + path);
    };
    impl->bos = lookup("bos_token");
    impl->eos = lookup("eos_token");
    if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
      impl->add_bos = config["add_bos_token"].get<bool>();
    }
    if (config.contains("chat_template")) {
      const json& t = config["chat_template"];
      if (t.is_string()) {
        impl->chat_template = t.get<std::string>();
      } else if (t.is_array()) {  // [{"name": "default", "template": ...}, ...]
        for (const json& entry : t) {
          if (entry.value("name", "") == "default" || impl->chat_template.empty()) {
            impl->chat_template = entry.value("template", "");
          }
        }
      }
    }
  }
  impl->finish(lefts, rights, regexes);
  return Tokenizer(std::move(impl));
}

// ============================================================================================
// Streaming detokenizer
// ============================================================================================

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
