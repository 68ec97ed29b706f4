// tokenizer_gguf.cpp — Tokenizer::from_gguf: the vocabulary, token types, merges, special ids
// and pre-tokenizer from GGUF metadata (tokenizer.ggml.*), as llama.cpp's
// llama_vocab::impl::load reads them.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lio/error.h"
#include "lio/gguf.h"
#include "lio/tokenizer.h"
#include "pre_tokenizer.h"
#include "tokenizer_impl.h"

namespace lio {

using tokenizer_detail::pre_tokenizer_for;
using tokenizer_detail::PreTokenizerSpec;
using tokenizer_detail::split_merge;
using tokenizer_detail::TokenKind;

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
  if (model != "gpt2" && model != "llama") {
    throw UnsupportedError(file.path() + ": tokenizer.ggml.model '" + model +
                           "' is not supported (LIO implements byte-level BPE, 'gpt2', and SentencePiece, 'llama')");
  }
  const bool spm = model == "llama";
  const std::string pre = file.has("tokenizer.ggml.pre") ? file.get_string("tokenizer.ggml.pre")
                                                         : std::string();
  // SentencePiece has no pre-tokenizer (llama.cpp reads `pre` only for BPE vocabularies).
  const PreTokenizerSpec spec = spm ? PreTokenizerSpec{} : pre_tokenizer_for(pre, file.path());
  if (spm) impl->model = tokenizer_detail::TokenizerModel::SentencePiece;

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
  if (spm) {
    impl->scores = file.get_float_array("tokenizer.ggml.scores");
    if (impl->scores.size() != n_vocab) {
      throw FormatError(file.path() + ": tokenizer.ggml.scores has " + std::to_string(impl->scores.size()) +
                        " entries, tokenizer.ggml.tokens has " + std::to_string(n_vocab));
    }
    impl->add_space_prefix =
        file.has("tokenizer.ggml.add_space_prefix") ? file.get_bool("tokenizer.ggml.add_space_prefix") : true;
  }
  std::vector<std::string> lefts, rights;
  const std::vector<std::string> merges =
      spm && !file.has("tokenizer.ggml.merges") ? std::vector<std::string>{}
                                                : file.get_string_array("tokenizer.ggml.merges");
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
                      : (spm || spec.add_bos);  // llama.cpp: SPM adds BOS by default
  impl->ignore_merges = spec.ignore_merges;
  if (file.has("tokenizer.chat_template")) {
    impl->chat_template = file.get_string("tokenizer.chat_template");
  }
  impl->finish(lefts, rights, spec.regexes);
  return Tokenizer(std::move(impl));
}

}  // namespace lio
