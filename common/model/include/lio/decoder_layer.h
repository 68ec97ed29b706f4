// decoder_layer.h — chapter 01, Task 5: one Llama decoder layer over the KV cache, the layer
// every llama-family model (SmolLM2, the default) runs on one rank.
#pragma once

#include <cstdint>

#include "lio/architecture.h"

namespace lio {

/// Chapter 01, Task 5 (lesson docs/01_kv_cache.md, "A decoder layer on the cache" and "Task 5"):
/// one pre-norm Llama decoder layer (Touvron et al. 2023, "LLaMA", sec. 2.2: RMSNorm, grouped-
/// query attention with RoPE, SwiGLU MLP) for the n = p.n_tokens rows of a batch, on one rank.
///
/// In: p.x (n, d_model), the residual stream entering layer `layer`; the batch's positions, slot
/// mapping and block tables in p.view; the layer's weights through p.be as WeightRef{kind,
/// layer} (AttnNorm, Wq, Wk, Wv, Wo, FfnNorm, Gate, Up, Down; lio/backend.h lists their shapes);
/// the layer's RoPE base p.config.layer_rope_theta(layer).
/// Out: p.x holds the layer's output, the equations of the lesson's "A decoder layer on the
/// cache", to the backend's rounding. p.pool holds every row's K and V of this layer at the row's
/// slot, rotated as attention reads them, so that later steps attend to these tokens without
/// recomputing them.
/// Scratch: p.xn (n, d_model), p.q (n, n_heads * head_dim), p.k and p.v (n, n_kv_heads *
/// head_dim), p.attn (n, n_heads * head_dim), p.gate and p.up (n, d_ff): any contents on entry,
/// any on return. Use only p.be's operators (lio/backend.h): the same code then runs on the CPU
/// and on the GPU, inside CUDA graphs too, and a fused operator's contract says which of its
/// outputs it may leave unwritten.
/// Requires p.tp.size == 1 and a GQA model (config.is_mla() false): the engine runs tensor-
/// parallel ranks (chapter 08) and MLA models (chapter 02) through its own blocks.
/// Throws as the operators it calls (InvalidArgument for a bad shape, CudaError on the GPU).
void llama_decoder_layer(LayerPass& p, int64_t layer);

}  // namespace lio
