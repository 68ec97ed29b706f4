// grammar.cpp — structured outputs through xgrammar (lio/grammar.h).
#include "lio/grammar.h"

#include <dlpack/dlpack.h>
#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <bit>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lio/error.h"

namespace lio {

const char* grammar_kind_name(GrammarSpec::Kind kind) {
  switch (kind) {
    case GrammarSpec::Kind::None: return "none";
    case GrammarSpec::Kind::JsonObject: return "json_object";
    case GrammarSpec::Kind::JsonSchema: return "json_schema";
    case GrammarSpec::Kind::Ebnf: return "grammar";
    case GrammarSpec::Kind::Regex: return "regex";
  }
  return "unknown";
}

class CompiledGrammar {
 public:
  CompiledGrammar(xgrammar::CompiledGrammar g, int64_t vocab) : grammar(std::move(g)), vocab_size(vocab) {}
  xgrammar::CompiledGrammar grammar;
  int64_t vocab_size;
};

namespace {

/// xgrammar's vocabulary: each token as the bytes it decodes to (VocabType::RAW, whatever the
/// tokenizer's own encoding: byte-level BPE, SentencePiece with byte fallback), "" for the
/// control tokens (xgrammar's special tokens: never allowed), the end-of-generation tokens as
/// the stop tokens that end a completed match.
xgrammar::TokenizerInfo tokenizer_info(const Tokenizer& tok, int64_t vocab_size) {
  const int64_t n = tok.vocab_size();
  std::vector<std::string> vocab(static_cast<size_t>(n));
  std::vector<int32_t> stop;
  for (int64_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    if (tok.is_eog(id)) stop.push_back(id);
    if (!tok.is_control(id)) vocab[static_cast<size_t>(i)] = tok.token_bytes(id);
  }
  if (stop.empty() && tok.eos_id() >= 0) stop.push_back(tok.eos_id());
  return xgrammar::TokenizerInfo(vocab, xgrammar::VocabType::RAW, static_cast<int>(vocab_size), stop);
}

/// Depth of JSON nesting (objects and arrays) in `j`. Iterative: a 64 KiB schema of nested
/// brackets is 32,768 levels, too deep to recurse on an HTTP thread's stack.
int json_depth(const nlohmann::json& j) {
  int deepest = 0;
  std::vector<std::pair<const nlohmann::json*, int>> todo{{&j, 0}};
  while (!todo.empty()) {
    const auto [v, depth] = todo.back();
    todo.pop_back();
    if (!v->is_object() && !v->is_array()) continue;
    deepest = std::max(deepest, depth + 1);
    for (const auto& child : *v) todo.emplace_back(&child, depth + 1);
  }
  return deepest;
}

/// Throws InvalidArgument when the brackets of an EBNF grammar or a regex nest deeper than
/// kMaxGrammarNesting (outside quoted strings and character classes, and not escaped): xgrammar's
/// parsers recurse per level, and a request must not be able to overflow the stack.
void check_grammar_nesting(std::string_view src, const std::string& what) {
  int depth = 0;
  char quote = 0;
  bool in_class = false;
  for (size_t i = 0; i < src.size(); ++i) {
    const char c = src[i];
    if (c == '\\') {
      ++i;  // an escaped character is never a bracket
      continue;
    }
    if (quote) {
      if (c == quote) quote = 0;
    } else if (in_class) {
      if (c == ']') in_class = false;
    } else if (c == '[') {
      in_class = true;
    } else if ((c == '"' || c == '\'') && what == "grammar") {
      quote = c;
    } else if (c == '(' || c == '{') {
      if (++depth > kMaxGrammarNesting) {
        throw InvalidArgument(what + ": brackets nest more than " + std::to_string(kMaxGrammarNesting) +
                              " deep, more than LIO compiles");
      }
    } else if (c == ')' || c == '}') {
      depth = depth > 0 ? depth - 1 : 0;
    }
  }
}

/// A 1-D int32 DLTensor over `mask` (xgrammar's bitmask layout).
DLTensor bitmask_tensor(std::span<uint32_t> mask, int64_t& shape) {
  shape = static_cast<int64_t>(mask.size());
  DLTensor t{};
  t.data = mask.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = DLDataType{kDLInt, 32, 1};
  t.shape = &shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  return t;
}

}  // namespace

struct GrammarCompiler::Impl {
  explicit Impl(const xgrammar::TokenizerInfo& info)
      : compiler(info, /*max_threads=*/1, /*cache_enabled=*/true, /*max_memory_bytes=*/int64_t{256} << 20) {}
  xgrammar::GrammarCompiler compiler;
};

GrammarCompiler::GrammarCompiler(const Tokenizer& tokenizer, int64_t vocab_size) : vocab_size_(vocab_size) {
  if (vocab_size < tokenizer.vocab_size()) {
    throw InvalidArgument("GrammarCompiler: vocab_size " + std::to_string(vocab_size) + " is below the tokenizer's " +
                          std::to_string(tokenizer.vocab_size()));
  }
  impl_ = std::make_unique<Impl>(tokenizer_info(tokenizer, vocab_size));
}

GrammarCompiler::~GrammarCompiler() = default;

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const GrammarSpec& spec) const {
  const std::string what = grammar_kind_name(spec.kind);
  if (spec.kind == GrammarSpec::Kind::None) throw InvalidArgument("grammar: nothing to compile (kind none)");
  if (spec.source.size() > kMaxGrammarSourceBytes) {
    throw InvalidArgument(what + " is " + std::to_string(spec.source.size()) + " bytes, more than the " +
                          std::to_string(kMaxGrammarSourceBytes) + " LIO compiles");
  }
  if (spec.kind == GrammarSpec::Kind::JsonSchema) {
    const nlohmann::json schema = nlohmann::json::parse(spec.source, nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded()) throw InvalidArgument("json_schema: the schema is not valid JSON");
    if (!schema.is_object() && !schema.is_boolean())
      throw InvalidArgument("json_schema: a schema is a JSON object (or true / false)");
    if (const int depth = json_depth(schema); depth > kMaxSchemaDepth) {
      throw InvalidArgument("json_schema: the schema nests " + std::to_string(depth) + " levels deep, more than the " +
                            std::to_string(kMaxSchemaDepth) + " LIO compiles");
    }
  }
  if (spec.kind == GrammarSpec::Kind::Ebnf || spec.kind == GrammarSpec::Kind::Regex) check_grammar_nesting(spec.source, what);
  std::lock_guard lock(mutex_);
  try {
    std::optional<xgrammar::CompiledGrammar> g;
    switch (spec.kind) {
      // any_whitespace = false: compact JSON (one space after ':' and ','), so a small model
      // cannot wander into runs of whitespace the grammar would otherwise allow between tokens.
      // json_object is OpenAI's "any JSON object": the schema {"type": "object"} (xgrammar's
      // builtin JSON grammar would also take an array).
      case GrammarSpec::Kind::JsonObject:
        g = impl_->compiler.CompileJSONSchema(R"({"type": "object"})", /*any_whitespace=*/false);
        break;
      case GrammarSpec::Kind::JsonSchema:
        g = impl_->compiler.CompileJSONSchema(spec.source, /*any_whitespace=*/false);
        break;
      case GrammarSpec::Kind::Ebnf: g = impl_->compiler.CompileGrammar(spec.source, "root"); break;
      case GrammarSpec::Kind::Regex: g = impl_->compiler.CompileRegex(spec.source); break;
      case GrammarSpec::Kind::None: break;
    }
    auto compiled = std::make_shared<const CompiledGrammar>(std::move(*g), vocab_size_);
    GrammarMatcher probe(compiled);  // a grammar no token can start is useless to sample from
    std::vector<uint32_t> mask(static_cast<size_t>(bitmask_words(vocab_size_)));
    if (probe.fill_next_token_mask(mask) == 0) throw InvalidArgument(what + ": no token can start the output");
    return compiled;
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw InvalidArgument(what + ": compiling it ran out of memory");
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (msg.size() > 2000) msg = msg.substr(0, 2000) + " ...";
    throw InvalidArgument(what + ": " + msg);
  }
}

