// pre_tokenizer.cpp — the pre-tokenizer: which regexes a `tokenizer.ggml.pre` names, PCRE2
// compilation, and the sequential regex split Tokenizer::Impl::pre_tokenize runs on each plain
// fragment before BPE (pre_tokenizer.h).
#include "pre_tokenizer.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <string_view>

#include "lio/error.h"
#include "tokenizer_impl.h"
#include "utf8.h"

namespace lio {
namespace tokenizer_detail {

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

Regex::Regex(const std::string& pattern) : pattern_(pattern) {
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

}  // namespace tokenizer_detail

using tokenizer_detail::Regex;
using tokenizer_detail::Span;
using tokenizer_detail::utf8_valid_length;

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

}  // namespace lio
