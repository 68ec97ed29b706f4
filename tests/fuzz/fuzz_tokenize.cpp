// fuzz_tokenize.cpp — libFuzzer target: the tokenizer's encode and streaming decode on
// arbitrary bytes, with the models' real vocabularies. The first byte picks a tokenizer and a
// mode; the rest is the text (or, in mode 3, token ids).
//   tokenizers: the tiny byte-level BPE of tests/support (always), SmolLM2-135M's (49,152
//               tokens, byte-level BPE) and Gemma 3's (262,144, SentencePiece) when
//               scripts/setup.sh has fetched them into models/.
//   properties: encode never fails on any bytes (invalid UTF-8 included); for valid UTF-8
//               text without special tokens, decode(encode(x)) == x on the byte-level BPE
//               tokenizers when the vocabulary has a token for each of x's bytes (GPT-2's
//               bytes_to_unicode makes BPE lossless; a byte without one is dropped, as
//               llama.cpp and Hugging Face tokenizers drop it: checked on ASCII for the real
//               vocabularies, on everything for the tiny one) and the streaming
//               detokenizer's pieces, joined, equal decode's output; every streamed piece is
//               complete UTF-8; any ids in range stream without a crash.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "lio/detokenizer.h"
#include "lio/error.h"
#include "lio/gguf.h"
#include "lio/tokenizer.h"
#include "tiny_model.h"

namespace {

struct Loaded {
  std::unique_ptr<lio::Tokenizer> tok;
  bool byte_level = false;  ///< decode(encode(x)) == x holds (for bytes the vocabulary has)
  /// Bytes with no token of their own: byte-level BPE drops them, as llama.cpp and Hugging
  /// Face tokenizers do (SmolLM2's vocabulary lacks some control characters, e.g. 0x13).
  std::array<bool, 256> missing{};
  bool all_bytes = false;  ///< the vocabulary has a token for every byte (the tiny one)
};

/// Marks the bytes `t` has no token for: encoding the byte alone gives nothing.
void find_missing_bytes(Loaded& t) {
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, static_cast<char>(b));
    t.missing[static_cast<size_t>(b)] = t.tok->encode(one, false, false).empty();
  }
}

std::vector<Loaded> load_tokenizers() {
  std::vector<Loaded> out;
  const std::string dir = lio::testing::make_temp_dir("lio_fuzz_tok");
  const std::string tiny = dir + "/tiny.gguf";
  lio::testing::TinyModelSpec spec;
  spec.n_layers = 1;
  spec.d_model = 8;
  spec.n_heads = 1;
  spec.n_kv_heads = 1;
  spec.head_dim = 8;
  spec.d_ff = 8;
  lio::testing::write_tiny_gguf(tiny, spec);
  out.push_back({std::make_unique<lio::Tokenizer>(lio::Tokenizer::from_gguf(lio::GgufFile::open(tiny))), true, {}, true});
  std::filesystem::remove_all(dir);
  find_missing_bytes(out.back());
  const std::string models = std::string(LIO_SOURCE_DIR) + "/models/";
  for (const auto& [name, byte_level] :
       {std::pair<const char*, bool>{"SmolLM2-135M-Instruct.Q4_1.gguf", true}, {"gemma-3-270m-q4_k_m.gguf", false}}) {
    if (!std::filesystem::exists(models + name)) continue;
    out.push_back({std::make_unique<lio::Tokenizer>(lio::Tokenizer::from_gguf(lio::GgufFile::open(models + name))),
                   byte_level});
    find_missing_bytes(out.back());
  }
  return out;
}

std::string stream(const lio::Tokenizer& tok, const std::vector<int32_t>& ids) {
  lio::StreamingDetokenizer detok(tok);
  std::string out;
  for (int32_t id : ids) {
    const std::string piece = detok.push(id);
    if (!lio::fuzz::valid_utf8(piece)) lio::fuzz::fail("a streamed piece is not complete UTF-8");
    out += piece;
  }
  const std::string tail = detok.flush();
  if (!lio::fuzz::valid_utf8(tail)) lio::fuzz::fail("flush() returned invalid UTF-8");
  return out + tail;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<Loaded> toks = load_tokenizers();
  if (size < 1) return 0;
  const Loaded& t = toks[data[0] % toks.size()];
  const int mode = (data[0] / toks.size()) % 4;
  const std::string_view text = lio::fuzz::as_text(data + 1, size - 1);
  if (mode == 3) {  // the bytes as token ids: any id in range must stream
    std::vector<int32_t> ids;
    for (size_t i = 0; i + 4 <= text.size(); i += 4) {
      uint32_t v = 0;
      for (int k = 0; k < 4; ++k) v |= static_cast<uint32_t>(static_cast<uint8_t>(text[i + k])) << (8 * k);
      ids.push_back(static_cast<int32_t>(v % static_cast<uint32_t>(t.tok->vocab_size())));
    }
    (void)stream(*t.tok, ids);
    return 0;
  }
  const bool parse_special = mode == 1;
  const std::vector<int32_t> ids = t.tok->encode(text, parse_special, /*add_bos=*/mode == 2);
  for (int32_t id : ids) {
    if (id < 0 || id >= t.tok->vocab_size()) lio::fuzz::fail("encode produced an id out of range");
  }
  // Which bytes a real vocabulary lacks is only known for ASCII: a lone byte >= 0x80 is not
  // UTF-8, and how it encodes alone says nothing of how it encodes inside a character (SmolLM2
  // has no token for 0xF1: U+5F642 loses it in LIO, llama.cpp and HF tokenizers alike). The
  // tiny vocabulary holds all 256 byte tokens by construction.
  const bool all_bytes_known = std::none_of(text.begin(), text.end(), [&](char c) {
    const auto b = static_cast<uint8_t>(c);
    return t.missing[b] || (b >= 0x80 && !t.all_bytes);
  });
  if (mode == 0 && t.byte_level && all_bytes_known && lio::fuzz::valid_utf8(text)) {
    const std::string back = t.tok->decode(ids);
    if (back != text) lio::fuzz::fail("decode(encode(x)) != x");
    if (stream(*t.tok, ids) != back) lio::fuzz::fail("the streamed pieces differ from decode()");
  }
  return 0;
}
