// tokenizer_hf_json.cpp — Tokenizer::from_hf_json: a Hugging Face tokenizer.json (BPE model,
// pre_tokenizer, added tokens) and the tokenizer_config.json beside it (special tokens, BOS
// policy, chat template).
//
// Source: Hugging Face tokenizers (tokenizers/src/pre_tokenizers, models/bpe) for the format.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lio/error.h"
#include "lio/tokenizer.h"
#include "pre_tokenizer.h"
#include "tokenizer_impl.h"

namespace lio {

using tokenizer_detail::kHfByteLevelRegex;
using tokenizer_detail::split_merge;
using tokenizer_detail::TokenKind;

namespace {

using nlohmann::json;

json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument("cannot open '" + path + "'");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw FormatError(path + ": not valid JSON: " + e.what());
  }
}

/// Escapes `literal` so PCRE2 matches it verbatim (for Split{pattern: {String: ...}}).
std::string regex_escape(const std::string& literal) {
  std::string out;
  for (const char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

/// Appends the regexes equivalent to one HF pre_tokenizer node. Sets `byte_level` when a
/// ByteLevel node is present.
void add_hf_pre_tokenizer(const json& node, const std::string& path,
                          std::vector<std::string>& regexes, bool& byte_level) {
  if (node.is_null()) return;
  const std::string type = node.value("type", "");
  if (type == "Sequence") {
    for (const json& child : node.at("pretokenizers")) {
      add_hf_pre_tokenizer(child, path, regexes, byte_level);
    }
  } else if (type == "Split") {
    const std::string behavior = node.value("behavior", "");
    if (behavior != "Isolated" || node.value("invert", false)) {
      throw UnsupportedError(path + ": pre_tokenizer Split with behavior '" + behavior +
                             "'" + (node.value("invert", false) ? " and invert" : "") +
                             " is not supported (only Isolated, not inverted)");
    }
    const json& pattern = node.at("pattern");
    if (pattern.contains("Regex")) {
      regexes.push_back(pattern.at("Regex").get<std::string>());
    } else if (pattern.contains("String")) {
      regexes.push_back(regex_escape(pattern.at("String").get<std::string>()));
    } else {
      throw FormatError(path + ": pre_tokenizer Split pattern has neither Regex nor String");
    }
  } else if (type == "Digits") {
    regexes.push_back(node.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+");
  } else if (type == "ByteLevel") {
    if (node.value("add_prefix_space", false)) {
      throw UnsupportedError(path + ": pre_tokenizer ByteLevel with add_prefix_space is not "
                                    "supported");
    }
    if (node.value("use_regex", true)) regexes.push_back(kHfByteLevelRegex);
    byte_level = true;
  } else {
    throw UnsupportedError(path + ": pre_tokenizer type '" + type +
                           "' is not supported (Sequence, Split, Digits, ByteLevel)");
  }
}

/// A token id of tokenizer.json: FormatError unless an integer that fits int64_t (nlohmann's
/// get<int64_t> converts a float without a range check, undefined behaviour for 5e21: found by
/// tests/fuzz).
int64_t json_token_id(const json& v, const std::string& path) {
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX})) {
    throw FormatError(path + ": a token id is not an integer in range: " + v.dump());
  }
  return v.get<int64_t>();
}

/// tokenizer_config.json's bos_token / eos_token: a string, {"content": ...}, or null.
std::string config_token_text(const json& config, const char* key) {
  if (!config.contains(key) || config[key].is_null()) return {};
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v["content"].get<std::string>();
  return {};
}

}  // namespace

