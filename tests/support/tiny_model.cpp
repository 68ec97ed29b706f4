// tiny_model.cpp — tiny random Llama models as GGUF files and Hugging Face directories.
//
// One TinyModelSpec gives one model: make_tiny_tensors draws the weights (HF naming and
// layout), write_tiny_gguf stores them under llama.cpp names with Q/K permuted as
// convert_hf_to_gguf.py does, write_tiny_hf_dir stores them as safetensors unchanged.
#include "tiny_model.h"

#include <stdlib.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numbers>
#include <random>
#include <set>

#include "lio/error.h"
#include "lio/gguf.h"
#include "lio/gguf_writer.h"
#include "lio/safetensors.h"
#include "random_inputs.h"

namespace lio::testing {

namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

constexpr const char* kChatMlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";
constexpr const char* kControlTokens[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
constexpr int32_t kTokenTypeNormal = 1;   // llama.cpp LLAMA_TOKEN_TYPE_NORMAL
constexpr int32_t kTokenTypeControl = 3;  // llama.cpp LLAMA_TOKEN_TYPE_CONTROL
constexpr uint32_t kBosId = 1;            // <|im_start|>
constexpr uint32_t kEosId = 2;            // <|im_end|>

// ---- vocabulary -------------------------------------------------------------------------

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

/// GPT-2 bytes_to_unicode (openai/gpt-2 encoder.py): printable bytes map to themselves,
/// the other 68 to code points 256, 257, ... in byte order. Returns UTF-8 strings.
std::vector<std::string> byte_tokens() {
  std::vector<std::string> out(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    append_utf8(out[b], printable ? b : next++);
  }
  return out;
}

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;
};

Vocab make_vocab(const TinyModelSpec& spec) {
  Vocab v;
  for (const char* t : kControlTokens) {
    v.tokens.emplace_back(t);
    v.token_types.push_back(kTokenTypeControl);
  }
  for (std::string& t : byte_tokens()) {
    v.tokens.push_back(std::move(t));
    v.token_types.push_back(kTokenTypeNormal);
  }
  std::set<std::string> known(v.tokens.begin(), v.tokens.end());
  for (const std::string& merge : spec.merges) {
    const size_t space = merge.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == merge.size() ||
        merge.find(' ', space + 1) != std::string::npos) {
      throw InvalidArgument("tiny model: merge '" + merge + "' is not \"left right\"");
    }
    const std::string left = merge.substr(0, space);
    const std::string right = merge.substr(space + 1);
    if (known.count(left) == 0 || known.count(right) == 0) {
      throw InvalidArgument("tiny model: merge '" + merge +
                            "' uses a token not in the vocabulary before it");
    }
    const std::string merged = left + right;
    if (!known.insert(merged).second) {
      throw InvalidArgument("tiny model: merge '" + merge + "' produces duplicate token '" +
                            merged + "'");
    }
    v.tokens.push_back(merged);
    v.token_types.push_back(kTokenTypeNormal);
  }
  return v;
}

// ---- weights ----------------------------------------------------------------------------

