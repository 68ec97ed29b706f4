// tokenizer.h — byte-level BPE (GPT-2 / SmolLM2 / Llama-3 / Qwen family) and SentencePiece
// BPE with byte fallback (Llama 2 / Gemma family), special tokens and the chat template. The streaming detokenizer, which never splits a UTF-8 character, is in
// lio/detokenizer.h.
//
// Sources: GPT-2 encoder.py (bytes_to_unicode, BPE by merge rank; Radford et al. 2019),
// llama.cpp src/llama-vocab.cpp (pre-tokenizer regexes per `tokenizer.ggml.pre`,
// special-token partitioning), Hugging Face tokenizers (tokenizer.json pre_tokenizer).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lio {

class GgufFile;

/// One chat turn for apply_chat_template.
struct ChatMessage {
  std::string role;     ///< "system" | "user" | "assistant" (or any role the template accepts)
  std::string content;  ///< message text
};

/// The special-token texts a chat template may print: its Jinja variables `bos_token` and
/// `eos_token` (Hugging Face transformers and llama.cpp pass the vocabulary's BOS / EOS text).
struct ChatTemplateTokens {
  std::string bos;  ///< e.g. "<bos>" (Gemma), "<|begin_of_text|>" (Llama 3); "" if none
  std::string eos;  ///< e.g. "<eos>", "<|im_end|>"; "" if none
};

/// Byte-level BPE or SentencePiece tokenizer. Immutable after construction; thread-safe to use.
class Tokenizer {
 public:
  /// Builds from GGUF metadata: tokenizer.ggml.{model,pre,tokens,token_type,merges,
  /// bos_token_id,eos_token_id,add_bos_token} and tokenizer.chat_template. Model "gpt2":
  /// byte-level BPE as below. Model "llama": SentencePiece BPE (llama.cpp's SPM vocabulary:
  /// tokenizer.ggml.scores merge priorities, <0xXX> byte-fallback tokens, spaces as U+2581,
  /// add_space_prefix (default true), BOS on by default; `pre` is ignored).
  /// `pre` selects the pre-tokenizer regexes as llama.cpp does: smollm/starcoder/refact/
  /// command-r/codeshell/exaone/minerva = `"\p{N}"` then GPT-2's; gpt2/gpt-2 = GPT-2's;
  /// llama-bpe/llama3 = Llama-3's (whole-word tokens skip merging, BOS on by default);
  /// qwen2; "default"/absent = llama.cpp's legacy four-regex fallback.
  /// Throws UnsupportedError for a tokenizer model other than "gpt2" / "llama" or an unknown `pre`;
  /// FormatError naming the key when arrays are missing or inconsistent (token_type length,
  /// a merge that is not "left right", bos/eos id outside the vocabulary).
  static Tokenizer from_gguf(const GgufFile& file);
  /// Builds from a Hugging Face `tokenizer.json` (model.type "BPE", byte-level), honouring
  /// its pre_tokenizer Sequence (Split{Regex|String, behavior Isolated}, Digits, ByteLevel
  /// with use_regex = GPT-2's regex), merges as "a b" strings or ["a", "b"] pairs, and
  /// added_tokens ("special": true -> control, false -> user-defined). Reads
  /// `tokenizer_config.json` beside it when present (bos_token, eos_token, add_bos_token,
  /// chat_template). Throws InvalidArgument if a file cannot be opened; FormatError for bad
  /// JSON or structure; UnsupportedError for a non-BPE model, byte_fallback, a normalizer,
  /// ByteLevel add_prefix_space, or another pre_tokenizer type.
  static Tokenizer from_hf_json(const std::string& tokenizer_json_path);

