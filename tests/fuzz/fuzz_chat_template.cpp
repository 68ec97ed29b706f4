// fuzz_chat_template.cpp — libFuzzer target: render_chat_template (minja, with LIO's render
// bounds) on an arbitrary template (a model file's tokenizer.chat_template) and arbitrary
// messages. Input: the template, a 0x00 byte, then messages as role 0x01 content 0x02 ..., the
// last byte's low bit choosing add_generation_prompt. Every template either renders or throws
// one of LIO's typed errors: a crash, a sanitizer report, a hang past the run's -timeout or any
// other exception is a finding (fuzz_support.h).
// Seeds: corpus/chat_template (SmolLM2's, Qwen2.5's, Qwen3's, Llama 3.2's and Gemma 3's
// templates, a self-recursive macro, broken ones); dictionary: dict/jinja.dict.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "lio/error.h"
#include "lio/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in = lio::fuzz::as_text(data, size);
  const size_t cut = in.find('\0');
  const std::string_view tmpl = in.substr(0, cut);
  std::vector<lio::ChatMessage> messages;
  bool gen = false;
  if (cut != std::string_view::npos) {
    std::string_view rest = in.substr(cut + 1);
    gen = !rest.empty() && (static_cast<uint8_t>(rest.back()) & 1) != 0;
    while (!rest.empty()) {
      const size_t a = rest.find('\x01');
      const size_t b = a == std::string_view::npos ? a : rest.find('\x02', a + 1);
      if (b == std::string_view::npos) break;
      messages.push_back({std::string(rest.substr(0, a)), std::string(rest.substr(a + 1, b - a - 1))});
      rest = rest.substr(b + 1);
    }
  }
  try {
    (void)lio::render_chat_template(tmpl, messages, gen, {"<s>", "</s>"});
  } catch (const lio::Error&) {
  }
  return 0;
}
