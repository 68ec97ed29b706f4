// pre_tokenizer.h — private to the tokenizer: the pre-tokenizer, which cuts text into pieces
// before BPE. The regexes each `tokenizer.ggml.pre` names, a compiled PCRE2 pattern (Regex),
// and the byte span a piece is (Span). Impl::pre_tokenize (pre_tokenizer.cpp) applies them.
//
// Source: llama.cpp src/llama-vocab.cpp + src/unicode.cpp (the per-`pre` regexes and the
// sequential regex split); GPT-2 encoder.py `pat`.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace lio::tokenizer_detail {

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
/// Throws UnsupportedError naming `file` for an unknown `pre`.
PreTokenizerSpec pre_tokenizer_for(const std::string& pre, const std::string& file);

/// A compiled PCRE2 pattern (UTF + Unicode properties), JIT-compiled when available.
/// pcre2_code is read-only during matching, so one Regex may serve many threads.
class Regex {
 public:
  /// Compiles `pattern`. Throws UnsupportedError if PCRE2 rejects it.
  explicit Regex(const std::string& pattern);
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

}  // namespace lio::tokenizer_detail
