// chat_template.cpp — renders a conversation the way the model's chat template would.
//
// Models ship a Jinja template (GGUF `tokenizer.chat_template`, tokenizer_config.json
// `chat_template`). LIO does not embed a Jinja interpreter: it recognizes the ChatML family
// (OpenAI ChatML; used by SmolLM2, Qwen2) by its "<|im_start|>" marker and renders that
// format directly, reading only the one piece of data such templates carry: a default
// system prompt written as a string literal, e.g. SmolLM2's
//   {% if loop.first and messages[0]['role'] != 'system' %}
//   {{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, ...<|im_end|>\n' }}
// Source: SmolLM2-135M-Instruct tokenizer_config.json; llama.cpp src/llama-chat.cpp
// (LLM_CHAT_TEMPLATE_CHATML detection by "<|im_start|>").
#include <optional>
#include <string>

#include "lio/error.h"
#include "lio/tokenizer.h"

namespace lio {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";

/// Undoes Jinja/Python string-literal escapes (\n, \t, \r, \\, \', \"). Templates stored in
/// GGUF usually hold real newlines, tokenizer_config.json ones may hold the escape.
std::string unescape_literal(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      default: out += c; break;  // \\ \' \" and anything else: the character itself
    }
  }
  return out;
}

/// The default system prompt of a ChatML template: the content of a quoted literal
/// '<|im_start|>system\n CONTENT <|im_end|>' (single or double quotes; the newline may be
/// real or escaped). std::nullopt when the template has none.
std::optional<std::string> default_system_prompt(const std::string& tmpl) {
  for (const char quote : {'\'', '"'}) {
    const std::string open = std::string(1, quote) + std::string(kImStart) + "system";
    for (size_t at = tmpl.find(open); at != std::string::npos; at = tmpl.find(open, at + 1)) {
      size_t i = at + open.size();
      if (tmpl.compare(i, 1, "\n") == 0 || tmpl.compare(i, 2, "\\n") == 0) {
        i += tmpl[i] == '\n' ? 1 : 2;
      } else {
        continue;  // "system" not followed by a newline: not a turn header
      }
      // Scan the literal up to <|im_end|>, honouring backslash escapes; stop at its closing quote.
      std::string raw;
      for (; i < tmpl.size(); ++i) {
        if (tmpl.compare(i, kImEnd.size(), kImEnd) == 0) return unescape_literal(raw);
        if (tmpl[i] == quote) break;
        if (tmpl[i] == '\\' && i + 1 < tmpl.size()) raw += tmpl[i++];
        raw += tmpl[i];
      }
    }
  }
  return std::nullopt;
}

void append_turn(std::string& out, std::string_view role, std::string_view content) {
  out += kImStart;
  out += role;
  out += '\n';
  out += content;
  out += kImEnd;
  out += '\n';
}

}  // namespace

std::string render_chat_template(std::string_view chat_template,
                                 std::span<const ChatMessage> messages,
                                 bool add_generation_prompt) {
  const std::string tmpl(chat_template);
  std::optional<std::string> system_prompt;
  if (tmpl.empty()) {  // a base model (Gemma 3 270M): no turns to render, and no guessing ChatML
    throw UnsupportedError(
        "the model has no chat template (tokenizer.chat_template): it is a base model; give the prompt "
        "as plain text (without --chat, or through /v1/completions)");
  }
  {
    if (tmpl.find(kImStart) == std::string::npos) {
      throw UnsupportedError(
          "chat template is not ChatML (no '<|im_start|>'); LIO renders only ChatML templates. "
          "Template starts: '" + tmpl.substr(0, 80) + "'");
    }
    system_prompt = default_system_prompt(tmpl);
  }
  std::string out;
  if (system_prompt && !messages.empty() && messages.front().role != "system") {
    append_turn(out, "system", *system_prompt);
  }
  for (const ChatMessage& m : messages) append_turn(out, m.role, m.content);
  if (add_generation_prompt) {
    out += kImStart;
    out += "assistant\n";
  }
  return out;
}

}  // namespace lio
