// test_tokenizer.cpp — lio/tokenizer.h on tiny vocabularies: hand-computed BPE merges,
// merge-rank order against a naive GPT-2 reference, digit splitting, special tokens on and
// off, decoding and the streaming detokenizer (lio/detokenizer.h) on multilingual text,
// ChatML rendering, the tokenizer.json path against the GGUF path, and every rejected input.
//
// The tiny vocabulary (tests/support/tiny_model.h): <|endoftext|> = 0, <|im_start|> = 1,
// <|im_end|> = 2 (control), the 256 byte tokens, then one token per merge. Expected ids are
// looked up by vocabulary string ("Ġthe") so the tests do not depend on id layout.
// Conformance with llama.cpp and HF tokenizers on the real SmolLM2 vocabulary lives in
// tests/conformance/check_tokenizer.py.
#include "lio/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "lio/detokenizer.h"
#include "lio/error.h"
#include "lio/gguf.h"
#include "lio/gguf_writer.h"
#include "tiny_model.h"

namespace lio {
namespace {

namespace fs = std::filesystem;
using testing::TinyModelSpec;

// ---- helpers ------------------------------------------------------------------------------

/// A temp directory removed when the test ends.
class TempDir {
 public:
  TempDir() : path_(testing::make_temp_dir("lio-test-tokenizer")) {}
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  std::string path_;
};

Tokenizer tiny_gguf_tokenizer(const TempDir& dir, const TinyModelSpec& spec = {}) {
  const std::string path = dir.file("tiny.gguf");
  testing::write_tiny_gguf(path, spec);
  return Tokenizer::from_gguf(GgufFile::open(path));
}

/// Ids of vocabulary strings; fails the test if one is missing.
std::vector<int32_t> ids_of(const Tokenizer& tok, const std::vector<std::string>& texts) {
  std::vector<int32_t> ids;
  for (const std::string& t : texts) {
    const int32_t id = tok.token_id(t);
    EXPECT_GE(id, 0) << "token '" << t << "' not in vocabulary";
    ids.push_back(id);
  }
  return ids;
}

bool is_valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                                 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

/// Writes a tokenizer-only GGUF: the 256 GPT-2 byte tokens (byte order), then `extra`
/// tokens, then `merges`. `pre` and `model` as given.
void write_tokenizer_gguf(const std::string& path, const std::string& pre,
                          const std::vector<std::string>& extra,
                          const std::vector<std::string>& merges,
                          const std::string& model = "gpt2", int n_types_dropped = 0) {
  std::vector<std::string> tokens;
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    const uint32_t cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    tokens.push_back(s);
  }
  for (const std::string& t : extra) tokens.push_back(t);
  std::vector<int32_t> types(tokens.size() - n_types_dropped, 1);
  GgufWriter w;
  w.set("tokenizer.ggml.model", GgufValue::str(model));
  w.set("tokenizer.ggml.pre", GgufValue::str(pre));
  w.set("tokenizer.ggml.tokens", GgufValue::str_array(tokens));
  w.set("tokenizer.ggml.token_type", GgufValue::i32_array(types));
  w.set("tokenizer.ggml.merges", GgufValue::str_array(merges));
  w.write(path);
}

/// GPT-2 encoder.py bpe() on vocabulary strings: find the lowest-rank adjacent pair, merge
/// every occurrence left to right, repeat. The reference for the heap-based merge loop.
std::vector<std::string> naive_bpe(std::vector<std::string> word,
                                   const std::vector<std::string>& merges) {
  std::map<std::pair<std::string, std::string>, size_t> rank;
  for (size_t i = 0; i < merges.size(); ++i) {
    const size_t sp = merges[i].find(' ');
    rank.emplace(std::make_pair(merges[i].substr(0, sp), merges[i].substr(sp + 1)), i);
  }
  while (word.size() > 1) {
    size_t best = SIZE_MAX;
    std::pair<std::string, std::string> best_pair;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      auto it = rank.find({word[i], word[i + 1]});
      if (it != rank.end() && it->second < best) {
        best = it->second;
        best_pair = it->first;
      }
    }
    if (best == SIZE_MAX) break;
    std::vector<std::string> merged;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == best_pair.first && word[i + 1] == best_pair.second) {
        merged.push_back(word[i] + word[i + 1]);
        i += 2;
      } else {
        merged.push_back(word[i++]);
      }
    }
    word = std::move(merged);
  }
  return word;
}

