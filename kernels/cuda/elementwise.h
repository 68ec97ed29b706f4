// elementwise.h — the forward pass's elementwise and copy operators on the GPU (elementwise.cu): bias
// add, SwiGLU, GeGLU, residual add, scaling and the logits rows' gather.
//
// Launcher conventions (README.md in this folder): device pointers, an explicit stream, shapes
// checked on the host (lio::InvalidArgument), launches checked (lio::cuda::CudaError).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lio::cuda {

/// Bias add: y[r][j] += bias[j] for r < n_rows, j < dim (qwen2's Q/K/V projection biases), the
/// same arithmetic as cpu::add_bias. y: (n_rows, dim), bias: (dim) device pointers.
/// Preconditions (throw InvalidArgument): non-null pointers, n_rows >= 0, dim > 0.
void add_bias(float* y, const float* bias, int64_t n_rows, int64_t dim, cudaStream_t stream);

/// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer", eq. 6 with Swish_1 = SiLU):
/// out[i] = gate[i] / (1 + exp(-gate[i])) * up[i], elementwise over n values, f32, the same
/// formula as cpu::swiglu. gate, up, out: (n) device pointers; out may alias gate or up.
/// Preconditions (throw InvalidArgument): non-null pointers, n >= 0 (0 launches nothing).
void swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);

/// GeGLU (Shazeer 2020, eq. 5) with GELU in its tanh form, as Gemma trains it:
/// out[i] = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) up[i], g = gate[i]; f32, the formula
/// of cpu::geglu (tanhf vs std::tanh: agreement to a few ulp). gate, up, out: (n) device
/// pointers; out may alias gate or up. Preconditions (throw InvalidArgument): non-null pointers,
/// n >= 0 (0 launches nothing). Throws CudaError if the launch fails.
void geglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);

/// x[i] += y[i] over n values (Gemma 3's residual add after a post-norm); y may alias x. Same
/// preconditions and errors as swiglu().
void add(float* x, const float* y, int64_t n, cudaStream_t stream);

/// x[i] *= factor over n values (Gemma 3's embeddings x sqrt(d_model)). Same preconditions and
/// errors as swiglu().
void scale(float* x, float factor, int64_t n, cudaStream_t stream);

/// x[i] = cap * tanh(x[i] / cap) over n values (Gemma 2's final logit soft-capping; the formula
/// of cpu::softcap_scores, tanhf vs std::tanh: a few ulp). Preconditions (throw
/// InvalidArgument): cap > 0, a non-null pointer, n >= 0 (0 launches nothing). Throws CudaError
/// if the launch fails.
void softcap(float* x, float cap, int64_t n, cudaStream_t stream);

/// Row gather: out[i] = x[rows[i]] for i < n_rows, dim floats each — picks the rows whose
/// logits are wanted (ForwardBatch::logits_rows) before the final norm and LM head.
/// x: (>= max(rows) + 1, dim); rows: (n_rows) int32; out: (n_rows, dim); device pointers;
/// out must not overlap x. Row ids are NOT range-checked on the device (the caller checks
/// them on the host). A plain copy, one block per output row; it has no naive twin (it is its
/// own reference).
/// Preconditions (throw InvalidArgument): 0 <= n_rows <= INT32_MAX (0 launches nothing),
/// dim > 0, non-null pointers. Throws CudaError if the launch fails.
void gather_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t dim, float* out,
                 cudaStream_t stream);

}  // namespace lio::cuda
