// tiny_model.h — writes tiny random-weight Llama models with LIO's own GGUF and
// safetensors writers, so unit tests run in milliseconds without the real model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lio/dtype.h"

namespace lio::testing {

/// Shape and contents of a tiny model. Weights are drawn from N(0, init_std) with `seed`;
/// norm weights from 1 + N(0, 0.1). The vocabulary is byte-level BPE: 3 control tokens
/// (<|endoftext|> = 0, <|im_start|> = 1, <|im_end|> = 2), the 256 byte tokens in GPT-2's
/// bytes_to_unicode order, then one token per merge in `merges`.
struct TinyModelSpec {
  /// The family (lio/architecture.h): "llama"; "qwen2" adds Q/K/V biases (drawn like matrices),
  /// "qwen3" QK-norm weights (drawn like norms), "gemma3" QK-norm and post-norm weights plus
  /// gemma3.attention.sliding_window, "gemma2" the post-norms plus its window and soft-caps,
  /// "granite" llama's tensors plus its four scales. Q/K rows are stored permuted for llama and
  /// granite (RopeStyle::Normal), unpermuted (NEOX RoPE) for the others, as
  /// convert_hf_to_gguf.py stores them.
  std::string architecture = "llama";
  int64_t sliding_window = 8;  ///< gemma2 / gemma3: the window of their local layers
  float attn_softcap = 1.0f;   ///< gemma2 only: attn_logit_softcapping (small, so tanh bends)
  float final_softcap = 2.0f;  ///< gemma2 only: final_logit_softcapping
  /// granite only: embedding_multiplier, residual_multiplier, attention_multiplier (the softmax
  /// scale) and logits_scaling; none 1 (or 1/sqrt(head_dim)), so each is seen
  float embedding_scale = 3.0f;
  float residual_scale = 0.5f;
  float attention_scale = 0.3f;
  float logit_scale = 4.0f;
  int64_t n_layers = 2;
  int64_t d_model = 64;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 2;
  int64_t head_dim = 16;
  int64_t d_ff = 128;
  int64_t context_length = 256;
  float rope_theta = 10000.0f;
  float rms_norm_eps = 1e-5f;
  DType weight_dtype = DType::F32;  ///< dtype of the 2-D matrices (norms stay F32)
  DType embd_dtype = DType::F32;    ///< dtype of token_embd
  bool tied_embeddings = true;      ///< no output.weight / lm_head.weight when true
  float init_std = 0.2f;
  uint64_t seed = 1;
  /// Merges as "left right" in vocabulary-string form (e.g. "Ġ t"), rank = position.
  std::vector<std::string> merges = {"Ġ t", "h e", "Ġt he", "i n", "Ġ a"};
  /// tokenizer.chat_template (GGUF) / chat_template (tokenizer_config.json); empty means
  /// ChatML (SmolLM2's template).
  std::string chat_template;

  int64_t vocab_size() const { return 3 + 256 + static_cast<int64_t>(merges.size()); }
};

/// Writes `path` as a GGUF v3 model of spec.architecture: <arch>.* keys, tokenizer.ggml.* keys
/// (model "gpt2", pre "smollm", spec.chat_template or ChatML), tensors named as llama.cpp does
/// (token_embd.weight, blk.N.attn_q.weight, ..., output_norm.weight [, output.weight];
/// qwen2: blk.N.attn_{q,k,v}.bias; qwen3: blk.N.attn_{q,k}_norm.weight).
/// For llama, Q and K weights are stored permuted for RopeStyle::Normal exactly as llama.cpp's
/// convert_hf_to_gguf.py `permute` does, so the GGUF and HF files of one spec are the
/// same model and must give the same logits.
/// Throws InvalidArgument on an inconsistent spec (n_heads % n_kv_heads != 0, odd head_dim,
/// a merge whose parts are not yet in the vocabulary or whose result is a duplicate).
void write_tiny_gguf(const std::string& path, const TinyModelSpec& spec);

/// Writes a Hugging Face directory: config.json (LlamaForCausalLM, Qwen2ForCausalLM,
/// Qwen3ForCausalLM, Gemma2ForCausalLM, GraniteForCausalLM, model_type = spec.architecture; or
/// Gemma3ForCausalLM, model_type gemma3_text; gemma2/3 with sliding_window and layer_types, their
/// norms stored as w = GGUF's value - 1; granite with its four multipliers), tokenizer.json
/// (byte-level BPE with the same vocabulary and merges), tokenizer_config.json, and
/// model.safetensors — or, with n_shards > 1, model-0000K-of-0000N.safetensors shards plus
/// model.safetensors.index.json. Weights in HF layout (unpermuted Q/K). The 2-D matrices
/// are stored as `weight_dtype` when it is F16 or BF16 and as F32 otherwise, the embedding
/// likewise from `embd_dtype`, norms always F32 — so the GGUF and HF forms of an F32/F16/BF16
/// spec hold bit-identical weights. config.json's torch_dtype follows the matrices.
/// Creates `dir` if needed. Throws InvalidArgument unless 1 <= n_shards <= tensor count.
void write_tiny_hf_dir(const std::string& dir, const TinyModelSpec& spec, int n_shards = 1);

/// The model's tensors in HF naming and layout (row-major f32), for tests that compute
/// a reference forward pass. Same values write_tiny_gguf / write_tiny_hf_dir store
/// (before quantization).
struct TinyModelTensors {
  std::vector<std::pair<std::string, std::vector<float>>> tensors;  ///< HF name -> values
  const std::vector<float>& get(const std::string& hf_name) const;
};
TinyModelTensors make_tiny_tensors(const TinyModelSpec& spec);

/// Copies the GGUF at `src` twice: to `mix_path` with a llama.cpp Q4_K_M-like mix of the types
/// LIO reads but cannot write (attn_q, ffn_up: Q4_K; attn_output, ffn_down: Q6_K; attn_k: Q5_0;
/// attn_v: Q5_1; random blocks from random_read_only_blocks), and to `f32_path` with those
/// same matrices dequantized to f32 (lio::dequantize_row). Other tensors are copied as they
/// are. Returns how many matrices were replaced (6 per layer). The model's d_model and d_ff
/// must be multiples of 256 (whole K-quant super-blocks). Throws what GgufFile / GgufWriter do.
int write_read_only_mix(const std::string& src, const std::string& mix_path, const std::string& f32_path,
                        uint32_t seed = 1);

/// A fresh empty directory under the system temp dir, unique per call.
std::string make_temp_dir(const std::string& prefix);

}  // namespace lio::testing
