// fuzz_tokenizer_json.cpp — libFuzzer target: any bytes as a Hugging Face tokenizer.json
// (Tokenizer::from_hf_json: the model's vocab and merges, added tokens, pre-tokenizer, decoder).
// An accepted file must then encode and decode a fixed text without crashing.
// Seeds: corpus/tokenizer_json (tiny BPE tokenizers and a SentencePiece-style one). Dictionary:
// dict/json.dict.
#include <cstddef>
#include <cstdint>

#include "fuzz_support.h"
#include "lio/error.h"
#include "lio/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static lio::fuzz::InputFile file;
  try {
    const lio::Tokenizer tok = lio::Tokenizer::from_hf_json(file.write(data, size));
    const std::vector<int32_t> ids = tok.encode("The quick brown fox, 안녕 <|im_start|>\n", true, true);
    (void)tok.decode(ids, /*render_special=*/true);
  } catch (const lio::Error&) {
  }
  return 0;
}
