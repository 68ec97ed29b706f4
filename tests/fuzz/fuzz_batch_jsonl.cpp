// fuzz_batch_jsonl.cpp — libFuzzer target: any bytes as the --prompts file of `lio batch`
// (parse_batch_requests: JSON Lines, one request a line, prompt / messages / prompt_token_ids
// and sampling overrides). Refusals are InvalidArgument "NAME:LINE: ..."; each accepted request
// has exactly one prompt form.
// Seeds: corpus/batch_jsonl. Dictionary: dict/openai.dict.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "batch_requests.h"
#include "fuzz_support.h"
#include "lio/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in{std::string(lio::fuzz::as_text(data, size))};
  try {
    for (const lio::BatchRequest& r : lio::parse_batch_requests(in, "fuzz.jsonl", lio::SamplingParams{})) {
      const int forms = r.prompt.has_value() + r.messages.has_value() + r.token_ids.has_value();
      if (forms != 1) lio::fuzz::fail("an accepted line has " + std::to_string(forms) + " prompt forms");
    }
  } catch (const lio::Error&) {
  }
  return 0;
}
