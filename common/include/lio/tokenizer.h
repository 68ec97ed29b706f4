// tokenizer.h — byte-level BPE (GPT-2 / SmolLM2 / Llama-3 family), special tokens,
// chat template, and a streaming detokenizer that never splits a UTF-8 character.
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
  std::string role;     // "system" | "user" | "assistant"
  std::string content;
};

/// Byte-level BPE tokenizer. Immutable after construction; thread-safe to use.
class Tokenizer {
 public:
  /// Builds from GGUF metadata: tokenizer.ggml.{model,pre,tokens,token_type,merges,
  /// bos_token_id,eos_token_id,add_bos_token} and tokenizer.chat_template.
  /// Throws UnsupportedError for a tokenizer model other than "gpt2" or an unknown `pre`;
  /// FormatError naming the key when arrays are missing or inconsistent.
  static Tokenizer from_gguf(const GgufFile& file);
  /// Builds from a Hugging Face `tokenizer.json` (model.type "BPE", byte-level), honouring
  /// its pre_tokenizer Sequence (Split regexes, ByteLevel, Digits), and reads
  /// `tokenizer_config.json` beside it when present (bos/eos tokens, chat_template).
  static Tokenizer from_hf_json(const std::string& tokenizer_json_path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// Text -> token ids. With `parse_special`, control/user-defined token texts in `text`
  /// (e.g. "<|im_start|>") become their ids; otherwise they are tokenized as plain text.
  /// Adds BOS first when `add_bos` is true (use add_bos_default() for the model's choice).
  std::vector<int32_t> encode(std::string_view text, bool parse_special, bool add_bos) const;
  /// Ids -> bytes (may end inside a UTF-8 character). Control tokens render as their text
  /// when `render_special`, as nothing otherwise. Throws InvalidArgument on an id out of range.
  std::string decode(std::span<const int32_t> ids, bool render_special = false) const;
  /// Raw bytes of one token (byte-level decoded).
  std::string token_bytes(int32_t id) const;
  /// The token's vocabulary string as stored (e.g. "Ġthe").
  const std::string& token_text(int32_t id) const;

  int64_t vocab_size() const;
  int32_t bos_id() const;          // -1 if none
  int32_t eos_id() const;          // -1 if none
  bool add_bos_default() const;
  /// End-of-generation: EOS, and control tokens such as <|im_end|> or <|endoftext|>.
  bool is_eog(int32_t id) const;
  /// True for control tokens (token_type 3 in GGUF, "special": true in tokenizer.json).
  bool is_control(int32_t id) const;

  /// Renders a conversation with the model's chat template. Supports ChatML
  /// (<|im_start|>role\ncontent<|im_end|>\n), including a default system prompt when the
  /// template carries one (SmolLM2's does). Throws UnsupportedError for other templates.
  std::string apply_chat_template(std::span<const ChatMessage> messages,
                                  bool add_generation_prompt) const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Turns a stream of token ids into text pieces that are always complete UTF-8:
/// bytes of a partial character are held back until the character completes.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
  /// Returns the newly completed text (possibly empty) after appending `id`.
  std::string push(int32_t id);
  /// Returns any held-back bytes (invalid trailing bytes become U+FFFD).
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;
};

}  // namespace lio
