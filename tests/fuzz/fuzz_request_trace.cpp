// fuzz_request_trace.cpp — libFuzzer target: any bytes as the --trace file chapters 04 and 05
// replay (read_request_trace: JSON Lines of prompt_tokens, output_tokens, shared_prefix). The
// first byte picks the reader's options (a default prompt length, a shared prefix); accepted
// lines must hold the lengths the format promises.
// Seeds: corpus/request_trace (bench/traces and broken lines). Dictionary: dict/json.dict.
#include <cstddef>
#include <cstdint>

#include "fuzz_support.h"
#include "lio/error.h"
#include "lio/request_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static lio::fuzz::InputFile file;
  if (size < 1) return 0;
  lio::TraceReadOptions options;
  options.default_prompt_tokens = (data[0] & 1) ? 64 : 0;
  options.shared_prefix_tokens = (data[0] & 2) ? 32 : 0;
  try {
    for (const lio::TraceRequestLine& r : lio::read_request_trace(file.write(data + 1, size - 1), options)) {
      if (r.prompt_tokens < 1 || r.output_tokens < 1) lio::fuzz::fail("accepted a length < 1");
      if (r.shared_prefix && r.prompt_tokens <= options.shared_prefix_tokens) {
        lio::fuzz::fail("accepted a shared-prefix prompt no longer than the prefix");
      }
    }
  } catch (const lio::Error&) {
  }
  return 0;
}