const std::string kSmolTemplate =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

// A mix of scripts: Latin with accents, CJK, Hangul, emoji with ZWJ and a flag, digits.
const std::string kMultilingual =
    "Hello, wörld! 世界 안녕하세요 🙂 👨‍👩‍👧 🇰🇷 café 12345 \t\n  end  ";

// ---- BPE ----------------------------------------------------------------------------------

TEST(Tokenizer, test_tokenizer_bpe_merges_the_into_one_token) {
  TempDir dir;
  const Tokenizer tok = tiny_gguf_tokenizer(dir);  // merges "Ġ t", "h e", "Ġt he", "i n", "Ġ a"
  EXPECT_EQ(tok.encode(" the", false, false), ids_of(tok, {"Ġthe"}));
  EXPECT_EQ(tok.encode("the", false, false), ids_of(tok, {"t", "he"}));
  EXPECT_EQ(tok.encode(" in the", false, false), ids_of(tok, {"Ġ", "in", "Ġthe"}));
  EXPECT_EQ(tok.encode(" at", false, false), ids_of(tok, {"Ġa", "t"}));
  EXPECT_EQ(tok.encode("", false, false), std::vector<int32_t>{});
}

TEST(Tokenizer, test_tokenizer_bpe_lower_rank_merges_first) {
  TempDir dir;
  TinyModelSpec ab_first;
  ab_first.merges = {"a b", "b c"};
  const Tokenizer t1 = tiny_gguf_tokenizer(dir, ab_first);
  EXPECT_EQ(t1.encode("abc", false, false), ids_of(t1, {"ab", "c"}));
  TempDir dir2;
  TinyModelSpec bc_first;
  bc_first.merges = {"b c", "a b"};
  const Tokenizer t2 = tiny_gguf_tokenizer(dir2, bc_first);
  EXPECT_EQ(t2.encode("abc", false, false), ids_of(t2, {"a", "bc"}));
}

TEST(Tokenizer, test_tokenizer_bpe_matches_naive_reference_on_random_words) {
  TempDir dir;
  TinyModelSpec spec;
  spec.merges = {"a a", "a b", "b a", "aa a", "ab a", "c c", "b c", "aa b", "cc c", "ba b",
                 "aaa a", "ab c", "aab a", "bc c", "ccc cc"};
  const Tokenizer tok = tiny_gguf_tokenizer(dir, spec);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 60);
    std::string word;
    std::vector<std::string> chars;
    for (int i = 0; i < n; ++i) {
      const char c = "abc"[rng() % 3];
      word += c;
      chars.emplace_back(1, c);
    }
    const std::vector<int32_t> expected = ids_of(tok, naive_bpe(chars, spec.merges));
    EXPECT_EQ(tok.encode(word, false, false), expected) << "word '" << word << "'";
  }
}

TEST(Tokenizer, test_tokenizer_long_repeated_piece_is_fast_and_correct) {
  TempDir dir;
  TinyModelSpec spec;
  spec.merges = {"a a", "aa aa", "aaaa aaaa"};
  const Tokenizer tok = tiny_gguf_tokenizer(dir, spec);
  const std::string word(20000, 'a');  // one pre-tokenizer piece: O(n log n) merge loop
  const auto ids = tok.encode(word, false, false);
  EXPECT_EQ(ids, std::vector<int32_t>(2500, tok.token_id("aaaaaaaa")));
}

// ---- pre-tokenizer ------------------------------------------------------------------------

TEST(Tokenizer, test_tokenizer_smollm_splits_every_digit) {
  TempDir dir;
  TinyModelSpec spec;
  spec.merges = {"1 2", "12 3", "Ġ 4", "a b", "ab c"};  // never fire across digits
  const Tokenizer tok = tiny_gguf_tokenizer(dir, spec);
  EXPECT_EQ(tok.encode("12345", false, false), ids_of(tok, {"1", "2", "3", "4", "5"}));
  // " 42abc": "\p{N}" isolates 4 and 2, leaving " " and "abc" as their own pieces.
  EXPECT_EQ(tok.encode(" 42abc", false, false), ids_of(tok, {"Ġ", "4", "2", "abc"}));
}

