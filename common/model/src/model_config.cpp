#include "lio/model_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "lio/architecture.h"
#include "lio/error.h"
#include "lio/gguf.h"
#include "lio/kv_sizing.h"
#include "lio/mla.h"

namespace lio {

void ModelConfig::validate(const std::string& source) const {
  auto positive = [&](int64_t v, const char* what) {
    if (v <= 0) throw FormatError(source + ": " + what + " must be > 0, got " + std::to_string(v));
  };
  positive(n_layers, "n_layers");
  positive(d_model, "d_model");
  positive(n_heads, "n_heads");
  positive(n_kv_heads, "n_kv_heads");
  positive(head_dim, "head_dim");
  positive(d_ff, "d_ff");
  positive(vocab_size, "vocab_size");
  positive(context_length, "context_length");
  if (n_heads % n_kv_heads != 0)
    throw FormatError(source + ": n_heads (" + std::to_string(n_heads) +
                      ") must be a multiple of n_kv_heads (" + std::to_string(n_kv_heads) + ")");
  if (head_dim % 2 != 0)
    throw FormatError(source + ": head_dim must be even for RoPE, got " + std::to_string(head_dim));
  if (!(rope_theta > 0.0f)) throw FormatError(source + ": rope theta must be > 0");
  if (!(rms_norm_eps > 0.0f)) throw FormatError(source + ": rms_norm_eps must be > 0");
  if (sliding_window < 0 || sliding_window_pattern < 0 || rope_theta_local < 0.0f || !(embedding_scale > 0.0f)) {
    throw FormatError(source + ": sliding window " + std::to_string(sliding_window) + ", pattern " +
                      std::to_string(sliding_window_pattern) + ", local RoPE base and embedding scale must be >= 0 (> 0)");
  }
  if (!(attn_softcap >= 0.0f) || !(final_softcap >= 0.0f) || !(residual_scale > 0.0f) || !(logit_scale > 0.0f) ||
      !(attn_scale >= 0.0f)) {
    throw FormatError(source + ": soft-caps (attention " + std::to_string(attn_softcap) + ", final " +
                      std::to_string(final_softcap) + ") and the attention scale must be >= 0, the residual scale (" +
                      std::to_string(residual_scale) + ") and logit scale (" + std::to_string(logit_scale) + ") > 0");
  }
  if (is_mla()) {
    positive(qk_nope_head_dim, "qk_nope_head_dim");
    positive(v_head_dim, "v_head_dim");
    if (qk_rope_head_dim < 0 || qk_rope_head_dim % 2 != 0 || (kv_lora_rank + qk_rope_head_dim) % 2 != 0) {
      throw FormatError(source + ": MLA needs an even qk_rope_head_dim >= 0 and an even kv_lora_rank + "
                        "qk_rope_head_dim, got " + std::to_string(kv_lora_rank) + " + " +
                        std::to_string(qk_rope_head_dim));
    }
  }
}

int64_t ModelConfig::layer_window(int64_t layer) const {
  if (sliding_window <= 0) return 0;
  const int64_t l = first_layer + layer;
  const bool global = sliding_window_pattern > 0 && l % sliding_window_pattern == sliding_window_pattern - 1;
  return global ? 0 : sliding_window;
}

float ModelConfig::layer_rope_theta(int64_t layer) const {
  return layer_window(layer) > 0 && rope_theta_local > 0.0f ? rope_theta_local : rope_theta;
}

namespace {
// Set while kv_bytes_per_token asks a chapter's answer, so an answer that asks it back gets a
// clear error instead of recursing until the stack overflows.
thread_local bool g_in_kv_bytes_per_token = false;
}  // namespace

int64_t ModelConfig::kv_bytes_per_token(int64_t bytes_per_elem) const {
  if (g_in_kv_bytes_per_token)
    throw InvalidArgument(
        "ModelConfig::kv_bytes_per_token is computed by chapter 01's kv_cache_bytes (Task 1) and chapter 02's "
        "mla_latent_bytes_per_token (Task 2): those must compute the bytes themselves, not call it");
  if (!is_mla() && bytes_per_elem != 4 && bytes_per_elem != 2 && bytes_per_elem != 1)
    throw InvalidArgument("kv_bytes_per_token: bytes_per_elem must be 4, 2 or 1, got " + std::to_string(bytes_per_elem));
  g_in_kv_bytes_per_token = true;
  struct Reset {
    ~Reset() { g_in_kv_bytes_per_token = false; }
  } reset;
  if (is_mla()) return mla_latent_bytes_per_token(*this, bytes_per_elem);  // chapter 02, Task 2
  const KvDtype dtype = bytes_per_elem == 4 ? KvDtype::F32 : bytes_per_elem == 2 ? KvDtype::F16 : KvDtype::INT8;
  return kv_cache_bytes(*this, /*seq_len=*/1, /*batch=*/1, dtype);  // chapter 01, Task 1
}

float ModelConfig::softmax_scale() const {
  if (attn_scale > 0.0f) return attn_scale;
  const int64_t width = is_mla() ? qk_nope_head_dim + qk_rope_head_dim : head_dim;
  return 1.0f / std::sqrt(static_cast<float>(width));
}

ModelConfig config_from_gguf(const GgufFile& file) {
  const std::string arch = file.get_string("general.architecture");
  const Architecture& family = find_architecture(arch, file.path());
  ModelConfig c;
  c.architecture = arch;
  c.name = file.has("general.name") ? file.get_string("general.name") : "unnamed";
  const std::string p = arch + ".";
  c.n_layers = static_cast<int64_t>(file.get_uint(p + "block_count"));
  c.d_model = static_cast<int64_t>(file.get_uint(p + "embedding_length"));
  c.n_heads = static_cast<int64_t>(file.get_uint(p + "attention.head_count"));
  c.n_kv_heads = file.has(p + "attention.head_count_kv")
                     ? static_cast<int64_t>(file.get_uint(p + "attention.head_count_kv"))
                     : c.n_heads;
  c.d_ff = static_cast<int64_t>(file.get_uint(p + "feed_forward_length"));
  c.context_length = static_cast<int64_t>(file.get_uint(p + "context_length"));
  // head_dim: attention.key_length when present (llama.cpp's n_embd_head_k), else d_model / n_heads.
  if (file.has(p + "attention.key_length")) {
    c.head_dim = static_cast<int64_t>(file.get_uint(p + "attention.key_length"));
  } else if (c.n_heads > 0) {
    c.head_dim = c.d_model / c.n_heads;
  }
  if (file.has(p + "vocab_size")) {
    c.vocab_size = static_cast<int64_t>(file.get_uint(p + "vocab_size"));
  } else if (file.has("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<int64_t>(file.get_string_array("tokenizer.ggml.tokens").size());
  }
  c.rope_theta = file.has(p + "rope.freq_base")
                     ? static_cast<float>(file.get_float(p + "rope.freq_base"))
                     : 10000.0f;
  c.rms_norm_eps = file.has(p + "attention.layer_norm_rms_epsilon")
                       ? static_cast<float>(file.get_float(p + "attention.layer_norm_rms_epsilon"))
                       : 1e-5f;
  if (file.has(p + "rope.dimension_count") &&
      static_cast<int64_t>(file.get_uint(p + "rope.dimension_count")) != c.head_dim) {
    throw UnsupportedError(file.path() + ": partial RoPE (rope.dimension_count " +
                           std::to_string(file.get_uint(p + "rope.dimension_count")) +
                           " != head_dim " + std::to_string(c.head_dim) + ") is not supported");
  }
  // The family's pairing, as llama.cpp's llama_model_rope_type: "normal" (adjacent pairs) for
  // llama, whose Q/K rows convert_hf_to_gguf.py permutes so this equals HF's rotate-half on the
  // original weights; NEOX (halves, the weights unpermuted) for qwen2 and qwen3.
  c.rope_style = family.rope_style;
  c.tied_embeddings = file.find_tensor("output.weight") == nullptr;
  if (family.read_config != nullptr) family.read_config(file, c);
  c.validate(file.path());
  return c;
}

ModelConfig config_from_hf_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument("cannot open config file '" + path + "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(path + ": invalid JSON: " + e.what());
  }
  auto need = [&](const char* key) -> const nlohmann::json& {
    if (!j.contains(key)) throw FormatError(path + ": key '" + key + "' missing");
    return j.at(key);
  };
  // An integer field: nlohmann's get<int64_t> converts a float without a range check, undefined
  // behaviour for 1e300 (found by tests/fuzz).
  auto integer = [&](const char* key, const nlohmann::json& v) -> int64_t {
    if (!v.is_number_integer()) throw FormatError(path + ": " + key + " must be an integer, not " + v.dump());
    return v.get<int64_t>();
  };
  auto need_int = [&](const char* key) { return integer(key, need(key)); };
  auto int_or = [&](const char* key, int64_t fallback) {
    return j.contains(key) && !j[key].is_null() ? integer(key, j[key]) : fallback;
  };
  // model_type names the family as GGUF's general.architecture does ("llama", "qwen2", "qwen3");
  // an export without it names its class (LlamaForCausalLM).
  std::string model_type = j.value("model_type", "");
  if (model_type.empty() && j.contains("architectures") && j["architectures"].is_array()) {
    for (const auto& a : j["architectures"])
      if (a.is_string() && a.get<std::string>() == "LlamaForCausalLM") model_type = "llama";
  }
  if (j.contains("text_config")) {  // a vision-language wrapper (Gemma3ForConditionalGeneration, ...)
    throw UnsupportedError(path + ": a multimodal checkpoint (model_type '" + model_type +
                           "', text_config inside): LIO reads text models only; give the text model's own directory");
  }
  const Architecture& family = find_hf_architecture(model_type.empty() ? std::string("unknown") : model_type, path);
  if (!family.hf_model_type.empty() && model_type != family.hf_model_type) {
    throw UnsupportedError(path + ": model_type '" + model_type + "': LIO reads " + std::string(family.name) +
                           " from config.json's model_type '" + std::string(family.hf_model_type) + "'");
  }
  ModelConfig c;
  try {
    c.architecture = std::string(family.name);
    c.name = std::filesystem::path(path).parent_path().filename().string();
    c.n_layers = need_int("num_hidden_layers");
    c.d_model = need_int("hidden_size");
    c.n_heads = need_int("num_attention_heads");
    if (c.n_heads < 1) throw FormatError(path + ": num_attention_heads " + std::to_string(c.n_heads) + " < 1");
    c.n_kv_heads = int_or("num_key_value_heads", c.n_heads);
    c.head_dim = int_or("head_dim", c.d_model / c.n_heads);
    c.d_ff = need_int("intermediate_size");
    c.vocab_size = need_int("vocab_size");
    c.context_length = int_or("max_position_embeddings", 2048);
    c.rope_theta = j.value("rope_theta", 10000.0f);
    c.rms_norm_eps = j.value("rms_norm_eps", 1e-5f);
    c.tied_embeddings = j.value("tie_word_embeddings", false);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(path + ": bad value: " + e.what());
  }
  if (j.value("use_sliding_window", false)) {
    throw UnsupportedError(path + ": use_sliding_window is not supported yet");
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    throw UnsupportedError(path + ": rope_scaling is not supported yet");
  }
  c.rope_style = RopeStyle::Neox;  // Hugging Face's rotate-half, every family (weights unpermuted)
  if (family.read_hf_config != nullptr) {
    try {
      family.read_hf_config(j, path, c);
    } catch (const nlohmann::json::exception& e) {
      throw FormatError(path + ": bad value: " + e.what());
    }
  }
  c.validate(path);
  return c;
}

}  // namespace lio
