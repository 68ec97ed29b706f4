// Published model shapes used by the chapter 01 grading tests.
// Sources: LLaMA (Touvron et al. 2023, Table 2), Llama 2 (Touvron et al. 2023, 70B uses
// GQA with 8 KV heads), Llama 3.1 8B config.json, SmolLM2-135M GGUF metadata.
#pragma once

#include "lio/model_config.h"

namespace lio::grade {

inline ModelConfig make_config(int64_t n_layers, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim) {
  ModelConfig c;
  c.architecture = "llama";
  c.n_layers = n_layers;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = head_dim;
  c.d_model = n_heads * head_dim;
  c.d_ff = 4 * c.d_model;
  c.vocab_size = 32000;
  c.context_length = 8192;
  return c;
}

inline ModelConfig llama_7b() { return make_config(32, 32, 32, 128); }      // MHA
inline ModelConfig llama2_70b() { return make_config(80, 64, 8, 128); }     // GQA, 8 KV heads
inline ModelConfig llama31_8b() { return make_config(32, 32, 8, 128); }     // GQA, 8 KV heads
inline ModelConfig smollm2_135m() { return make_config(30, 9, 3, 64); }     // GQA, 3 KV heads

}  // namespace lio::grade