/// N(mean, std) from mt19937_64 via Box-Muller, so values are identical on every standard
/// library (std::normal_distribution's algorithm is implementation-defined).
class NormalSource {
 public:
  explicit NormalSource(uint64_t seed) : rng_(seed) {}
  float next(float mean, float std) {
    // u1 in (0, 1] so log(u1) is finite; 53-bit uniforms from the 64-bit engine.
    const double u1 = (static_cast<double>(rng_() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    return static_cast<float>(mean + std * z);
  }

 private:
  std::mt19937_64 rng_;
};

struct TensorSpec {
  std::string hf_name;
  std::string gguf_name;
  std::vector<int64_t> shape;  // row-major
  bool is_norm;                // drawn from 1 + N(0, 0.1) and stored F32
  bool is_bias = false;        // drawn from N(0, init_std) and stored F32
};

std::vector<TensorSpec> tensor_specs(const TinyModelSpec& s) {
  const int64_t q_dim = s.n_heads * s.head_dim;
  const int64_t kv_dim = s.n_kv_heads * s.head_dim;
  const int64_t vocab = s.vocab_size();
  std::vector<TensorSpec> out;
  out.push_back({"model.embed_tokens.weight", "token_embd.weight", {vocab, s.d_model}, false});
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const std::string hf = "model.layers." + std::to_string(l) + ".";
    const std::string gg = "blk." + std::to_string(l) + ".";
    out.push_back({hf + "input_layernorm.weight", gg + "attn_norm.weight", {s.d_model}, true});
    out.push_back(
        {hf + "self_attn.q_proj.weight", gg + "attn_q.weight", {q_dim, s.d_model}, false});
    out.push_back(
        {hf + "self_attn.k_proj.weight", gg + "attn_k.weight", {kv_dim, s.d_model}, false});
    out.push_back(
        {hf + "self_attn.v_proj.weight", gg + "attn_v.weight", {kv_dim, s.d_model}, false});
    if (s.architecture == "qwen2") {
      out.push_back({hf + "self_attn.q_proj.bias", gg + "attn_q.bias", {q_dim}, false, true});
      out.push_back({hf + "self_attn.k_proj.bias", gg + "attn_k.bias", {kv_dim}, false, true});
      out.push_back({hf + "self_attn.v_proj.bias", gg + "attn_v.bias", {kv_dim}, false, true});
    }
    if (s.architecture == "qwen3" || s.architecture == "gemma3") {
      out.push_back({hf + "self_attn.q_norm.weight", gg + "attn_q_norm.weight", {s.head_dim}, true});
      out.push_back({hf + "self_attn.k_norm.weight", gg + "attn_k_norm.weight", {s.head_dim}, true});
    }
    const bool gemma = s.architecture == "gemma2" || s.architecture == "gemma3";
    if (gemma) {  // Gemma's HF names: post_attention_layernorm is a post-norm
      out.push_back({hf + "post_attention_layernorm.weight", gg + "post_attention_norm.weight", {s.d_model}, true});
      out.push_back({hf + "post_feedforward_layernorm.weight", gg + "post_ffw_norm.weight", {s.d_model}, true});
    }
    out.push_back(
        {hf + "self_attn.o_proj.weight", gg + "attn_output.weight", {s.d_model, q_dim}, false});
    out.push_back({hf + (gemma ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"),
                   gg + "ffn_norm.weight", {s.d_model}, true});
    out.push_back(
        {hf + "mlp.gate_proj.weight", gg + "ffn_gate.weight", {s.d_ff, s.d_model}, false});
    out.push_back({hf + "mlp.up_proj.weight", gg + "ffn_up.weight", {s.d_ff, s.d_model}, false});
    out.push_back(
        {hf + "mlp.down_proj.weight", gg + "ffn_down.weight", {s.d_model, s.d_ff}, false});
  }
  out.push_back({"model.norm.weight", "output_norm.weight", {s.d_model}, true});
  if (!s.tied_embeddings) {
    out.push_back({"lm_head.weight", "output.weight", {vocab, s.d_model}, false});
  }
  return out;
}

void validate_spec(const TinyModelSpec& s) {
  if (s.n_layers < 1 || s.d_model < 1 || s.n_heads < 1 || s.n_kv_heads < 1 || s.head_dim < 2 ||
      s.d_ff < 1 || s.context_length < 1) {
    throw InvalidArgument("tiny model: every size must be positive (head_dim >= 2)");
  }
  if (s.n_heads % s.n_kv_heads != 0 || s.head_dim % 2 != 0) {
    throw InvalidArgument("tiny model: n_heads must be a multiple of n_kv_heads and head_dim even");
  }
  if (s.architecture != "llama" && s.architecture != "qwen2" && s.architecture != "qwen3" &&
      s.architecture != "gemma2" && s.architecture != "gemma3" && s.architecture != "granite") {
    throw InvalidArgument("tiny model: architecture '" + s.architecture +
                          "' (llama, qwen2, qwen3, gemma2, gemma3 or granite)");
  }
}

/// llama.cpp convert_hf_to_gguf.py `LlamaModel.permute`:
///   w.reshape(n_head, 2, rows / n_head / 2, cols).swapaxes(1, 2).reshape(rows, cols)
/// Output row (h, i, j) = input row (h, j, i): head h's two rotate-half halves are
/// interleaved so that RoPE "normal" mode (adjacent pairs) computes what HF's neox does.
std::vector<float> permute_qk(const std::vector<float>& w, int64_t rows, int64_t cols,
                              int64_t n_head) {
  const int64_t half = rows / n_head / 2;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t dst_row = (h * half + i) * 2 + j;
        const int64_t src_row = (h * 2 + j) * half + i;
        std::copy_n(w.begin() + src_row * cols, cols, out.begin() + dst_row * cols);
      }
    }
  }
  return out;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// llama.cpp llama_ftype for a model whose matrices are all `dtype`.
