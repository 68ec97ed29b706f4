// tokenizer.cpp — byte-level BPE: the vocabulary's lookup tables, encode() and decoding.
// The loaders (tokenizer_gguf.cpp, tokenizer_hf_json.cpp) fill the private Impl
// (tokenizer_impl.h); chat templates live in chat_template.cpp, the streaming detokenizer in
// detokenizer.cpp.
//
// Pipeline of encode():
//   text --(invalid UTF-8 -> U+FFFD: utf8.cpp)--> partition on special-token texts (here)
//        --> each plain fragment split by the pre-tokenizer regexes, in sequence
//            (pre_tokenizer.cpp)
//        --> each piece's bytes mapped through GPT-2's bytes_to_unicode (byte_level.cpp)
//        --> BPE: repeatedly merge the adjacent pair of lowest merge rank (bpe.cpp)
//        --> token ids.
//
// Sources: GPT-2 encoder.py (Radford et al. 2019) for bytes_to_unicode and the merge loop;
// llama.cpp src/llama-vocab.cpp + src/unicode.cpp for the per-`tokenizer.ggml.pre` regexes,
// the sequential regex split and the special-token partition; Hugging Face tokenizers
// (tokenizers/src/pre_tokenizers, models/bpe) for the tokenizer.json format.
#include "lio/tokenizer.h"

#include <algorithm>
#include <memory>
#include <new>
#include <utility>

#include "byte_level.h"
#include "lio/error.h"
#include "tokenizer_impl.h"
#include "utf8.h"

namespace lio {

using tokenizer_detail::byte_level_decode;
using tokenizer_detail::byte_unicode_map;
using tokenizer_detail::ByteUnicodeMap;
using tokenizer_detail::is_valid_utf8;
using tokenizer_detail::MatchDataFree;
using tokenizer_detail::pair_key;
using tokenizer_detail::parse_byte_token;
using tokenizer_detail::sanitize_utf8;
using tokenizer_detail::Span;
using tokenizer_detail::TokenizerModel;
using tokenizer_detail::TokenKind;

namespace {

constexpr std::string_view kSpmSpace = "\xe2\x96\x81";  // U+2581 "▁", SentencePiece's space

}  // namespace

namespace {

// Texts llama.cpp treats as end-of-generation in addition to EOS (llama-vocab.cpp).
constexpr std::string_view kEogTexts[] = {
    "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>",
    "<|eom_id|>", "<|end|>",       "<end_of_turn>", "<EOT>",
};

}  // namespace

// ============================================================================================
// Vocabulary state
// ============================================================================================

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
    // SentencePiece's byte-fallback token "<0xXX>", else the byte itself as a token (llama.cpp's
    // byte_to_token); byte-level BPE's token is the byte's bytes_to_unicode character.
    static constexpr char kHex[] = "0123456789ABCDEF";
    const std::string spm_byte = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    auto it = model == TokenizerModel::SentencePiece ? text_to_id.find(spm_byte) : text_to_id.find(map.byte_to_utf8[b]);
    if (model == TokenizerModel::SentencePiece && it == text_to_id.end()) it = text_to_id.find(std::string(1, char(b)));
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

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special,
                                       bool add_bos) const {
  const Impl& im = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && im.bos >= 0) out.push_back(im.bos);

  if (im.model == TokenizerModel::SentencePiece) return encode_spm(text, parse_special, std::move(out));
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

/// SentencePiece (llama.cpp's LLAMA_VOCAB_TYPE_SPM branch of tokenize): special tokens
/// partitioned out as for BPE; each plain fragment gets a leading space when add_space_prefix
/// and it starts the text or follows a special token, has its spaces escaped to U+2581 and is
/// merged by score. No pre-tokenizer regexes, and invalid UTF-8 is not replaced: bytes the
/// vocabulary lacks become byte-fallback tokens.
std::vector<int32_t> Tokenizer::encode_spm(std::string_view text, bool parse_special, std::vector<int32_t> out) const {
  const Impl& im = *impl_;
  std::vector<std::pair<int32_t, Span>> fragments;
  im.split_special(text, parse_special, fragments);
  bool prev_special = true;
  std::string piece;
  for (const auto& [id, span] : fragments) {
    if (id >= 0) {
      out.push_back(id);
      prev_special = true;
      continue;
    }
    piece.clear();
    const std::string_view raw = text.substr(span.offset, span.n_bytes);
    if (im.add_space_prefix && prev_special) piece += kSpmSpace;
    for (const char c : raw) {
      if (c == ' ') {
        piece += kSpmSpace;
      } else {
        piece += c;
      }
    }
    im.spm(piece, out);
    prev_special = false;
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
      return impl_->model == TokenizerModel::SentencePiece ? text : byte_level_decode(text);
    }
    default:
      if (impl_->model == TokenizerModel::SentencePiece) {  // "▁" back to " " (llama_unescape_whitespace)
        std::string out;
        for (size_t i = 0; i < text.size();) {
          if (text.compare(i, kSpmSpace.size(), kSpmSpace) == 0) {
            out += ' ';
            i += kSpmSpace.size();
          } else {
            out += text[i++];
          }
        }
        return out;
      }
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
  ChatTemplateTokens tokens;
  if (bos_id() >= 0) tokens.bos = token_text(bos_id());
  if (eos_id() >= 0) tokens.eos = token_text(eos_id());
  std::string text = render_chat_template(impl_->chat_template, messages, add_generation_prompt, tokens);
  // encode() adds BOS itself where the model wants one: a template that prints bos_token first
  // (Gemma, Llama 3) would otherwise give two (llama.cpp: common_chat_templates_apply).
  if (add_bos_default() && !tokens.bos.empty() && text.starts_with(tokens.bos)) text.erase(0, tokens.bos.size());
  return text;
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

}  // namespace lio