TEST(Tokenizer, test_tokenizer_gpt2_regex_splits_words_spaces_and_contractions) {
  TempDir dir;
  const Tokenizer tok = tiny_gguf_tokenizer(dir);
  // "a  the": "\s+(?!\S)" takes the first space alone so " the" keeps its leading space.
  EXPECT_EQ(tok.encode("a  the", false, false), ids_of(tok, {"a", "Ġ", "Ġthe"}));
  // Contractions are their own pieces: "'t" is not merged with a following " the".
  EXPECT_EQ(tok.encode("'t the", false, false), ids_of(tok, {"'", "t", "Ġthe"}));
}

TEST(Tokenizer, test_tokenizer_llama_bpe_ignores_merges_for_whole_word_tokens) {
  TempDir dir;
  // "abc" is a token, but no merge sequence reaches it ("a b" only).
  write_tokenizer_gguf(dir.file("l3.gguf"), "llama-bpe", {"ab", "abc"}, {"a b"});
  write_tokenizer_gguf(dir.file("sm.gguf"), "smollm", {"ab", "abc"}, {"a b"});
  const Tokenizer l3 = Tokenizer::from_gguf(GgufFile::open(dir.file("l3.gguf")));
  const Tokenizer sm = Tokenizer::from_gguf(GgufFile::open(dir.file("sm.gguf")));
  EXPECT_EQ(l3.encode("abc", false, false), ids_of(l3, {"abc"}));
  EXPECT_EQ(sm.encode("abc", false, false), ids_of(sm, {"ab", "c"}));
  // Llama-3 groups up to three digits.
  EXPECT_EQ(l3.encode("12345", false, false).size(), 5u);  // "123" and "45" have no merges
  EXPECT_TRUE(l3.add_bos_default());  // llama.cpp's default for llama-bpe
}

// ---- special tokens ------------------------------------------------------------------------

TEST(Tokenizer, test_tokenizer_special_tokens_parsed_only_when_asked) {
  TempDir dir;
  const Tokenizer tok = tiny_gguf_tokenizer(dir);
  const std::string text = "<|im_start|>user\nhi<|im_end|>";
  const int32_t im_start = tok.token_id("<|im_start|>");
  const int32_t im_end = tok.token_id("<|im_end|>");
  std::vector<int32_t> expected = {im_start};
  for (const int32_t id : ids_of(tok, {"u", "s", "e", "r", "Ċ", "h", "i"})) expected.push_back(id);
  expected.push_back(im_end);
  EXPECT_EQ(tok.encode(text, true, false), expected);

  const std::vector<int32_t> plain = tok.encode(text, false, false);
  for (const int32_t id : plain) EXPECT_FALSE(tok.is_control(id)) << "id " << id;
  EXPECT_EQ(tok.decode(plain), text);

  // Adjacent special tokens and a partial one.
  EXPECT_EQ(tok.encode("<|im_end|><|im_start|>", true, false),
            (std::vector<int32_t>{im_end, im_start}));
  for (const int32_t id : tok.encode("<|im_end|", true, false)) EXPECT_FALSE(tok.is_control(id));
}

TEST(Tokenizer, test_tokenizer_bos_added_on_request) {
  TempDir dir;
  const Tokenizer tok = tiny_gguf_tokenizer(dir);
  EXPECT_EQ(tok.bos_id(), tok.token_id("<|im_start|>"));
  EXPECT_EQ(tok.eos_id(), tok.token_id("<|im_end|>"));
  EXPECT_FALSE(tok.add_bos_default());
  const auto ids = tok.encode(" the", false, true);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], tok.bos_id());
}

TEST(Tokenizer, test_tokenizer_is_eog_for_eos_and_chat_end_tokens) {
  TempDir dir;
  const Tokenizer tok = tiny_gguf_tokenizer(dir);
  EXPECT_TRUE(tok.is_eog(tok.token_id("<|im_end|>")));
  EXPECT_TRUE(tok.is_eog(tok.token_id("<|endoftext|>")));
  EXPECT_FALSE(tok.is_eog(tok.token_id("<|im_start|>")));
  EXPECT_FALSE(tok.is_eog(tok.token_id("Ġthe")));
  EXPECT_FALSE(tok.is_eog(-1));
  EXPECT_FALSE(tok.is_eog(static_cast<int32_t>(tok.vocab_size())));
  EXPECT_TRUE(tok.is_control(0));
  EXPECT_FALSE(tok.is_control(tok.token_id("a")));
}

// ---- decoding -----------------------------------------------------------------------------