struct GrammarMatcher::Impl {
  explicit Impl(std::shared_ptr<const CompiledGrammar> g)
      : grammar(std::move(g)),
        matcher(grammar->grammar, std::nullopt, /*terminate_without_stop_token=*/false) {}
  std::shared_ptr<const CompiledGrammar> grammar;
  xgrammar::GrammarMatcher matcher;
  int64_t n_accepted = 0;
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar) {
  if (!grammar) throw InvalidArgument("GrammarMatcher: no grammar");
  impl_ = std::make_unique<Impl>(std::move(grammar));
}

GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

int64_t GrammarMatcher::vocab_size() const { return impl_->grammar->vocab_size; }

int64_t GrammarMatcher::fill_next_token_mask(std::span<uint32_t> mask) {
  const int64_t vocab = vocab_size();
  if (static_cast<int64_t>(mask.size()) != bitmask_words(vocab)) {
    throw InvalidArgument("fill_next_token_mask: " + std::to_string(mask.size()) + " words for " +
                          std::to_string(vocab) + " tokens (want " + std::to_string(bitmask_words(vocab)) + ")");
  }
  if (impl_->matcher.IsTerminated()) {
    std::fill(mask.begin(), mask.end(), 0u);
    return 0;
  }
  int64_t shape = 0;
  DLTensor t = bitmask_tensor(mask, shape);
  impl_->matcher.FillNextTokenBitmask(&t);
  // Bits past the vocabulary (the last word's tail) are not tokens.
  if (const int64_t tail = vocab % 32; tail != 0) mask.back() &= (uint32_t{1} << tail) - 1u;
  int64_t allowed = 0;
  for (const uint32_t w : mask) allowed += std::popcount(w);
  return allowed;
}

bool GrammarMatcher::accept_token(int32_t token) {
  if (token < 0 || token >= vocab_size() || impl_->matcher.IsTerminated()) return false;
  if (!impl_->matcher.AcceptToken(token)) return false;
  impl_->n_accepted += 1;
  return true;
}

void GrammarMatcher::rollback(int64_t n) {
  if (n < 0 || n > impl_->n_accepted) {
    throw InvalidArgument("GrammarMatcher::rollback: " + std::to_string(n) + " tokens, " +
                          std::to_string(impl_->n_accepted) + " accepted");
  }
  if (n == 0) return;
  impl_->matcher.Rollback(static_cast<int>(n));
  impl_->n_accepted -= n;
}

bool GrammarMatcher::is_terminated() const { return impl_->matcher.IsTerminated(); }
bool GrammarMatcher::is_completed() const { return impl_->matcher.IsCompleted(); }

}  // namespace lio