uint32_t gguf_file_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q4_1: return 3;
    case DType::Q8_0: return 7;
    case DType::Q5_0: return 8;  // LLAMA_FTYPE_MOSTLY_Q5_0
    case DType::Q5_1: return 9;  // LLAMA_FTYPE_MOSTLY_Q5_1
    case DType::BF16: return 32;
    case DType::Q4_K: return 15;  // LLAMA_FTYPE_MOSTLY_Q4_K_M
    case DType::Q6_K: return 18;  // LLAMA_FTYPE_MOSTLY_Q6_K
    case DType::Q3_0:
    case DType::Q3_1: return 1024;  // LIO's own blocks: LLAMA_FTYPE_GUESSED
  }
  return 0;
}

// The dtype a HF safetensors file can hold for a GGUF dtype: F16/BF16 kept, else F32.
DType hf_dtype(DType dtype) {
  return dtype == DType::F16 || dtype == DType::BF16 ? dtype : DType::F32;
}

const char* torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    default: return "float32";
  }
}

// The shortest decimal that reads back as `value` (1e-5f -> 1e-05, not 9.99999974e-06), so
// config.json looks like one transformers writes and parses back to the same float.
double short_decimal(float value) {
  char buf[32];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value);
  *result.ptr = '\0';
  return std::strtod(buf, nullptr);
}

void write_json(const std::string& path, const ordered_json& j) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw InvalidArgument("tiny model: cannot write '" + path + "'");
  out << j.dump(2) << "\n";
  if (!out) throw InvalidArgument("tiny model: write to '" + path + "' failed");
}

}  // namespace

// =========================================================================================
// Public API
// =========================================================================================

const std::vector<float>& TinyModelTensors::get(const std::string& hf_name) const {
  for (const auto& [name, values] : tensors) {
    if (name == hf_name) return values;
  }
  throw InvalidArgument("tiny model has no tensor '" + hf_name + "'");
}

TinyModelTensors make_tiny_tensors(const TinyModelSpec& spec) {
  validate_spec(spec);
  NormalSource normal(spec.seed);
  TinyModelTensors out;
  for (const TensorSpec& t : tensor_specs(spec)) {
    int64_t n_elems = 1;
    for (int64_t d : t.shape) n_elems *= d;
    std::vector<float> values(static_cast<size_t>(n_elems));
    for (float& v : values)
      v = t.is_norm ? normal.next(1.0f, 0.1f) : normal.next(0.0f, spec.init_std);
    out.tensors.emplace_back(t.hf_name, std::move(values));
  }
  return out;
}