TEST(Tokenizer, test_tokenizer_decode_round_trips_multilingual_text) {
  TempDir dir;
  const Tokenizer tok = tiny_gguf_tokenizer(dir);
  const std::vector<int32_t> ids = tok.encode(kMultilingual, false, false);
  EXPECT_EQ(tok.decode(ids), kMultilingual);
  std::string concat;
  for (const int32_t id : ids) concat += tok.token_bytes(id);
  EXPECT_EQ(concat, kMultilingual);
  EXPECT_EQ(tok.token_text(tok.token_id("Ġthe")), "Ġthe");
  EXPECT_EQ(tok.token_bytes(tok.token_id("Ġthe")), " the");
}

TEST(Tokenizer, test_tokenizer_decode_renders_control_tokens_only_when_asked) {
  TempDir dir;
  const Tokenizer tok = tiny_gguf_tokenizer(dir);
  const auto ids = tok.encode("<|im_start|>assistant\n the<|im_end|>", true, false);
  EXPECT_EQ(tok.decode(ids), "assistant\n the");
  EXPECT_EQ(tok.decode(ids, true), "<|im_start|>assistant\n the<|im_end|>");
}

TEST(Tokenizer, test_tokenizer_invalid_utf8_becomes_replacement_characters) {
  TempDir dir;
  const Tokenizer tok = tiny_gguf_tokenizer(dir);
  const std::string bad = std::string("a\xff") + "b\xe2\x82";  // stray byte, truncated char
  const auto ids = tok.encode(bad, false, false);
  EXPECT_EQ(tok.decode(ids), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Tokenizer, test_tokenizer_rejects_out_of_range_ids) {
  TempDir dir;
  const Tokenizer tok = tiny_gguf_tokenizer(dir);
  const std::vector<int32_t> bad_high = {static_cast<int32_t>(tok.vocab_size())};
  const std::vector<int32_t> bad_low = {-1};
  EXPECT_THROW(tok.decode(bad_high), InvalidArgument);
  EXPECT_THROW(tok.decode(bad_low), InvalidArgument);
  EXPECT_THROW(tok.token_text(-1), InvalidArgument);
  EXPECT_THROW(tok.token_bytes(static_cast<int32_t>(tok.vocab_size())), InvalidArgument);
  EXPECT_EQ(tok.token_id("no such token"), -1);
}

TEST(Tokenizer, test_tokenizer_streaming_never_emits_partial_utf8) {
  TempDir dir;
  const Tokenizer tok = tiny_gguf_tokenizer(dir);
  const std::string text = "한국어 🙂👨‍👩‍👧 テスト é";
  const std::vector<int32_t> ids = tok.encode(text, false, false);
  ASSERT_GT(ids.size(), 20u);  // mostly single-byte tokens: characters span several pushes
  StreamingDetokenizer stream(tok);
  std::string out;
  int n_held = 0;
  for (const int32_t id : ids) {
    const std::string piece = stream.push(id);
    EXPECT_TRUE(is_valid_utf8(piece)) << "partial UTF-8 emitted after id " << id;
    if (piece.empty()) ++n_held;
    out += piece;
  }
  EXPECT_GT(n_held, 0);  // some bytes really were held back
  out += stream.flush();
  EXPECT_EQ(out, text);
}

TEST(Tokenizer, test_tokenizer_streaming_flush_replaces_truncated_character) {
  TempDir dir;
  const Tokenizer tok = tiny_gguf_tokenizer(dir);
  // "한" is ED 95 9C, three byte tokens in the tiny vocabulary; push only the first two.
  std::vector<int32_t> ids = tok.encode("x한", false, false);
  ASSERT_EQ(ids.size(), 4u);
  ids.pop_back();
  StreamingDetokenizer stream(tok);
  std::string out;
  for (const int32_t id : ids) out += stream.push(id);
  EXPECT_EQ(out, "x");
  const std::string rest = stream.flush();
  EXPECT_TRUE(is_valid_utf8(rest));
  EXPECT_NE(rest.find("\xEF\xBF\xBD"), std::string::npos);
  EXPECT_EQ(stream.flush(), "");
}

// ---- chat template ------------------------------------------------------------------------

TEST(Tokenizer, test_tokenizer_chatml_with_default_system_prompt) {
  const std::vector<ChatMessage> user_only = {{"user", "Hi!"}};
  EXPECT_EQ(render_chat_template(kSmolTemplate, user_only, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<ChatMessage> with_system = {{"system", "Be brief."}, {"user", "Hi!"},
                                                {"assistant", "Hello."}};
  EXPECT_EQ(render_chat_template(kSmolTemplate, with_system, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n");
  EXPECT_EQ(render_chat_template(kSmolTemplate, {}, true), "<|im_start|>assistant\n");
}

TEST(Tokenizer, test_tokenizer_chatml_without_system_prompt) {
  TempDir dir;
  const Tokenizer tok = tiny_gguf_tokenizer(dir);  // plain ChatML template
  EXPECT_NE(tok.chat_template().find("<|im_start|>"), std::string::npos);
  const std::vector<ChatMessage> msgs = {{"user", "2+2?"}, {"assistant", "4"}, {"user", "ok"}};
  const std::string expected =
      "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
      "<|im_start|>user\nok<|im_end|>\n";
  EXPECT_EQ(tok.apply_chat_template(msgs, false), expected);
  EXPECT_EQ(tok.apply_chat_template(msgs, true), expected + "<|im_start|>assistant\n");
  // No template (a base model such as Gemma 3 270M): a clear error, never ChatML guessed.
  try {
    render_chat_template("", msgs, false);
    FAIL() << "an empty template rendered";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos) << e.what();
  }
}

// Any family's template renders (Jinja through minja): Llama 3's header tokens, bos_token and
// eos_token from the caller, trim_blocks / lstrip_blocks as Hugging Face sets them.
TEST(Tokenizer, test_tokenizer_renders_other_template_families) {
  const std::string llama3 =
      "{{ bos_token }}{% for message in messages %}\n"
      "  {{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + "
      "'<|eot_id|>' }}\n"
      "{% endfor %}\n"
      "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
  const std::vector<ChatMessage> msgs = {{"system", "Be brief. "}, {"user", "hi"}};
  EXPECT_EQ(render_chat_template(llama3, msgs, true, {"<|begin_of_text|>", "<|eot_id|>"}),
            "<|begin_of_text|>  <|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\n"
            "  <|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>\n"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");  // jinja2 3.1's rendering
}

// The template's own errors and LIO's bounds on a render are InvalidArgument (a 400 in
// lio-server), naming the template's message; never a crash or a hang.
TEST(Tokenizer, test_tokenizer_template_errors_are_invalid_argument) {
  const std::vector<ChatMessage> msgs = {{"user", "a"}, {"user", "b"}};
  auto error_of = [&](const std::string& tmpl) -> std::string {
    try {
      render_chat_template(tmpl, msgs, true);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "(rendered)";
  };
  const std::string alternate =
      "{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant') }}{% endif %}{% endfor %}";
  EXPECT_NE(error_of(alternate).find("Conversation roles must alternate"), std::string::npos) << error_of(alternate);
  EXPECT_NE(error_of("{% for m in messages %}{{ m['role'] }").find("chat template:"), std::string::npos);  // unclosed
  EXPECT_NE(error_of("{% if x %}").find("chat template:"), std::string::npos);                              // no endif
  // A macro that calls itself without end, a range that never ends, a string past memory.
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("nested deeper"), std::string::npos);
  EXPECT_NE(error_of("{% for i in range(5, 0, 0) %}x{% endfor %}").find("step must not be zero"), std::string::npos);
  EXPECT_NE(error_of("{{ 'ab' * 4000000000 }}").find("string repetition"), std::string::npos);
  EXPECT_NE(error_of("{% for i in range(100000000000) %}{% endfor %}").find("range()"), std::string::npos);
  EXPECT_NE(error_of("{% for i in range(60000) %}{% for j in range(60000) %}{% endfor %}{% endfor %}").find("steps"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
                .find("longer than"),
            std::string::npos);
  EXPECT_NE(error_of("{{ ('x' * 4000000).replace('x', 'yy') }}").find("longer than"), std::string::npos);
  // Nesting past 64 levels is refused before parsing (minja's parser is quadratic in it).
  EXPECT_NE(error_of("{{ " + std::string(65, '(') + "1" + std::string(65, ')') + " }}").find("brackets nest"),
            std::string::npos);
  std::string ifs;
  for (int i = 0; i < 65; ++i) ifs += "{% if true %}";
  for (int i = 0; i < 65; ++i) ifs += "{% endif %}";
  EXPECT_NE(error_of(ifs).find("blocks nest"), std::string::npos);
  EXPECT_EQ(render_chat_template("{{ " + std::string(60, '(') + "1" + std::string(60, ')') + " }}", msgs, true), "1");
  EXPECT_THROW(render_chat_template(std::string(300 << 10, 'x'), msgs, true), InvalidArgument);  // > 256 KiB
}

// ---- tokenizer.json -----------------------------------------------------------------------

TEST(Tokenizer, test_tokenizer_hf_json_matches_gguf) {
  TempDir dir;
  TinyModelSpec spec;
  spec.merges = {"Ġ t", "h e", "Ġt he", "i n", "Ġ a", "Ġ Ġ", "ĠĠ Ġ", "e n", "Ġ w", "o r", "Ġw or"};
  testing::write_tiny_gguf(dir.file("tiny.gguf"), spec);
  testing::write_tiny_hf_dir(dir.file("hf"), spec);
  const Tokenizer gguf = Tokenizer::from_gguf(GgufFile::open(dir.file("tiny.gguf")));
  const Tokenizer hf = Tokenizer::from_hf_json(dir.file("hf") + "/tokenizer.json");
  ASSERT_EQ(hf.vocab_size(), gguf.vocab_size());
  EXPECT_EQ(hf.bos_id(), gguf.bos_id());
  EXPECT_EQ(hf.eos_id(), gguf.eos_id());
  EXPECT_EQ(hf.add_bos_default(), gguf.add_bos_default());
  EXPECT_EQ(hf.chat_template(), gguf.chat_template());
  for (int32_t id = 0; id < gguf.vocab_size(); ++id) {
    ASSERT_EQ(hf.token_text(id), gguf.token_text(id));
    ASSERT_EQ(hf.is_control(id), gguf.is_control(id)) << "id " << id;
    ASSERT_EQ(hf.is_eog(id), gguf.is_eog(id)) << "id " << id;
  }
  const std::vector<std::string> texts = {
      kMultilingual, " the world in a    then\n\n\tthe", "<|im_start|>user\n 123 the<|im_end|>",
      "don't WE'LL 3.14159", ""};
  for (const std::string& t : texts) {
    for (const bool special : {false, true}) {
      EXPECT_EQ(hf.encode(t, special, false), gguf.encode(t, special, false)) << t;
    }
  }
}

TEST(Tokenizer, test_tokenizer_hf_json_split_regex_and_array_merges) {
  TempDir dir;
  // Newer tokenizer.json layout: merges as [left, right] pairs; Llama-3-style Split + a
  // ByteLevel without its own regex; an added non-special (user-defined) token.
  const std::string json = R"({
    "added_tokens": [{"id": 6, "content": "<sep>", "special": false},
                     {"id": 7, "content": "<eos>", "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}|\\p{L}+|\\s+"},
       "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"1": 0, "2": 1, "a": 2, "b": 3, "12": 4, "ab": 5},
              "merges": [["1", "2"], ["a", "b"]]}
  })";
  std::ofstream(dir.file("tokenizer.json")) << json;
  std::ofstream(dir.file("tokenizer_config.json"))
      << R"({"eos_token": {"content": "<eos>"}, "bos_token": null})";
  const Tokenizer tok = Tokenizer::from_hf_json(dir.file("tokenizer.json"));
  EXPECT_EQ(tok.vocab_size(), 8);
  EXPECT_EQ(tok.eos_id(), 7);
  EXPECT_EQ(tok.bos_id(), -1);
  EXPECT_TRUE(tok.is_eog(7));
  // "1212" -> "121" + "2" by \p{N}{1,3}; "121" -> "12" "1".
  EXPECT_EQ(tok.encode("1212ab", false, false), (std::vector<int32_t>{4, 0, 1, 5}));
  // User-defined tokens split out even without parse_special; control ones only with it.
  EXPECT_EQ(tok.encode("ab<sep>ab", false, false), (std::vector<int32_t>{5, 6, 5}));
  EXPECT_EQ(tok.encode("ab<eos>", true, false), (std::vector<int32_t>{5, 7}));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{5, 6, 7}), "ab<sep>");
}

// ---- rejected inputs ----------------------------------------------------------------------

TEST(Tokenizer, test_tokenizer_rejects_unknown_pre_and_model) {
  TempDir dir;
  write_tokenizer_gguf(dir.file("pre.gguf"), "made-up-pre", {}, {});
  try {
    (void)Tokenizer::from_gguf(GgufFile::open(dir.file("pre.gguf")));
    FAIL() << "expected UnsupportedError";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("made-up-pre"), std::string::npos) << e.what();
  }
  write_tokenizer_gguf(dir.file("bert.gguf"), "default", {}, {}, "bert");
  EXPECT_THROW((void)Tokenizer::from_gguf(GgufFile::open(dir.file("bert.gguf"))),
               UnsupportedError);
  // A SentencePiece vocabulary without its scores: the key named.
  write_tokenizer_gguf(dir.file("spm.gguf"), "default", {}, {}, "llama");
  try {
    (void)Tokenizer::from_gguf(GgufFile::open(dir.file("spm.gguf")));
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.scores"), std::string::npos) << e.what();
  }
}

// ---- SentencePiece (GGUF "llama": Gemma, Llama 2) -------------------------------------------

/// A SentencePiece vocabulary in llama.cpp's GGUF form: <unk>, <s>, </s> (control), the 256
/// byte-fallback tokens <0x00>..<0xFF> (type 6), then `pieces` with their scores (normal).
Tokenizer spm_tokenizer(const std::string& path, const std::vector<std::pair<std::string, float>>& pieces,
                        bool add_space_prefix, const std::vector<std::string>& user_defined = {}) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  std::vector<float> scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    tokens.emplace_back(buf);
    types.push_back(6);
    scores.push_back(0);
  }
  for (const auto& [piece, score] : pieces) {
    tokens.push_back(piece);
    types.push_back(1);
    scores.push_back(score);
  }
  for (const std::string& t : user_defined) {
    tokens.push_back(t);
    types.push_back(4);
    scores.push_back(0);
  }
  GgufWriter w;
  w.set("tokenizer.ggml.model", GgufValue::str("llama"));
  w.set("tokenizer.ggml.tokens", GgufValue::str_array(tokens));
  w.set("tokenizer.ggml.token_type", GgufValue::i32_array(types));
  w.set("tokenizer.ggml.scores", GgufValue::f32_array(scores));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(1));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(2));
  w.set("tokenizer.ggml.add_space_prefix", GgufValue::boolean(add_space_prefix));
  w.write(path);
  return Tokenizer::from_gguf(GgufFile::open(path));
}

