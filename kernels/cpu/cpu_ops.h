// cpu_ops.h — the CPU operators of the Llama forward pass (Eigen + OpenMP + hand loops).
// kernels/cuda declares the same operators for device pointers, one header per kernel
// (kernels/cuda/README.md).
//
// Shapes are written (outer, ..., inner), row-major, f32 unless stated.
//
// Where the bodies are: every operator here is defined in kernels/cpu/*.cpp except two chapter
// exercise points, declared here because the CPU backend calls them like any other operator:
//   decode_attention        chapter 01 Task 4, solutions|exercises/01_kv_cache/decode_attention.cpp
//   paged_decode_attention  chapter 04 Task 5, solutions|exercises/04_paged_attention/paged_decode_attention.cpp
// (the library lio_chNN links the solution or, with -DLIO_EXERCISES=NN, the learner's stub).
#pragma once

#include <cstdint>
#include <span>

#include "lio/rope_style.h"
#include "lio/tensor.h"

/// CPU operators of the Llama forward pass (f32, row-major).
namespace lio::cpu {

/// RMSNorm (Zhang & Sennrich 2019, eq. 4): out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight.
/// x, out: (n_rows, dim) (may alias); weight: (dim).
void rmsnorm(const float* x, const float* weight, float* out, int64_t n_rows, int64_t dim,
             float eps);

/// Rotary position embedding in place (Su et al. 2021, RoFormer eq. 34), theta_i =
/// base^(-2i/head_dim). x: (n_tokens, n_heads, head_dim); positions: (n_tokens).
/// `style` picks the pairing (RopeStyle::Normal interleaved, RopeStyle::Neox rotate-half).
void rope(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads,
          int64_t head_dim, float theta_base, RopeStyle style);

/// Precision of the activations inside matmul (see matmul()). Int8PerToken is W8A8's one
/// scale per token: the caller rounds the rows (CpuBackend: chapter 03's Task 6) and calls
/// matmul_int8; matmul() itself rejects it.
enum class MatmulActivations { F32, Int8, Int8PerToken };

/// y = x W^T for a batch of rows, or y += x W^T when `accumulate`: x (n, w.cols),
/// y (n, w.rows), no overlap, w as stored (any dtype LIO reads). Runs the packed kernels
/// (packed_matmul.h) on a copy of w packed for this call: for tests, tools and one-off
/// products — the engine packs its weights once at load. Batch-invariant and the same on every
/// instruction set: each output element is one fixed sequence of operations (packed_matmul.h);
/// F32 activations multiply the exact dequantized weights, so a quantized matrix gives bit for
/// bit the output of its dequantized f32 copy. `activations`: F32, or Int8 (each 32-element
/// block of x rounded to int8 with its own scale, ggml's Q8 activations, and integer block dot
/// products) on block-quantized weights (F32 / F16 / BF16 always use f32 activations); see
/// docs/engine.md for the measured trade. Throws InvalidArgument on a null pointer, n <= 0,
/// Int8PerToken (use matmul_int8), or a quantized weight whose cols is not a whole number of
/// its blocks (32 elements; 256 for the K-quants Q4_K and Q6_K).
void matmul(const WeightMatrix& w, const float* x, float* y, int64_t n, bool accumulate = false,
            MatmulActivations activations = MatmulActivations::F32);

/// Whether matmul_int8 (and matmul's Int8) has an integer kernel for w: Q8_0, Q4_0, Q4_1, Q5_0,
/// Q5_1, Q4_K, Q6_K, Q3_0, Q3_1 (every quantized dtype LIO reads).
bool has_int8_kernel(const WeightMatrix& w);

/// W8A8 (and W4A8): y = x W^T, or y += x W^T when `accumulate`, with x given already rounded
/// to int8 one row (token) at a time — x[r][c] ≈ sx[r] * qx[r][c] (SmoothQuant's per-token
/// activations; LLM.int8()'s vector-wise X) — and integer block dot products against w's
/// codes: y[r][j] = sum over 32-wide blocks b of sx[r] * d_w[j][b] * int32(sum_i qx * qw)
/// (+ the minimum of Q4_1 / Q5_1 / Q4_K or the -8 / -16 offset of Q4_0 / Q5_0 times
/// sx[r] * sum qx; Q6_K scales each 16-element half). With a per-channel grid (every block
/// of a row holding the same d_w) this is sx[r] * d_w[j] * (int dot of the whole rows),
/// chapter 03's int8_dot. qx: (n, w.cols) int8 in [-127, 127]; sx: (n) scales; y: (n, w.rows).
/// Batch-invariant like matmul (the packed kernels, on a copy of w packed for this call). Throws InvalidArgument on a null pointer, n <= 0, cols not a
/// whole number of w's blocks, or weights without an integer kernel (has_int8_kernel).
void matmul_int8(const WeightMatrix& w, const int8_t* qx, const float* sx, float* y, int64_t n,
                 bool accumulate = false);

/// y (n_rows, dim) += bias (dim) on every row: a projection's bias (qwen2's Q/K/V). Throws
/// InvalidArgument on n_rows < 0, dim <= 0 or a null pointer.
void add_bias(float* y, const float* bias, int64_t n_rows, int64_t dim);

/// GeGLU (Shazeer 2020, eq. 5): out = gelu(gate) * up over n values, GELU in its tanh form
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel 2016, sec. 2; Gemma's
/// gelu_pytorch_tanh), in f32 without a lookup table. May alias gate. Throws InvalidArgument on
/// n < 0 or a null pointer.
void geglu(const float* gate, const float* up, float* out, int64_t n);

/// SwiGLU (Shazeer 2020): out = silu(gate) * up, elementwise over n values. May alias gate.
void swiglu(const float* gate, const float* up, float* out, int64_t n);

/// Copies row `token` of the embedding table, dequantized, into out (w.cols); token -1 writes
/// zeros (a token another tensor-parallel rank embeds: chapter 08's vocabulary-parallel
/// embedding). Throws InvalidArgument if token is outside [0, w.rows) and not -1.
void embedding_row(const WeightMatrix& w, int64_t token, float* out);

// ---- attention ------------------------------------------------------------------------------
// The engine's CPU attention (CpuBackend::attention) is chapter 07's tiled kernel
// (flash_attention.h) for every row, on any pool dtype. With --attention-backend naive, decode
// rows on an f32 pool without a sliding window go through paged_decode_attention (chapter 04's
// Task 5) and every other row through flash_attention.h's naive_attention (the score matrix
// materialized). Chapter 01's decode_attention (Task 4) is the attention of ch01_kv_cache's
// backend, over the one contiguous block per sequence that chapter's executable reserves
// (chapters/01_kv_cache/contiguous_attention.h). The reference they are all tested against is
// attention_reference.h.

/// Task 5 (chapter 04 exercise point; defined in solutions|exercises/04_paged_attention/
/// paged_decode_attention.cpp). Attention of ONE query head over positions 0 .. n_ctx-1 of a
/// sequence whose K/V live in a paged pool, read through its block table (Kwon et al. 2023,
/// PagedAttention, sec. 4.1; docs/04_paged_attention.md, section 2 and "Task 5").
/// q: (head_dim); k_pool, v_pool: one layer, (n_blocks, block_size, n_kv_heads, head_dim), where
/// entry b of block_table is the pool block holding the sequence's positions b * block_size ..
/// (b + 1) * block_size - 1 in order; kv_head: the KV head this query head reads;
/// block_table: at least ceil(n_ctx / block_size) block ids; out: (head_dim);
/// scores: (>= n_ctx) the caller's scratch, overwritten (the caller owns it, one buffer per
/// thread: no hidden allocation or thread_local state here).
/// Must hold: out equals decode_attention's result for that head on the same K/V gathered into a
/// contiguous cache (to f32 rounding), whatever blocks the table names and in whatever order,
/// and stays finite when the scores are far too large for exp. Single-threaded: the engine runs
/// many (row, head) pairs in parallel. The engine's f32 CPU attention for decode rows under
/// --attention-backend naive (CpuBackend::attention).
/// Throws InvalidArgument if n_ctx < 1, block_size < 1, the table is too short, or scores
/// holds fewer than n_ctx floats.
void paged_decode_attention(const float* q, const float* k_pool, const float* v_pool, float* out,
                            std::span<const int32_t> block_table, int64_t n_ctx, int64_t block_size,
                            int64_t n_kv_heads, int64_t kv_head, int64_t head_dim, float scale,
                            std::span<float> scores);

/// Task 4 (chapter 01 exercise point; defined in solutions|exercises/01_kv_cache/
/// decode_attention.cpp). Attention of ONE new query token over the whole cached prefix:
/// the decode step (docs/01_kv_cache.md, "Task 4"). q: (n_heads, head_dim), RoPE applied;
/// k_cache, v_cache: (n_ctx, n_kv_heads, head_dim) holding positions 0 .. n_ctx-1 (the new
/// token's own K/V included, at n_ctx-1); out: (n_heads, head_dim). Every query head attends
/// with its group's KV head: grouped-query attention (Ainslie et al. 2023) lets n_heads /
/// n_kv_heads consecutive query heads share one (docs/02_gqa_mla.md, section 1).
/// Must hold: out equals attention_reference(q, k, v, out, 1, n_ctx - 1, ...) to f32 rounding
/// for MHA, GQA and MQA, and stays finite when the scores are far too large for exp (> 88 in
/// f32). Threads: OpenMP over the heads. Runs as ch01_kv_cache's attention, over the one
/// contiguous block per sequence that chapter's executable reserves
/// (chapters/01_kv_cache/contiguous_attention.h); the engine's other programs attend with
/// chapter 07's tiled kernel (see above).
/// Throws InvalidArgument if n_ctx < 1 or n_heads is not a multiple of n_kv_heads.
void decode_attention(const float* q, const float* k_cache, const float* v_cache, float* out,
                      int64_t n_ctx, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                      float scale);

// ---- helpers and MLA ------------------------------------------------------------------------

/// a . b over n floats, with 8 partial sums so the compiler keeps them in one SIMD register (a
/// single running sum is a serial dependency it may not reorder). The order of additions is
/// fixed by n alone.
float dot(const float* a, const float* b, int64_t n);

/// RoPE with explicit per-pair frequencies, in place, interleaved pairs (x[2i], x[2i+1])
/// turned by pos * inv_freq[i] radians (RoFormer eq. 34 with theta_i given). For MLA's RoPE
/// query and key (DeepSeek-V2 sec. 2.1.3), whose pairs need not follow base^(-2i/d).
/// x: n_vecs vectors of `dim` floats at x + v * stride; inv_freq: (dim / 2).
void rope_freqs(float* x, int64_t pos, int64_t n_vecs, int64_t stride, int64_t dim, const float* inv_freq);

/// MLA attention of one query head, the naive way (reference for the absorbed form, chapter
/// 02 Task 4): for each cached latent row j = [c_j (d_c) | kpe_j (d_R)] it builds the key
/// k_j = [W_UK c_j ; kpe_j] and the value v_j = W_UV c_j, then
///   out = sum_j softmax_j(scale * (q_nope . W_UK c_j + q_pe . kpe_j)) W_UV c_j.
/// q_nope: (d_nope); q_pe: (d_R); w_uk: (d_nope, d_c); w_uv: (d_v, d_c); latents: (n_ctx,
/// d_c + d_R); out: (d_v). Costs n_ctx * (d_nope + d_v) * d_c multiply-adds for the
/// up-projections alone. Throws InvalidArgument if n_ctx < 1 or a width is < 1 (d_R may be 0).
void mla_naive_attention_head(const float* q_nope, const float* q_pe, const float* w_uk, const float* w_uv,
                              const float* latents, int64_t n_ctx, int64_t d_nope, int64_t d_rope, int64_t d_c,
                              int64_t d_v, float scale, float* out);

/// The naive path over K and V already up-projected for a whole context (the engine's naive
/// MLA: one matmul per sequence builds them for all heads). q_nope (d_nope), q_pe (d_R);
/// k_nope: this head's keys, n_ctx rows of d_nope at k_nope + j * k_stride; kpe: n_ctx rows
/// of d_R at kpe + j * kpe_stride; v: n_ctx rows of d_v at v + j * v_stride; out (d_v).
///   out = sum_j softmax_j(scale * (q_nope . k_nope_j + q_pe . kpe_j)) v_j
/// Throws InvalidArgument if n_ctx < 1.
void mla_attention_head_expanded(const float* q_nope, const float* q_pe, const float* k_nope, int64_t k_stride,
                                 const float* kpe, int64_t kpe_stride, const float* v, int64_t v_stride,
                                 int64_t n_ctx, int64_t d_nope, int64_t d_rope, int64_t d_v, float scale, float* out);

}  // namespace lio::cpu
