// chat_template.cpp — renders a conversation with the model's own Jinja chat template.
//
// Models ship their chat format as a Jinja template (GGUF `tokenizer.chat_template`,
// tokenizer_config.json `chat_template`): the template is part of the model, since the model was
// trained on exactly the text it produces. LIO renders it with minja (google/minja, MIT; the
// copy vendored in llama.cpp, see third_party/minja/README.md), with the settings Hugging Face
// transformers and llama-cpp-python give jinja2 (trim_blocks, lstrip_blocks, no trailing
// newline kept) and the variables they pass: messages, add_generation_prompt, bos_token,
// eos_token, raise_exception (minja's builtin), strftime_now.
//
// A template comes from a model file, so it is untrusted input: parse and render run on a
// thread of their own with a large stack (minja's parser recurses per nesting level and
// libstdc++'s std::regex per matched character), under minja's render limits (LIO patch:
// depth, steps, string and range sizes), and every failure becomes an InvalidArgument.
#include <pthread.h>

#include <chrono>
#include <ctime>
#include <exception>
#include <iomanip>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "lio/error.h"
#include "lio/tokenizer.h"
#include <minja/minja.hpp>  // third_party: a system include

namespace lio {
namespace {

constexpr size_t kMaxTemplateBytes = size_t{256} << 10;  // the largest templates known are ~20 KiB
constexpr size_t kRenderStackBytes = size_t{512} << 20;  // reserved, touched only as deep as used

/// Runs `fn` on a thread with a `stack_bytes` stack and rethrows what it threw.
template <class F>
void run_on_large_stack(size_t stack_bytes, F&& fn) {
  struct Job {
    std::remove_reference_t<F>* fn;
    std::exception_ptr error;
  } job{&fn, nullptr};
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) throw InternalError("chat template: pthread_attr_init failed");
  pthread_attr_setstacksize(&attr, stack_bytes);
  pthread_t thread;
  const int rc = pthread_create(
      &thread, &attr,
      [](void* p) -> void* {
        Job* j = static_cast<Job*>(p);
        try {
          (*j->fn)();
        } catch (...) {
          j->error = std::current_exception();
        }
        return nullptr;
      },
      &job);
  pthread_attr_destroy(&attr);
  if (rc != 0) {  // no thread (resource limits): render here, with the limits still in force
    fn();
    return;
  }
  pthread_join(thread, nullptr);
  if (job.error) std::rethrow_exception(job.error);
}

/// Throws InvalidArgument when brackets inside the template's tags, or its blocks ({% if %},
/// {% for %}, {% macro %}, ...), nest deeper than kMaxNesting. minja's parser takes time
/// quadratic in that depth (5,000 nested parentheses: 46 s); real templates nest a few levels.
constexpr int kMaxNesting = 64;
void check_nesting(std::string_view t) {
  int brackets = 0, blocks = 0;
  auto fail = [](const char* what, int depth) {
    throw InvalidArgument(std::string("chat template: ") + what + " nest " + std::to_string(depth) +
                          " deep, more than the " + std::to_string(kMaxNesting) + " LIO parses");
  };
  for (size_t i = 0; i + 1 < t.size(); ++i) {
    if (t[i] != '{' || (t[i + 1] != '{' && t[i + 1] != '%')) continue;
    const bool block = t[i + 1] == '%';
    const std::string_view close = block ? "%}" : "}}";
    const size_t end = t.find(close, i + 2);
    const std::string_view body = t.substr(i + 2, end == std::string_view::npos ? std::string_view::npos : end - i - 2);
    for (const char c : body) {
      if (c == '(' || c == '[' || c == '{') {
        if (++brackets > kMaxNesting) fail("brackets", brackets);
      } else if (c == ')' || c == ']' || c == '}') {
        brackets = brackets > 0 ? brackets - 1 : 0;
      }
    }
    if (block) {
      size_t k = 0;
      while (k < body.size() && (body[k] == '-' || body[k] == '~' || body[k] == '+' || body[k] == ' ' || body[k] == '\t' ||
                                 body[k] == '\n' || body[k] == '\r'))
        ++k;
      const std::string_view word = body.substr(k, body.find_first_of(" \t\n\r-%(", k) - k);
      if (word.starts_with("end")) {
        blocks = blocks > 0 ? blocks - 1 : 0;
      } else if (word == "if" || word == "for" || word == "macro" || word == "call" || word == "filter" ||
                 word == "generation" || word == "block" || (word == "set" && body.find('=') == std::string_view::npos)) {
        if (++blocks > kMaxNesting) fail("blocks", blocks);
      }
    }
    if (end == std::string_view::npos) break;
    i = end + 1;
  }
}

/// strftime_now(format): the local time formatted as Python's datetime.now().strftime does
/// (Llama 3.x templates print today's date with it).
minja::Value strftime_now_function() {
  return minja::Value::callable([](const std::shared_ptr<minja::Context>&, minja::ArgumentsValue& args) {
    args.expectArgs("strftime_now", {1, 1}, {0, 0});
    const std::string format = args.args[0].get<std::string>();
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm local{};
    localtime_r(&now, &local);
    std::ostringstream out;
    out << std::put_time(&local, format.c_str());
    return minja::Value(out.str());
  });
}

}  // namespace

std::string render_chat_template(std::string_view chat_template, std::span<const ChatMessage> messages,
                                 bool add_generation_prompt, const ChatTemplateTokens& tokens) {
  if (chat_template.empty()) {  // a base model (Gemma 3 270M): no turns to render, nothing guessed
    throw UnsupportedError(
        "the model has no chat template (tokenizer.chat_template): it is a base model; give the prompt "
        "as plain text (without --chat, or through /v1/completions)");
  }
  if (chat_template.size() > kMaxTemplateBytes) {
    throw InvalidArgument("chat template is " + std::to_string(chat_template.size()) + " bytes, more than the " +
                          std::to_string(kMaxTemplateBytes) + " LIO reads");
  }
  check_nesting(chat_template);
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  const std::string source(chat_template);
  std::string out;
  try {
    run_on_large_stack(kRenderStackBytes, [&] {
      minja::reset_limits();
      const auto root = minja::Parser::parse(source, {/*trim_blocks=*/true, /*lstrip_blocks=*/true,
                                                      /*keep_trailing_newline=*/false});
      auto context = minja::Context::make(minja::Value(nlohmann::ordered_json{
          {"messages", list}, {"add_generation_prompt", add_generation_prompt}}));
      context->set("bos_token", minja::Value(tokens.bos));
      context->set("eos_token", minja::Value(tokens.eos));
      context->set("strftime_now", strftime_now_function());
      out = root->render(context);
    });
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw InvalidArgument("chat template: rendering ran out of memory");
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (what.size() > 2000) what = what.substr(0, 2000) + " ...";
    throw InvalidArgument("chat template: " + what);
  }
  return out;
}

}  // namespace lio
