// elementwise.cpp — the CPU's one-value-at-a-time operators: the bias add, SwiGLU and the embedding lookup.
#include <algorithm>
#include <cmath>
#include <string>

#include "cpu_ops.h"
#include "lio/dtype.h"
#include "lio/error.h"

namespace lio::cpu {

namespace {

// An FFN hidden row (e.g. 1536 or 14336 values) is too short to split across threads;
// prefill batches (n_tokens * ffn_dim) are not.
constexpr int64_t kParallelMinElems = int64_t{1} << 16;

}  // namespace

void add_bias(float* y, const float* bias, int64_t n_rows, int64_t dim) {
  if (n_rows < 0 || dim <= 0) {
    throw InvalidArgument("cpu::add_bias: need n_rows >= 0 and dim > 0, got n_rows=" + std::to_string(n_rows) +
                          " dim=" + std::to_string(dim));
  }
  if (n_rows == 0) return;
  if (y == nullptr || bias == nullptr) throw InvalidArgument("cpu::add_bias: null pointer (y or bias)");
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t j = 0; j < dim; ++j) y[r * dim + j] += bias[j];
}

void geglu(const float* gate, const float* up, float* out, int64_t n) {
  if (n < 0) throw InvalidArgument("cpu::geglu: n must be >= 0, got " + std::to_string(n));
  if (n == 0) return;
  if (gate == nullptr || up == nullptr || out == nullptr) throw InvalidArgument("cpu::geglu: null pointer (gate, up or out)");
  constexpr float kSqrt2OverPi = 0.7978845608028654f, kCoef = 0.044715f;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElems)
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + kCoef * x * x * x))) * up[i];
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  if (n < 0) throw InvalidArgument("cpu::swiglu: n must be >= 0, got " + std::to_string(n));
  if (n == 0) return;
  if (gate == nullptr || up == nullptr || out == nullptr) {
    throw InvalidArgument("cpu::swiglu: null pointer (gate, up or out)");
  }
  // silu(g) = g * sigmoid(g) = g / (1 + e^-g), in float. For g < -88, e^-g overflows to +inf
  // and the quotient is -0, which is the correct limit; no NaN arises for finite g.
#pragma omp parallel for schedule(static) if (n >= kParallelMinElems)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void embedding_row(const WeightMatrix& w, int64_t token, float* out) {
  if (token == -1 && out != nullptr) {  // a token another tensor-parallel rank embeds (chapter 08)
    std::fill(out, out + w.cols, 0.0f);
    return;
  }
  if (token < 0 || token >= w.rows) {
    throw InvalidArgument("cpu::embedding_row: token id " + std::to_string(token) +
                          " outside [0, " + std::to_string(w.rows) + ") of '" + w.name + "'");
  }
  if (w.data == nullptr || out == nullptr) {
    throw InvalidArgument("cpu::embedding_row: null data or output for '" + w.name + "'");
  }
  dequantize_row(w.dtype, w.row(token), out, w.cols);
}

}  // namespace lio::cpu