void write_tiny_gguf(const std::string& path, const TinyModelSpec& spec) {
  const TinyModelTensors tensors = make_tiny_tensors(spec);
  const Vocab vocab = make_vocab(spec);
  const auto u32 = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };

  GgufWriter w;
  const std::string& arch = spec.architecture;
  const bool llama = arch == "llama" || arch == "granite";  // RopeStyle::Normal: Q/K permuted
  w.set("general.architecture", GgufValue::str(arch));
  w.set("general.name", GgufValue::str("lio-tiny-" + arch));
  w.set("general.file_type", GgufValue::u32(gguf_file_type(spec.weight_dtype)));
  w.set("general.quantization_version", GgufValue::u32(2));
  w.set(arch + ".block_count", u32(spec.n_layers));
  w.set(arch + ".context_length", u32(spec.context_length));
  w.set(arch + ".embedding_length", u32(spec.d_model));
  w.set(arch + ".feed_forward_length", u32(spec.d_ff));
  w.set(arch + ".attention.head_count", u32(spec.n_heads));
  w.set(arch + ".attention.head_count_kv", u32(spec.n_kv_heads));
  w.set(arch + ".attention.key_length", u32(spec.head_dim));
  w.set(arch + ".attention.value_length", u32(spec.head_dim));
  w.set(arch + ".rope.freq_base", GgufValue::f32(spec.rope_theta));
  w.set(arch + ".attention.layer_norm_rms_epsilon", GgufValue::f32(spec.rms_norm_eps));
  w.set(arch + ".vocab_size", u32(spec.vocab_size()));
  w.set(arch + ".rope.dimension_count", u32(spec.head_dim));
  if (arch == "gemma3" || arch == "gemma2") w.set(arch + ".attention.sliding_window", u32(spec.sliding_window));
  if (arch == "gemma2") {
    w.set("gemma2.attn_logit_softcapping", GgufValue::f32(spec.attn_softcap));
    w.set("gemma2.final_logit_softcapping", GgufValue::f32(spec.final_softcap));
  }
  if (arch == "granite") {  // convert_hf_to_gguf.py's GraniteModel keys
    w.set("granite.embedding_scale", GgufValue::f32(spec.embedding_scale));
    w.set("granite.residual_scale", GgufValue::f32(spec.residual_scale));
    w.set("granite.attention.scale", GgufValue::f32(spec.attention_scale));
    w.set("granite.logit_scale", GgufValue::f32(spec.logit_scale));
  }
  w.set("tokenizer.ggml.model", GgufValue::str("gpt2"));
  w.set("tokenizer.ggml.pre", GgufValue::str("smollm"));
  w.set("tokenizer.ggml.tokens", GgufValue::str_array(vocab.tokens));
  w.set("tokenizer.ggml.token_type", GgufValue::i32_array(vocab.token_types));
  w.set("tokenizer.ggml.merges", GgufValue::str_array(spec.merges));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(kBosId));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(kEosId));
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(false));
  w.set("tokenizer.chat_template",
        GgufValue::str(spec.chat_template.empty() ? kChatMlTemplate : spec.chat_template));

  for (const TensorSpec& t : tensor_specs(spec)) {
    const std::vector<float>& values = tensors.get(t.hf_name);
    DType dtype = spec.weight_dtype;
    if (t.is_norm || t.is_bias) dtype = DType::F32;
    if (t.gguf_name == "token_embd.weight") dtype = spec.embd_dtype;
    if (llama && ends_with(t.gguf_name, ".attn_q.weight")) {
      w.add_tensor_f32(t.gguf_name, dtype, t.shape,
                       permute_qk(values, t.shape[0], t.shape[1], spec.n_heads));
    } else if (llama && ends_with(t.gguf_name, ".attn_k.weight")) {
      w.add_tensor_f32(t.gguf_name, dtype, t.shape,
                       permute_qk(values, t.shape[0], t.shape[1], spec.n_kv_heads));
    } else {
      w.add_tensor_f32(t.gguf_name, dtype, t.shape, values);
    }
  }
  w.write(path);
}

