// rope_style.h — which dimensions rotary position embedding rotates together. A base type:
// the kernels (kernels/cpu, kernels/cuda) take it, and ModelConfig records it per model.
#pragma once

namespace lio {

/// Which pairs of a head's dimensions RoPE rotates together.
/// Source: RoFormer (Su et al. 2021) eq. 34; llama.cpp ggml_rope modes 0 and 2.
enum class RopeStyle {
  Normal,  ///< interleaved pairs (x[2i], x[2i+1]) — GGUF llama (Q/K stored permuted for it)
  Neox,    ///< rotate-half pairs (x[i], x[i + d/2]) — Hugging Face checkpoints
};

}  // namespace lio
