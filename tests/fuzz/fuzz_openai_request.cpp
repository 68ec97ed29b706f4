// fuzz_openai_request.cpp — libFuzzer target: any bytes as the body of POST /v1/completions
// (first byte even) or POST /v1/chat/completions (odd), through lio-server's own validation
// (parse_completion_request / parse_chat_request: JSON, UTF-8, every field's type and range).
// A refusal is an ApiError (HTTP 400 naming the field) or a lio::Error; an accepted request's
// numbers must be in the ranges the engine assumes.
// Seeds: corpus/openai_request (requests of tests/server, valid and malformed). Dictionary:
// dict/openai.dict (every field name and a few values).
#include <cstddef>
#include <cstdint>

#include "api_error.h"
#include "fuzz_support.h"
#include "lio/error.h"
#include "openai_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view body = lio::fuzz::as_text(data + 1, size - 1);
  try {
    const lio::server::GenerationRequest r = (data[0] & 1) == 0 ? lio::server::parse_completion_request(body)
                                                                : lio::server::parse_chat_request(body);
    if (r.params.n < 1) lio::fuzz::fail("accepted n < 1");
    if (r.params.sampler.temperature < 0) lio::fuzz::fail("accepted a negative temperature");
    if (r.params.sampler.top_p <= 0 || r.params.sampler.top_p > 1) lio::fuzz::fail("accepted top_p outside (0, 1]");
  } catch (const lio::server::ApiError&) {
  } catch (const lio::Error&) {
  }
  return 0;
}
