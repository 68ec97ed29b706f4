// tokenizer_impl.h — private to the tokenizer: the vocabulary state all its parts share
// (Tokenizer::Impl), the token kinds, and the merge table's key and line format.
// The loaders (tokenizer_gguf.cpp, tokenizer_hf_json.cpp) fill an Impl and call finish();
// encoding walks it through split_special (tokenizer.cpp), pre_tokenize (pre_tokenizer.cpp)
// and bpe (bpe.cpp); decoding (tokenizer.cpp) reads it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lio/tokenizer.h"
#include "pre_tokenizer.h"

namespace lio {
namespace tokenizer_detail {

/// Token types as GGUF stores them (llama.cpp enum llama_token_type).
enum class TokenKind : uint8_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

/// The segmentation a vocabulary uses: byte-level BPE by merge rank (GGUF "gpt2", GPT-2 /
/// Llama 3 / Qwen / SmolLM2), or SentencePiece BPE by token score with byte fallback (GGUF
/// "llama", llama.cpp's LLAMA_VOCAB_TYPE_SPM: Llama 2, Mistral, Gemma).
enum class TokenizerModel : uint8_t { ByteLevelBpe, SentencePiece };

/// Splits a "left right" merge line at the first space after position 0 (llama.cpp does the
/// same, so a token starting with a literal space still parses). Empty pair on failure.
std::pair<std::string, std::string> split_merge(const std::string& line);

/// Key of the merge table: the pair (left id, right id) in one integer.
constexpr uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace tokenizer_detail

struct Tokenizer::Impl {
  std::string source;                              // file path, for messages
  tokenizer_detail::TokenizerModel model = tokenizer_detail::TokenizerModel::ByteLevelBpe;
  std::vector<float> scores;                       // SentencePiece: (vocab_size) merge priority, higher first
  bool add_space_prefix = false;                   // SentencePiece: " " before text that starts the input or follows a special token
  std::vector<std::string> tokens;                 // (vocab_size) id -> vocabulary string
  std::vector<tokenizer_detail::TokenKind> kinds;  // (vocab_size) id -> kind
  std::unordered_map<std::string, int32_t> text_to_id;
  struct Merge {
    int32_t rank;       // position in the merge list; lower merges first
    int32_t result_id;  // id of left+right
  };
  std::unordered_map<uint64_t, Merge> merges;    // pair_key(left_id, right_id) -> merge
  std::array<int32_t, 256> byte_token{};         // byte -> id of its token (BPE: its 1-char token; SentencePiece: <0xXX>), -1 if absent
  std::vector<tokenizer_detail::Regex> regexes;  // pre-tokenizer, applied in sequence
  std::vector<int32_t> special_ids;              // control/user-defined, longest text first
  std::vector<bool> eog;                         // (vocab_size)
  int32_t bos = -1;
  int32_t eos = -1;
  int32_t unk = -1;
  bool add_bos = false;
  bool ignore_merges = false;
  std::string chat_template;

  /// Builds the lookup tables once tokens, kinds, bos/eos and the pre-tokenizer are set.
  /// (tokenizer.cpp)
  void finish(const std::vector<std::string>& merge_lefts,
              const std::vector<std::string>& merge_rights,
              const std::vector<std::string>& regex_patterns);

  // Encoding, in pipeline order; each is documented where it is defined.
  void split_special(std::string_view text, bool parse_special,  // tokenizer.cpp
                     std::vector<std::pair<int32_t, tokenizer_detail::Span>>& fragments) const;
  void pre_tokenize(std::string_view text, tokenizer_detail::Span fragment,  // pre_tokenizer.cpp
                    pcre2_match_data* match, std::vector<tokenizer_detail::Span>& pieces) const;
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;  // bpe.cpp
  /// SentencePiece: `piece` (spaces already escaped to U+2581) by score merges (spm.cpp).
  /// Throws FormatError when byte fallback needs a <0xXX> token the vocabulary lacks.
  void spm(std::string_view piece, std::vector<int32_t>& out) const;
  /// Throws InvalidArgument unless `id` is in [0, vocab_size) (tokenizer.cpp).
  void check_id(int32_t id) const;
};

}  // namespace lio