constexpr int32_t kFirstPiece = 3 + 256;  // id of pieces[0]

// Merges go by score, highest first, leftmost on ties -- not by position in a merge list:
// "abc" with "ab" (score -1) and "bc" (score -0.5) merges "bc" first, and "a" + "bc" is no token.
TEST(SentencePiece, MergesTheHighestScoringPairFirst) {
  TempDir dir;
  const Tokenizer tok = spm_tokenizer(dir.file("v.gguf"), {{"a", -5}, {"b", -5}, {"c", -5}, {"ab", -1}, {"bc", -0.5f}},
                                      /*add_space_prefix=*/false);
  EXPECT_EQ(tok.encode("abc", false, false), (std::vector<int32_t>{kFirstPiece, kFirstPiece + 4}));  // a, bc
  EXPECT_EQ(tok.encode("ab", false, false), (std::vector<int32_t>{kFirstPiece + 3}));
  EXPECT_TRUE(tok.add_bos_default());  // SentencePiece vocabularies add BOS unless the file says not
  EXPECT_EQ(tok.encode("ab", false, true).front(), 1);
}

// Spaces become U+2581 "▁" pieces; add_space_prefix puts one before the text and after every
// special token; decode turns "▁" back into spaces.
TEST(SentencePiece, SpacesAreEscapedAndThePrefixFollowsTheFlag) {
  TempDir dir;
  const std::vector<std::pair<std::string, float>> pieces = {
      {"\xe2\x96\x81", -3}, {"h", -4}, {"i", -4}, {"hi", -2}, {"\xe2\x96\x81hi", -1}};
  const int32_t space = kFirstPiece, hi = kFirstPiece + 3, space_hi = kFirstPiece + 4;
  const Tokenizer plain = spm_tokenizer(dir.file("a.gguf"), pieces, false);
  EXPECT_EQ(plain.encode("hi hi", false, false), (std::vector<int32_t>{hi, space_hi}));
  EXPECT_EQ(plain.decode(plain.encode("hi hi", false, false)), "hi hi");
  const Tokenizer prefixed = spm_tokenizer(dir.file("b.gguf"), pieces, true);
  EXPECT_EQ(prefixed.encode("hi hi", false, false), (std::vector<int32_t>{space_hi, space_hi}));
  EXPECT_EQ(prefixed.encode("</s>hi", true, false), (std::vector<int32_t>{2, space_hi}));
  EXPECT_EQ(prefixed.encode(" ", false, false), (std::vector<int32_t>{space, space}));
}