Tokenizer Tokenizer::from_hf_json(const std::string& tokenizer_json_path) {
  auto impl = std::make_unique<Impl>();
  impl->source = tokenizer_json_path;
  const std::string& path = tokenizer_json_path;
  const json root = read_json_file(path);
  std::vector<std::string> lefts, rights, regexes;
  try {
    const json& model = root.at("model");
    const std::string type = model.value("type", "BPE");
    if (type != "BPE") {
      throw UnsupportedError(path + ": model.type '" + type + "' is not supported (only BPE)");
    }
    if (model.value("byte_fallback", false)) {
      throw UnsupportedError(path + ": BPE with byte_fallback (SentencePiece-style) is not "
                                    "supported; LIO implements byte-level BPE");
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (model.contains(key) && !model[key].is_null() && !model[key].get<std::string>().empty()) {
        throw UnsupportedError(path + ": BPE model." + key + " is not supported");
      }
    }
    if (root.contains("normalizer") && !root["normalizer"].is_null()) {
      throw UnsupportedError(path + ": normalizer '" +
                             root["normalizer"].value("type", std::string("?")) +
                             "' is not supported (byte-level BPE has none)");
    }
    impl->ignore_merges = model.value("ignore_merges", false);

    // Vocabulary: model.vocab plus added_tokens; ids may leave gaps (marked Unused).
    int64_t max_id = -1;
    for (const auto& [text, id] : model.at("vocab").items()) max_id = std::max(max_id, json_token_id(id, path));
    const json added = root.value("added_tokens", json::array());
    for (const json& t : added) max_id = std::max(max_id, json_token_id(t.at("id"), path));
    if (max_id < 0) throw FormatError(path + ": model.vocab is empty");
    if (max_id >= (int64_t{1} << 31) - 1) throw FormatError(path + ": token id out of range");
    impl->tokens.assign(static_cast<size_t>(max_id + 1), std::string());
    impl->kinds.assign(static_cast<size_t>(max_id + 1), TokenKind::Unused);
    for (const auto& [text, id] : model.at("vocab").items()) {
      const int64_t i = json_token_id(id, path);
      if (i < 0) throw FormatError(path + ": model.vocab['" + text + "'] has a negative id");
      impl->tokens[i] = text;
      impl->kinds[i] = TokenKind::Normal;
    }
    for (const json& t : added) {
      const int64_t i = json_token_id(t.at("id"), path);
      if (i < 0) throw FormatError(path + ": added_tokens has a negative id");
      impl->tokens[i] = t.at("content").get<std::string>();
      impl->kinds[i] = t.value("special", false) ? TokenKind::Control : TokenKind::UserDefined;
    }
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      auto& name = model["unk_token"].get_ref<const std::string&>();
      for (size_t i = 0; i < impl->tokens.size(); ++i) {
        if (impl->tokens[i] == name) impl->kinds[i] = TokenKind::Unknown;
      }
    }

    // Merges: "left right" strings (older files) or ["left", "right"] pairs (newer).
    const json& merges = model.at("merges");
    lefts.reserve(merges.size());
    rights.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      std::pair<std::string, std::string> lr;
      if (merges[i].is_string()) {
        lr = split_merge(merges[i].get<std::string>());
      } else if (merges[i].is_array() && merges[i].size() == 2) {
        lr = {merges[i][0].get<std::string>(), merges[i][1].get<std::string>()};
      }
      if (lr.first.empty() || lr.second.empty()) {
        throw FormatError(path + ": model.merges[" + std::to_string(i) + "] = " +
                          merges[i].dump() + " is not 'left right' or [left, right]");
      }
      lefts.push_back(std::move(lr.first));
      rights.push_back(std::move(lr.second));
    }

    bool byte_level = false;
    add_hf_pre_tokenizer(root.value("pre_tokenizer", json()), path, regexes, byte_level);
    if (root.contains("decoder") && root["decoder"].is_object() &&
        root["decoder"].value("type", "") == "ByteLevel") {
      byte_level = true;
    }
    if (!byte_level) {
      throw UnsupportedError(path + ": not a byte-level BPE (no ByteLevel pre_tokenizer or "
                                    "decoder); LIO implements byte-level BPE only");
    }
  } catch (const json::exception& e) {
    throw FormatError(path + ": unexpected tokenizer.json structure: " + e.what());
  }

  // tokenizer_config.json beside it: special token names, BOS policy, chat template.
  const std::filesystem::path config_path =
      std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    const json config = read_json_file(config_path.string());
    auto lookup = [&](const char* key) -> int32_t {
      const std::string text = config_token_text(config, key);
      if (text.empty()) return -1;
      for (size_t i = 0; i < impl->tokens.size(); ++i) {
        if (impl->tokens[i] == text) return static_cast<int32_t>(i);
      }
      throw FormatError(config_path.string() + ": " + key + " '" + text +
                        "' is not in the vocabulary of " + path);
    };
    impl->bos = lookup("bos_token");
    impl->eos = lookup("eos_token");
    if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
      impl->add_bos = config["add_bos_token"].get<bool>();
    }
    if (config.contains("chat_template")) {
      const json& t = config["chat_template"];
      if (t.is_string()) {
        impl->chat_template = t.get<std::string>();
      } else if (t.is_array()) {  // [{"name": "default", "template": ...}, ...]
        for (const json& entry : t) {
          if (entry.value("name", "") == "default" || impl->chat_template.empty()) {
            impl->chat_template = entry.value("template", "");
          }
        }
      }
    }
  }
  impl->finish(lefts, rights, regexes);
  return Tokenizer(std::move(impl));
}

}  // namespace lio