void write_tiny_hf_dir(const std::string& dir, const TinyModelSpec& spec, int n_shards) {
  const TinyModelTensors tensors = make_tiny_tensors(spec);
  const Vocab vocab = make_vocab(spec);
  const std::vector<TensorSpec> specs = tensor_specs(spec);
  if (n_shards < 1 || n_shards > static_cast<int>(specs.size())) {
    throw InvalidArgument("tiny model: n_shards is " + std::to_string(n_shards) + ", expected 1.." +
                          std::to_string(specs.size()));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InvalidArgument("tiny model: cannot create '" + dir + "': " + ec.message());

  // ---- config.json ----
  const bool gemma3 = spec.architecture == "gemma3";
  const bool gemma = gemma3 || spec.architecture == "gemma2";
  const std::string hf_class = spec.architecture == "qwen2"     ? "Qwen2ForCausalLM"
                               : spec.architecture == "qwen3"   ? "Qwen3ForCausalLM"
                               : spec.architecture == "gemma2"  ? "Gemma2ForCausalLM"
                               : spec.architecture == "granite" ? "GraniteForCausalLM"
                               : gemma3                         ? "Gemma3ForCausalLM"
                                                                : "LlamaForCausalLM";
  ordered_json config = {
      {"architectures", {hf_class}},
      {"model_type", gemma3 ? std::string("gemma3_text") : spec.architecture},
      {"hidden_size", spec.d_model},
      {"intermediate_size", spec.d_ff},
      {"num_attention_heads", spec.n_heads},
      {"num_hidden_layers", spec.n_layers},
      {"num_key_value_heads", spec.n_kv_heads},
      {"rms_norm_eps", short_decimal(spec.rms_norm_eps)},
      {"rope_theta", short_decimal(spec.rope_theta)},
      {"max_position_embeddings", spec.context_length},
      {"vocab_size", spec.vocab_size()},
      {"tie_word_embeddings", spec.tied_embeddings},
      {"head_dim", spec.head_dim},
      {gemma ? "hidden_activation" : "hidden_act", gemma ? "gelu_pytorch_tanh" : "silu"},
      {"bos_token_id", kBosId},
      {"eos_token_id", kEosId},
      {"torch_dtype", torch_dtype_name(hf_dtype(spec.weight_dtype))},
  };
  if (gemma3) {  // transformers' Gemma3TextConfig keys; layer_types as transformers >= 4.53 writes it
    ordered_json types = ordered_json::array();
    for (int64_t l = 0; l < spec.n_layers; ++l) types.push_back(l % 6 == 5 ? "full_attention" : "sliding_attention");
    config["sliding_window"] = spec.sliding_window;
    config["layer_types"] = types;
    config["rope_local_base_freq"] = 10000.0;
    config["query_pre_attn_scalar"] = spec.head_dim;
    config["final_logit_softcapping"] = nullptr;
    config["attn_logit_softcapping"] = nullptr;
    config["rope_scaling"] = nullptr;
  }
  if (spec.architecture == "gemma2") {  // transformers' Gemma2Config keys (layer_types: >= 4.53)
    ordered_json types = ordered_json::array();
    for (int64_t l = 0; l < spec.n_layers; ++l) types.push_back(l % 2 == 1 ? "full_attention" : "sliding_attention");
    config["sliding_window"] = spec.sliding_window;
    config["layer_types"] = types;
    config["query_pre_attn_scalar"] = spec.head_dim;
    config["attn_logit_softcapping"] = short_decimal(spec.attn_softcap);
    config["final_logit_softcapping"] = short_decimal(spec.final_softcap);
  }
  if (spec.architecture == "granite") {  // transformers' GraniteConfig multipliers
    config["embedding_multiplier"] = short_decimal(spec.embedding_scale);
    config["residual_multiplier"] = short_decimal(spec.residual_scale);
    config["attention_multiplier"] = short_decimal(spec.attention_scale);
    config["logits_scaling"] = short_decimal(spec.logit_scale);
  }
  write_json((fs::path(dir) / "config.json").string(), config);

  // ---- tokenizer.json ----
  ordered_json added = ordered_json::array();
  for (int id = 0; id < 3; ++id) {
    added.push_back({{"id", id},
                     {"content", kControlTokens[id]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  ordered_json vocab_json = ordered_json::object();
  for (size_t id = 0; id < vocab.tokens.size(); ++id) vocab_json[vocab.tokens[id]] = id;
  ordered_json byte_level = {{"type", "ByteLevel"},
                             {"add_prefix_space", false},
                             {"trim_offsets", true},
                             {"use_regex", true}};
  ordered_json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level}}}},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab_json},
        {"merges", spec.merges}}},
  };
  write_json((fs::path(dir) / "tokenizer.json").string(), tokenizer);

  // ---- tokenizer_config.json ----
  ordered_json tokenizer_config = {
      {"bos_token", kControlTokens[kBosId]},     {"eos_token", kControlTokens[kEosId]},
      {"chat_template", spec.chat_template.empty() ? std::string(kChatMlTemplate) : spec.chat_template},
      {"add_bos_token", false},
      {"model_max_length", spec.context_length}, {"tokenizer_class", "GPT2Tokenizer"},
  };
  write_json((fs::path(dir) / "tokenizer_config.json").string(), tokenizer_config);

  // ---- weights: tensors split into n_shards runs of near-equal count ----
  const size_t n_tensors = specs.size();
  ordered_json weight_map = ordered_json::object();
  int64_t total_bytes = 0;
  for (int k = 0; k < n_shards; ++k) {
    SafetensorsWriter w;
    w.set_metadata("format", "pt");
    const size_t begin = n_tensors * k / n_shards;
    const size_t end = n_tensors * (k + 1) / n_shards;
    char shard_name[64];
    std::snprintf(shard_name, sizeof(shard_name), "model-%05d-of-%05d.safetensors", k + 1,
                  n_shards);
    for (size_t i = begin; i < end; ++i) {
      const TensorSpec& t = specs[i];
      DType dtype = hf_dtype(spec.weight_dtype);
      if (t.is_norm || t.is_bias) dtype = DType::F32;
      if (t.hf_name == "model.embed_tokens.weight") dtype = hf_dtype(spec.embd_dtype);
      std::vector<float> values = tensors.get(t.hf_name);
      if (gemma && t.is_norm) {  // Gemma's HF norms hold w, its layer multiplies by 1 + w
        for (float& v : values) v -= 1.0f;
      }
      w.add_tensor_f32(t.hf_name, dtype, t.shape, values);
      total_bytes += dtype_row_bytes(dtype, static_cast<int64_t>(values.size()));
      weight_map[t.hf_name] = shard_name;
    }
    w.write(
        (fs::path(dir) / (n_shards == 1 ? std::string("model.safetensors") : shard_name)).string());
  }
  if (n_shards > 1) {
    ordered_json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    write_json((fs::path(dir) / "model.safetensors.index.json").string(), index);
  }
}

