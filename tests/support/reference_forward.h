// reference_forward.h — a Llama forward pass written from the equations, for tests of the
// engine's forward pass on tiny models (tiny_model.h).
#pragma once

#include <cstdint>
#include <vector>

#include "tiny_model.h"

namespace lio::testing {

/// Logits (tokens.size(), spec.vocab_size()), row-major, of the llama-family model `spec`
/// describes (make_tiny_tensors' weights, HF layout) for `tokens` at positions 0 .. n - 1:
/// pre-norm RMSNorm (eps spec.rms_norm_eps), GQA causal attention with rotate-half RoPE (base
/// spec.rope_theta), SwiGLU MLP, final RMSNorm and the LM head (Touvron et al. 2023, sec. 2.2).
/// Double precision throughout, written from the equations with no code shared with lio.
/// Ids must be below spec.vocab_size() (not checked).
std::vector<double> reference_logits(const TinyModelSpec& s, const std::vector<int32_t>& tokens);

}  // namespace lio::testing
