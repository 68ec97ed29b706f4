// llama.cpp — the Llama decoder layer (Touvron et al. 2023, "LLaMA", sec. 2.2; llama.cpp's
// llm_build_llama): pre-norm RMSNorm, grouped-query attention with RoPE, SwiGLU MLP.
//   h = x + W_o . Attn(RoPE(W_q . RMSNorm(x)), RoPE(W_k . RMSNorm(x)), W_v . RMSNorm(x))
//   y = h + W_down . (silu(W_gate . RMSNorm(h)) * (W_up . RMSNorm(h)))
// SmolLM2, Llama 2/3 and Mistral GGUF files are this family. RoPE pairs adjacent dimensions
// (llama.cpp's "normal" mode): convert_hf_to_gguf.py permutes the Q/K rows so that this equals
// Hugging Face's rotate-half on the original weights. A model chapter 02 converted to MLA runs
// the family's MLA variant (arch/mla.cpp, kLlamaMla; layer_architecture picks it).
//
// On one rank the layer is chapter 01's Task 5 (lio/decoder_layer.h): the learner's code when
// LIO_EXERCISES names 01. On a rank of a tensor-parallel group it is chapter 08's Task 6
// (lio/tp_decoder_layer.h: column-parallel Q/K/V and gate/up, row-parallel W_o and W_down, two
// all-reduces): the learner's when LIO_EXERCISES names 08.
#include "blocks.h"
#include "families.h"
#include "lio/decoder_layer.h"
#include "lio/model_config.h"
#include "lio/tp_decoder_layer.h"

namespace lio::arch {

namespace {

void llama_layer(LayerPass& p, int64_t l) {
  if (p.tp.size == 1) {
    llama_decoder_layer(p, l);  // chapter 01, Task 5
  } else {
    tp_decoder_layer(p, l);  // chapter 08, Task 6
  }
}

}  // namespace

const Architecture kLlama{
    .name = "llama",
    .summary = "RMSNorm, GQA + RoPE (adjacent pairs), SwiGLU (SmolLM2, Llama 2/3, Mistral)",
    .rope_style = RopeStyle::Normal,
    .tensors = kLlamaTensors,
    .layer = llama_layer,
};

}  // namespace lio::arch