int write_read_only_mix(const std::string& src, const std::string& mix_path, const std::string& f32_path,
                        uint32_t seed) {
  const GgufFile in = GgufFile::open(src);
  GgufWriter mix, f32;
  for (const auto& [key, value] : in.metadata()) {
    mix.set(key, value);
    f32.set(key, value);
  }
  int replaced = 0;
  for (const GgufTensorInfo& t : in.tensors()) {
    const std::span<const std::byte> bytes(t.data, static_cast<size_t>(t.size_bytes));
    DType type = DType::F32;
    if (t.name.ends_with("ffn_up.weight") || t.name.ends_with("attn_q.weight")) type = DType::Q4_K;
    if (t.name.ends_with("ffn_down.weight") || t.name.ends_with("attn_output.weight")) type = DType::Q6_K;
    if (t.name.ends_with("attn_k.weight")) type = DType::Q5_0;
    if (t.name.ends_with("attn_v.weight")) type = DType::Q5_1;
    if (type == DType::F32) {
      mix.add_tensor(t.name, t.dtype, t.shape, bytes);
      f32.add_tensor(t.name, t.dtype, t.shape, bytes);
      continue;
    }
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const std::vector<std::byte> raw = random_read_only_blocks(type, rows, cols, seed++);
    mix.add_tensor(t.name, type, t.shape, raw);
    std::vector<float> dense(static_cast<size_t>(rows * cols));
    const int64_t row_bytes = dtype_row_bytes(type, cols);
    for (int64_t r = 0; r < rows; ++r) dequantize_row(type, raw.data() + r * row_bytes, dense.data() + r * cols, cols);
    f32.add_tensor(t.name, DType::F32, t.shape, std::as_bytes(std::span<const float>(dense)));
    ++replaced;
  }
  mix.write(mix_path);
  f32.write(f32_path);
  return replaced;
}

std::string make_temp_dir(const std::string& prefix) {
  std::string tmpl = (fs::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    throw InvalidArgument("cannot create a temp dir from '" + tmpl + "': " + std::strerror(errno));
  }
  return tmpl;
}

}  // namespace lio::testing
