// rope.cpp — rotary position embedding on the CPU (Su et al. 2021, RoFormer, eq. 34).
//
// For one head of width d and a token at position p, pair k (k in [0, d/2)) is rotated by
//   angle = p * theta_k,  theta_k = base^(-2k/d):
//   (a, b) -> (a cos - b sin, a sin + b cos).
// RopeStyle::Normal pairs (x[2k], x[2k+1])       — llama.cpp mode 0, GGUF llama weights.
// RopeStyle::Neox   pairs (x[k], x[k + d/2])     — llama.cpp mode 2 (NEOX), Hugging Face.
//
// Numerics: theta_k, the angle p * theta_k and its cos/sin are computed in double and rounded
// to float once, so cos/sin are correctly rounded floats of the exact angle (for p up to 2^24).
// References differ slightly at large p: HF computes inv_freq and p * inv_freq in float32
// (angle error ~ p * 6e-8 rad), llama.cpp builds theta_k by repeated float multiplication.
// The rotation itself is float: each output is within ~2 ulp of the exact rotation of its inputs.
#include <cmath>
#include <string>
#include <vector>

#include "cpu_ops.h"
#include "lio/error.h"

namespace lio::cpu {

namespace {

// Elements per call below which the OpenMP team is not worth starting: one decode token of a
// 32-head, 128-wide model is 2048 rotations, about a microsecond.
constexpr int64_t kParallelMinElems = int64_t{1} << 15;

/// Fills cos_sin (2 * half floats: cos_k at [2k], sin_k at [2k+1]) for position `pos`.
void fill_cos_sin(int32_t pos, int64_t head_dim, double theta_base, float* cos_sin) {
  const int64_t half = head_dim / 2;
  for (int64_t k = 0; k < half; ++k) {
    const double theta_k =
        std::pow(theta_base, -2.0 * static_cast<double>(k) / static_cast<double>(head_dim));
    const double angle = static_cast<double>(pos) * theta_k;
    cos_sin[2 * k] = static_cast<float>(std::cos(angle));
    cos_sin[2 * k + 1] = static_cast<float>(std::sin(angle));
  }
}

/// Rotates one head (head_dim floats) in place with a precomputed cos/sin table.
template <RopeStyle kStyle>
void rotate_head(float* xh, const float* cos_sin, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  for (int64_t k = 0; k < half; ++k) {
    const float c = cos_sin[2 * k];
    const float s = cos_sin[2 * k + 1];
    // Indices of the pair rotated together.
    const int64_t i0 = (kStyle == RopeStyle::Normal) ? 2 * k : k;
    const int64_t i1 = (kStyle == RopeStyle::Normal) ? 2 * k + 1 : k + half;
    const float a = xh[i0];
    const float b = xh[i1];
    xh[i0] = a * c - b * s;
    xh[i1] = a * s + b * c;
  }
}

template <RopeStyle kStyle>
void rope_impl(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads,
               int64_t head_dim, double theta_base) {
  const int64_t token_elems = n_heads * head_dim;
#pragma omp parallel if (n_tokens > 1 && n_tokens * token_elems >= kParallelMinElems)
  {
    // One cos/sin table per thread, reused by every head of a token.
    std::vector<float> cos_sin(static_cast<size_t>(head_dim));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < n_tokens; ++t) {
      fill_cos_sin(positions[t], head_dim, theta_base, cos_sin.data());
      float* xt = x + t * token_elems;
      for (int64_t h = 0; h < n_heads; ++h) {
        rotate_head<kStyle>(xt + h * head_dim, cos_sin.data(), head_dim);
      }
    }
  }
}

}  // namespace

void rope(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads,
          int64_t head_dim, float theta_base, RopeStyle style) {
  if (n_tokens < 0 || n_heads <= 0 || head_dim <= 0 || head_dim % 2 != 0) {
    throw InvalidArgument("cpu::rope: need n_tokens >= 0, n_heads > 0, even head_dim > 0; got "
                          "n_tokens=" + std::to_string(n_tokens) +
                          " n_heads=" + std::to_string(n_heads) +
                          " head_dim=" + std::to_string(head_dim));
  }
  if (!(theta_base > 0.0f) || !std::isfinite(theta_base)) {
    throw InvalidArgument("cpu::rope: theta_base must be finite and > 0, got " +
                          std::to_string(theta_base));
  }
  if (n_tokens == 0) return;
  if (x == nullptr || positions == nullptr) {
    throw InvalidArgument("cpu::rope: null pointer (x or positions)");
  }
  if (style == RopeStyle::Normal) {
    rope_impl<RopeStyle::Normal>(x, positions, n_tokens, n_heads, head_dim, theta_base);
  } else {
    rope_impl<RopeStyle::Neox>(x, positions, n_tokens, n_heads, head_dim, theta_base);
  }
}

}  // namespace lio::cpu