  /// Moves; the moved-from tokenizer must not be used.
  Tokenizer(Tokenizer&&) noexcept;
  /// Move-assigns; the moved-from tokenizer must not be used.
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// Text -> token ids. With `parse_special`, control token texts in `text` (e.g.
  /// "<|im_start|>") become their ids; otherwise they are tokenized as plain text.
  /// User-defined tokens (GGUF type 4, tokenizer.json added tokens with "special": false)
  /// always become their ids, as in llama.cpp and HF tokenizers. Special texts are matched
  /// longest token first (llama.cpp tokenizer_st_partition); the text between them is split
  /// by the pre-tokenizer regexes and BPE-merged by merge rank.
  /// Invalid UTF-8 never throws: each byte that does not start a valid UTF-8 sequence is
  /// replaced by U+FFFD before tokenizing, as llama.cpp does (unicode_cpts_from_utf8).
  /// Adds BOS first when `add_bos` is true (use add_bos_default() for the model's choice).
  std::vector<int32_t> encode(std::string_view text, bool parse_special, bool add_bos) const;
  /// Ids -> bytes (may end inside a UTF-8 character). Control tokens render as their text
  /// when `render_special`, as nothing otherwise. Throws InvalidArgument on an id out of range.
  std::string decode(std::span<const int32_t> ids, bool render_special = false) const;
  /// Raw bytes of one token (byte-level decoded).
  std::string token_bytes(int32_t id) const;
  /// The token's vocabulary string as stored (e.g. "Ġthe").
  /// Throws InvalidArgument on an id out of range.
  const std::string& token_text(int32_t id) const;
  /// The id whose vocabulary string is exactly `text` (e.g. "Ġthe", "<|im_end|>"), or -1.
  int32_t token_id(std::string_view text) const;

  /// Number of tokens in the vocabulary.
  int64_t vocab_size() const;
  int32_t bos_id() const;          ///< -1 if none
  int32_t eos_id() const;          ///< -1 if none
  /// Whether the model expects BOS prepended (add_bos_token, or the `pre` default).
  bool add_bos_default() const;
  /// End-of-generation: EOS, and control tokens such as <|im_end|> or <|endoftext|>.
  bool is_eog(int32_t id) const;
  /// True for control tokens (token_type 3 in GGUF, "special": true in tokenizer.json).
  bool is_control(int32_t id) const;

  /// Renders a conversation with the model's own Jinja chat template (render_chat_template),
  /// bos_token and eos_token being this vocabulary's BOS and EOS texts. When the model adds BOS
  /// on encode (add_bos_default()) and the rendered text starts with the BOS text, that BOS is
  /// cut, so encode(text, true, add_bos_default()) holds one BOS, not two (llama.cpp's
  /// common_chat_templates_apply does the same). Throws as render_chat_template does:
  /// UnsupportedError when the model has no template (a base model such as Gemma 3 270M: no
  /// format is guessed), InvalidArgument when the template fails to parse or raises.
  std::string apply_chat_template(std::span<const ChatMessage> messages,
                                  bool add_generation_prompt) const;
  /// The model's chat template text (Jinja source) as read from the file; "" if none.
  const std::string& chat_template() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  /// encode() for a SentencePiece vocabulary; `out` holds BOS already when asked for.
  std::vector<int32_t> encode_spm(std::string_view text, bool parse_special, std::vector<int32_t> out) const;
  std::unique_ptr<Impl> impl_;
};

/// Renders `messages` with the Jinja chat template source `chat_template`, as Hugging Face
/// transformers' apply_chat_template and llama-cpp-python's Jinja2ChatFormatter render it with
/// jinja2 (trim_blocks and lstrip_blocks on, the final newline dropped): the template sees
/// `messages` (a list of {"role", "content"}), `add_generation_prompt`, `bos_token`,
/// `eos_token` (from `tokens`), `raise_exception(msg)` and `strftime_now(format)` (local time).
/// The engine is minja (google/minja, vendored in common/formats/third_party/minja), with LIO's
/// bounds on a render (nesting depth 200, 2,000,000 steps, 16 MiB per repeated string, 2^20
/// range items) so that no template, however written, crashes or hangs the process.
/// Source: Hugging Face chat templating docs ("Templates for chat models"); jinja2 semantics.
/// Throws UnsupportedError for an empty template (a base model: "no chat template ... without
/// --chat"); InvalidArgument for a template over 256 KiB, one that fails to parse, one that
/// calls raise_exception (e.g. Gemma 3's on roles out of order) or passes a bound, each message
/// naming the template's own error and where it is.
std::string render_chat_template(std::string_view chat_template,
                                 std::span<const ChatMessage> messages,
                                 bool add_generation_prompt, const ChatTemplateTokens& tokens = {});

}  // namespace lio
