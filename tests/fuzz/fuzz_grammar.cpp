// fuzz_grammar.cpp — libFuzzer target: structured outputs' compiler and matcher (lio/grammar.h,
// xgrammar) on an arbitrary JSON schema, EBNF grammar or regex from a request, against the tiny
// model's byte-level vocabulary. Input: the first byte's low two bits choose the kind (0 a
// json_schema, 1 a grammar, 2 a regex, 3 json_object), the rest is the source. A spec that
// compiles is then walked for up to 64 tokens, each time taking the lowest allowed token (or
// the highest, by the next input bit), which must be accepted (a mask that allows a token the
// matcher then refuses aborts). Every spec either compiles or
// throws InvalidArgument: a crash, a sanitizer report, a hang past -timeout or any other
// exception is a finding (fuzz_support.h). xgrammar itself is built without the sanitizers
// (scripts/build_xgrammar.sh): a crash inside it still shows, a silent overflow there does not.
// Seeds: corpus/grammar (schemas of each JSON type, nested and with $defs, EBNF and regexes).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "lio/error.h"
#include "lio/gguf.h"
#include "lio/grammar.h"
#include "lio/tokenizer.h"
#include "tiny_model.h"

namespace {

struct Setup {
  std::unique_ptr<lio::Tokenizer> tok;
  std::unique_ptr<lio::GrammarCompiler> compiler;
  int64_t vocab = 0;
};

Setup make_setup() {
  Setup s;
  const std::string dir = lio::testing::make_temp_dir("lio_fuzz_grammar");
  const std::string path = dir + "/tiny.gguf";
  lio::testing::TinyModelSpec spec;
  spec.n_layers = 1;
  spec.d_model = 8;
  spec.n_heads = 1;
  spec.n_kv_heads = 1;
  spec.head_dim = 8;
  spec.d_ff = 8;
  lio::testing::write_tiny_gguf(path, spec);
  s.tok = std::make_unique<lio::Tokenizer>(lio::Tokenizer::from_gguf(lio::GgufFile::open(path)));
  std::filesystem::remove_all(dir);
  s.vocab = s.tok->vocab_size();
  s.compiler = std::make_unique<lio::GrammarCompiler>(*s.tok, s.vocab);
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Setup s = make_setup();
  if (size == 0) return 0;
  using Kind = lio::GrammarSpec::Kind;
  constexpr Kind kKinds[] = {Kind::JsonSchema, Kind::Ebnf, Kind::Regex, Kind::JsonObject};
  const Kind kind = kKinds[data[0] & 3u];
  const bool highest = (data[0] & 4u) != 0;
  const lio::GrammarSpec spec{kind, kind == Kind::JsonObject ? "" : std::string(lio::fuzz::as_text(data + 1, size - 1))};
  std::shared_ptr<const lio::CompiledGrammar> g;
  try {
    g = s.compiler->compile(spec);
  } catch (const lio::InvalidArgument&) {
    return 0;
  }
  lio::GrammarMatcher m(g);
  std::vector<uint32_t> mask(static_cast<size_t>(lio::bitmask_words(s.vocab)));
  for (int step = 0; step < 64 && !m.is_terminated(); ++step) {
    if (m.fill_next_token_mask(mask) == 0) break;  // a dead end: the engine ends it at EOS
    int32_t pick = -1;
    for (int64_t t = 0; t < s.vocab; ++t) {
      if ((mask[static_cast<size_t>(t / 32)] >> (t % 32)) & 1u) {
        pick = static_cast<int32_t>(t);
        if (!highest) break;
      }
    }
    if (!m.accept_token(pick)) std::abort();  // the mask allowed a token the matcher refuses
  }
  return 0;
}