// A character the vocabulary lacks is spelled with its UTF-8 bytes' <0xXX> tokens and decodes
// back to the same bytes; invalid UTF-8 goes the same way, never throwing.
TEST(SentencePiece, ByteFallbackRoundTrips) {
  TempDir dir;
  const Tokenizer tok = spm_tokenizer(dir.file("v.gguf"), {{"a", -1}}, false);
  const std::string korean = "\xea\xb0\x80";  // U+AC00, three bytes
  EXPECT_EQ(tok.encode("a" + korean, false, false), (std::vector<int32_t>{kFirstPiece, 3 + 0xea, 3 + 0xb0, 3 + 0x80}));
  EXPECT_EQ(tok.decode(tok.encode("a" + korean, false, false)), "a" + korean);
  const std::string invalid = "\xff\xfe";
  EXPECT_EQ(tok.encode(invalid, false, false), (std::vector<int32_t>{3 + 0xff, 3 + 0xfe}));
  EXPECT_EQ(tok.decode(tok.encode(invalid, false, false)), invalid);
}

// User-defined tokens are cut out of the text even without parse_special; control tokens only with it.
TEST(SentencePiece, UserDefinedTokensAlwaysSplitControlTokensOnRequest) {
  TempDir dir;
  const Tokenizer tok = spm_tokenizer(dir.file("v.gguf"), {{"a", -1}}, false, {"<tab>"});
  const int32_t user = kFirstPiece + 1;
  EXPECT_EQ(tok.encode("a<tab>a", false, false), (std::vector<int32_t>{kFirstPiece, user, kFirstPiece}));
  EXPECT_EQ(tok.encode("<s>", true, false), (std::vector<int32_t>{1}));
  EXPECT_NE(tok.encode("<s>", false, false), (std::vector<int32_t>{1}));  // plain text: bytes
}

