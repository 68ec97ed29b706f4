// fuzz_gguf.cpp — libFuzzer target: any bytes as a GGUF model file. GgufFile::open validates
// the header, metadata and tensor table against the file's size; an accepted file then goes
// through what the loader reads before any weight: every metadata value by its typed getter,
// the model config (config_from_gguf) and the tokenizer (Tokenizer::from_gguf).
// Seeds: corpus/gguf (tiny models of every family, written by fuzz_make_seeds). Dictionary:
// dict/gguf.dict (the keys the loader looks for, the magic).
#include <cstddef>
#include <cstdint>

#include "fuzz_support.h"
#include "lio/error.h"
#include "lio/gguf.h"
#include "lio/model_config.h"
#include "lio/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static lio::fuzz::InputFile file;
  try {
    const lio::GgufFile gguf = lio::GgufFile::open(file.write(data, size));
    for (const auto& [key, value] : gguf.metadata()) {
      (void)value;
      try {  // each getter checks the value's type: a mismatch is a clean error
        (void)gguf.get_string(key);
      } catch (const lio::Error&) {
      }
      try {
        (void)gguf.get_uint(key);
      } catch (const lio::Error&) {
      }
      try {
        (void)gguf.get_float_array(key);
      } catch (const lio::Error&) {
      }
      try {
        (void)gguf.get_string_array(key);
      } catch (const lio::Error&) {
      }
    }
    int64_t bytes = 0;
    for (const lio::GgufTensorInfo& t : gguf.tensors()) bytes += t.size_bytes + (t.data != nullptr);
    (void)bytes;
    try {
      (void)lio::config_from_gguf(gguf);
    } catch (const lio::Error&) {
    }
    try {
      const lio::Tokenizer tok = lio::Tokenizer::from_gguf(gguf);
      (void)tok.encode("Hello, world! 안녕", /*parse_special=*/true, /*add_bos=*/true);
    } catch (const lio::Error&) {
    }
  } catch (const lio::Error&) {
  }
  return 0;
}
