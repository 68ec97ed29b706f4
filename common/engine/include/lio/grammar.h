// grammar.h — structured outputs: a request's output constrained to a JSON schema, to any JSON
// object, or to a grammar, by masking the logits of every token that cannot continue it.
//
// The grammar engine is xgrammar (Dong et al. 2024, "XGrammar: Flexible and Efficient Structured
// Generation Engine for Large Language Models"; Apache-2.0; the C++ core of the PyPI sdist,
// built by scripts/setup.sh), the one vLLM and SGLang use. It compiles a JSON schema or an EBNF
// grammar against the vocabulary once (GrammarCompiler::compile: a pushdown automaton plus, per
// automaton state, the tokens it can always or never accept), and a per-sequence
// GrammarMatcher then answers, at each step, which of the vocab_size tokens may come next as a
// bitmask of ceil(vocab_size / 32) 32-bit words (bit t % 32 of word t / 32 set: token t allowed).
// The sampler sets every other token's logit to -inf before it samples (Sampler::set_token_mask).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "lio/tokenizer.h"

namespace lio {

/// What a request constrains its output to. OpenAI's response_format {"type": "json_object"}
/// is JsonObject (any JSON object), {"type": "json_schema", "json_schema": {"schema": S}} is
/// JsonSchema with `source` = S serialized; Ebnf is a grammar in xgrammar's EBNF (GBNF-like:
/// `root ::= "yes" | "no"`), Regex a regular expression over the output text.
struct GrammarSpec {
  /// What `source` holds.
  enum class Kind {
    None,        ///< no constraint
    JsonObject,  ///< any JSON object (source unused)
    JsonSchema,  ///< a JSON schema
    Ebnf,        ///< an EBNF grammar, root rule `root`
    Regex,       ///< a regular expression
  };
  Kind kind = Kind::None;  ///< what the output must follow
  std::string source;  ///< the schema (JSON text), the EBNF or the regex; empty for JsonObject
};

/// "none", "json_object", "json_schema", "grammar" or "regex".
const char* grammar_kind_name(GrammarSpec::Kind kind);

/// The bounds a request's schema or grammar must keep (each refused with InvalidArgument):
/// what keeps one request from making the server compile for minutes or exhaust its memory.
inline constexpr size_t kMaxGrammarSourceBytes = size_t{64} << 10;  ///< schema / EBNF / regex text
inline constexpr int kMaxSchemaDepth = 32;  ///< nesting of JSON objects and arrays in a schema
inline constexpr int kMaxGrammarNesting = 64;  ///< nesting of ( ) and { } in a grammar or regex

/// A schema or grammar compiled against one vocabulary (xgrammar::CompiledGrammar). Immutable,
/// shared by every sequence (and every sample of a request) that uses it.
class CompiledGrammar;

/// Compiles GrammarSpecs against a tokenizer's vocabulary. Thread-safe (compiles are
/// serialized; a compiled spec is cached, so a repeated schema costs a lookup).
class GrammarCompiler {
 public:
  /// `tokenizer`: the model's; `vocab_size`: the logits' width (ModelConfig::vocab_size), which
  /// may exceed the tokenizer's (padded embeddings: the extra ids are never allowed). Tokens
  /// the tokenizer marks end-of-generation (Tokenizer::is_eog) end a completed grammar; control
  /// tokens are never allowed inside one. Throws InvalidArgument if vocab_size <
  /// tokenizer.vocab_size().
  GrammarCompiler(const Tokenizer& tokenizer, int64_t vocab_size);
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  /// Compiles `spec`. Throws InvalidArgument (naming what is wrong) for kind None, a source
  /// over kMaxGrammarSourceBytes, a schema that is not JSON, nests deeper than kMaxSchemaDepth
  /// or that xgrammar cannot convert, a grammar or regex that nests deeper than
  /// kMaxGrammarNesting or does not parse, and a grammar that allows no first token at all.
  std::shared_ptr<const CompiledGrammar> compile(const GrammarSpec& spec) const;

  /// The logits' width the masks cover.
  int64_t vocab_size() const { return vocab_size_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t vocab_size_;
  mutable std::mutex mutex_;
};

/// One sequence's position in a compiled grammar (xgrammar::GrammarMatcher). Not thread-safe:
/// the engine thread owns it, with its sequence.
class GrammarMatcher {
 public:
  /// Starts at the grammar's beginning. Throws InvalidArgument if `grammar` is null.
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);
  ~GrammarMatcher();
  /// Moves the matcher's state; the moved-from matcher may only be destroyed or assigned to.
  GrammarMatcher(GrammarMatcher&&) noexcept;
  /// See the move constructor.
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;

  /// Writes the tokens allowed next into `mask`: bitmask_words(vocab_size) words, bit t % 32
  /// of word t / 32 set when token t may come next. Returns the number of allowed tokens (0
  /// only when the matcher has terminated). Throws InvalidArgument on a mask of another size.
  int64_t fill_next_token_mask(std::span<uint32_t> mask);
  /// Advances past `token`. Returns false (and stays where it was) if the grammar does not
  /// allow it there; a terminated matcher accepts nothing.
  bool accept_token(int32_t token);
  /// Undoes the last `n` accepted tokens (speculative rollback). Throws InvalidArgument if n
  /// is negative or exceeds the tokens accepted.
  void rollback(int64_t n);
  /// True once a stop token was accepted after a complete match.
  bool is_terminated() const;
  /// True when the output so far is a complete match (a stop token may come next).
  bool is_completed() const;
  /// The logits' width (the grammar's GrammarCompiler::vocab_size).
  int64_t vocab_size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// 32-bit words of a token mask over `vocab_size` tokens: ceil(vocab_size / 32).
inline int64_t bitmask_words(int64_t vocab_size) { return (vocab_size + 31) / 32; }

}  // namespace lio