TEST(Tokenizer, test_tokenizer_rejects_inconsistent_gguf_arrays) {
  TempDir dir;
  write_tokenizer_gguf(dir.file("types.gguf"), "gpt2", {"ab"}, {"a b"}, "gpt2", 1);
  EXPECT_THROW((void)Tokenizer::from_gguf(GgufFile::open(dir.file("types.gguf"))), FormatError);
  write_tokenizer_gguf(dir.file("merge.gguf"), "gpt2", {"ab"}, {"ab"});
  EXPECT_THROW((void)Tokenizer::from_gguf(GgufFile::open(dir.file("merge.gguf"))), FormatError);
}

TEST(Tokenizer, test_tokenizer_rejects_bad_tokenizer_json) {
  TempDir dir;
  EXPECT_THROW((void)Tokenizer::from_hf_json(dir.file("missing.json")), InvalidArgument);
  std::ofstream(dir.file("broken.json")) << "{ not json";
  EXPECT_THROW((void)Tokenizer::from_hf_json(dir.file("broken.json")), FormatError);
  std::ofstream(dir.file("wordpiece.json")) << R"({"model": {"type": "WordPiece", "vocab": {}}})";
  EXPECT_THROW((void)Tokenizer::from_hf_json(dir.file("wordpiece.json")), UnsupportedError);
  std::ofstream(dir.file("nomerges.json")) << R"({"model": {"type": "BPE", "vocab": {"a": 0}}})";
  EXPECT_THROW((void)Tokenizer::from_hf_json(dir.file("nomerges.json")), FormatError);
  std::ofstream(dir.file("metaspace.json"))
      << R"({"pre_tokenizer": {"type": "Metaspace"},
             "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})";
  EXPECT_THROW((void)Tokenizer::from_hf_json(dir.file("metaspace.json")), UnsupportedError);
}

// ---- long input ---------------------------------------------------------------------------
// (Encode speed is measured by bench/tokenizer, not asserted here: no timed unit tests.)

TEST(Tokenizer, test_tokenizer_roundtrips_10kb) {
  TempDir dir;
  const Tokenizer tok = tiny_gguf_tokenizer(dir);
  std::string text;
  while (text.size() < 10 * 1024) text += kMultilingual + " the quick brown fox 3.14\n";
  const auto ids = tok.encode(text, true, false);
  EXPECT_GT(ids.size(), 1000u);
  EXPECT_EQ(tok.decode(ids), text);
}

}  // namespace
}  // namespace lio
