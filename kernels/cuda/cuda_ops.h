// cuda_ops.h — the CUDA operators of the Llama forward pass. The helpers their callers need
// live beside it: device_buffer.h (DeviceBuffer; included: chapter 07's workspaces hold
// them), cublas_handle.h (CublasHandle, for
// matmul()), cuda_runtime_info.h (is there a GPU), cuda_check.h (CUDA_CHECK, CudaError).
//
// Each operator mirrors the CPU one in kernels/cpu/cpu_ops.h (same name, shapes and
// semantics) but takes device pointers and runs asynchronously on an explicit stream:
// the call returns once the kernel is queued. The function is the host launcher: it checks
// shapes and pointers (throwing lio::InvalidArgument), launches, and checks the launch
// (throwing lio::cuda::CudaError). Kernels trust their launcher; they do not re-check.
// Each optimized kernel has a `*_naive` twin — the plain one-thread-per-output version it is
// equivalent to — kept for tests and as the before/after of the course.
//
// Shapes are written (outer, ..., inner), row-major, f32 unless stated. "Device pointer"
// means memory the device can read/write (cudaMalloc, managed, or mapped pinned memory);
// whether a pointer is one is not checked — a host pointer makes the kernel fault.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "device_buffer.h"
#include "lio/dtype.h"
#include "lio/rope_style.h"

/// CUDA operators of the Llama forward pass (device pointers, explicit stream) and the
/// helpers beside them.
namespace lio::cuda {

class CublasHandle;  // cublas_handle.h

// ---- operators --------------------------------------------------------------------------

/// Largest head_dim rope() accepts: its cos/sin table for one token lives in shared memory
/// (kRopeMaxHeadDim / 2 pairs x 2 floats = 4 KiB). Real models use 64..256.
inline constexpr int64_t kRopeMaxHeadDim = 1024;

/// RMSNorm (Zhang & Sennrich 2019, eq. 4): out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight.
/// x, out: (n_rows, dim) device pointers, may alias; weight: (dim) device pointer.
/// One block per row; the sum of squares is accumulated in float, strided per thread and then
/// combined by warp shuffles: about dim/256 + 8 roundings deep, so relative error <~ 1e-6 for
/// dim <= 4096 (the CPU op sums in double).
/// Preconditions (throw InvalidArgument): pointers non-null, n_rows >= 0 (0 launches
/// nothing), 0 < dim <= INT32_MAX, n_rows <= INT32_MAX, eps finite and >= 0.
/// Throws CudaError if the launch fails.
void rmsnorm(const float* x, const float* weight, float* out, int64_t n_rows, int64_t dim,
             float eps, cudaStream_t stream);

/// Same contract as rmsnorm(); one thread per row, sequential double-precision sum
/// (the CPU algorithm, verbatim). The reference the optimized kernel is tested against.
void rmsnorm_naive(const float* x, const float* weight, float* out, int64_t n_rows,
                   int64_t dim, float eps, cudaStream_t stream);

/// Rotary position embedding in place (Su et al. 2021, RoFormer eq. 34), pair k of each head
/// rotated by positions[t] * theta_base^(-2k/head_dim); `style` picks the pairing
/// (RopeStyle::Normal (x[2k], x[2k+1]), RopeStyle::Neox (x[k], x[k + head_dim/2])).
/// x: (n_tokens, n_heads, head_dim) device pointer; positions: (n_tokens) int32 device pointer.
/// Angles and their cos/sin are computed in double and rounded to float once, like the CPU op,
/// so results agree with cpu::rope to ~1 ulp.
/// Preconditions (throw InvalidArgument): pointers non-null, n_tokens >= 0 (0 launches
/// nothing), n_heads > 0, head_dim even, 0 < head_dim <= kRopeMaxHeadDim,
/// n_tokens <= INT32_MAX, n_heads <= INT32_MAX / head_dim, theta_base finite and > 0.
/// Throws CudaError if the launch fails.
void rope(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads,
          int64_t head_dim, float theta_base, RopeStyle style, cudaStream_t stream);

/// rope() on a layer's queries and keys in one launch (issue 45): q (n_tokens, n_heads, head_dim)
/// and k (n_tokens, n_kv_heads, head_dim), both rotated in place at `positions`. Each pair is
/// rotated exactly as rope() rotates it (the same cos/sin, the same arithmetic), so results equal
/// two rope() calls bit for bit. Preconditions as rope() for both tensors (throw
/// InvalidArgument); CudaError if the launch fails.
void rope_qk(float* q, float* k, const int32_t* positions, int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads,
             int64_t head_dim, float theta_base, RopeStyle style, cudaStream_t stream);

/// Same contract as rope(); one thread per (token, head, pair), recomputing its angle.
void rope_naive(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads,
                int64_t head_dim, float theta_base, RopeStyle style, cudaStream_t stream);

// ---- weights in device memory --------------------------------------------------------------

/// A weight matrix W of shape (rows, cols) in device memory, laid out exactly as lio::WeightMatrix
/// (kernels/cpu's view of the same tensor): row r is `row_bytes` bytes of `dtype` elements or
/// 32-element quantized blocks (lio/dtype.h; ggml-common.h block_q8_0/q4_0/q4_1). y = W x maps a
/// cols-vector to a rows-vector. Non-owning: `data` points into memory someone else frees.
struct DeviceMatrix {
  DType dtype = DType::F32;         ///< element or block type of the rows
  int64_t rows = 0;                 ///< out_features
  int64_t cols = 0;                 ///< in_features
  int64_t row_bytes = 0;            ///< dtype_row_bytes(dtype, cols)
  const std::byte* data = nullptr;  ///< (rows, row_bytes) bytes, device memory

  /// Bytes of the whole matrix: rows * row_bytes.
  int64_t size_bytes() const { return rows * row_bytes; }
};

/// Largest `cols` for which gemv() stages x in shared memory (48 KiB, the default per-block
/// limit, of floats); wider rows read x through L1/L2 instead.
inline constexpr int64_t kGemvMaxSharedCols = 48 * 1024 / 4;

/// Gathers rows of an embedding table, dequantized to f32: out[t] = table[tokens[t]].
/// table: (vocab, dim) DeviceMatrix of any supported dtype (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
/// Q5_0, Q5_1, Q4_K, Q6_K);
/// tokens: (n_tokens) int32 device pointer; out: (n_tokens, table.cols) device pointer.
/// Token ids are NOT range-checked on the device (the caller checks them on the host, as
/// Model::forward does); an id outside [0, table.rows) reads out of bounds, except -1, which gives
/// a row of zeros (a token another tensor-parallel rank embeds; chapter 08).
/// Dequantization evaluates lio::dequantize_row's formula in f32 and is exact: d (f16, 11
/// significant bits) times q (<= 8 bits) fits f32's 24 (Q6_K's d * scale * (q - 32): 11 + 7 + 5
/// bits), so Q4_1's d*q + m rounds once whether or
/// not nvcc fuses it into an FMA. Results equal cpu::embedding_row bit for bit. Preconditions (throw InvalidArgument): non-null pointers,
/// a valid matrix (see gemv()), 0 <= n_tokens <= INT32_MAX. Throws CudaError if the launch fails.
void embedding(const DeviceMatrix& table, const int32_t* tokens, float* out, int64_t n_tokens,
               cudaStream_t stream);

/// Dequantizes the whole matrix to f32: out (w.rows, w.cols), row-major, device pointer.
/// Bit-equal to lio::dequantize_row per row (see embedding()). Feeds cuBLAS SGEMM in matmul().
/// Preconditions and errors as embedding().
void dequantize(const DeviceMatrix& w, float* out, cudaStream_t stream);

/// Matrix-vector product, the decode-step matmul: y = W x, or y += W x when `accumulate`
/// (fuses the residual add: x_resid += W_o attn). w: (rows, cols) any supported dtype;
/// x: (cols) f32; y: (rows) f32; device pointers; y must not overlap x.
/// One warp per output row; lane l reads 8 consecutive weights at columns l*8 + 256*i, so a warp
/// covers 8 quantized blocks per step and dequantizes them in registers (no f32 copy of W).
/// x is staged in shared memory when cols <= kGemvMaxSharedCols. Accumulates in f32, in another
/// order than cpu::matmul: agreement to ~1e-6 of sum_j |w_j x_j| per row.
/// Preconditions (throw InvalidArgument): non-null pointers; rows, cols > 0 and <= INT32_MAX;
/// cols a multiple of 32 for quantized dtypes; row_bytes == dtype_row_bytes(dtype, cols).
/// Throws CudaError if the launch fails.
void gemv(const DeviceMatrix& w, const float* x, float* y, bool accumulate, cudaStream_t stream);

// ---- fused decode kernels (issue 45; gemv_fused.cu) ------------------------------------------

/// Most matrices one rmsnorm_gemv_many() launch computes (Q, K and V).
inline constexpr int kMaxFusedGemvOuts = 3;

/// One output of rmsnorm_gemv_many(): y (w.rows floats, device) = w xn.
struct FusedGemvOut {
  DeviceMatrix w;       ///< the weight, (rows, dim)
  float* y = nullptr;   ///< (w.rows) f32 device output
};

/// Bytes of static shared memory a fused kernel's block reduction of the sum of squares keeps
/// (reduce.cuh's block_reduce: one float per warp of its 8-warp block).
inline constexpr int64_t kFusedStaticSharedBytes = 8 * 4;

/// Widest row the fused kernels take: the staged xn (dim floats, dynamic shared memory) plus the
/// static reduction scratch must fit the 48 KiB a launch gets without opting in, rounded down to
/// whole 32-element blocks: (49,152 - 32) / 4 = 12,280 -> 12,256 floats. A 12,288-wide row
/// (kGemvMaxSharedCols) would ask for 48 KiB + 32 B and fail to launch (issue 60, defect 3).
inline constexpr int64_t kFusedGemvMaxDim = (48 * 1024 - kFusedStaticSharedBytes) / 4 / 32 * 32;

/// Whether the fused kernels take rows of `dim` floats: a positive multiple of 32 (whole
/// quantized blocks) up to kFusedGemvMaxDim (xn and the reduction scratch in 48 KiB of shared
/// memory). Host-only, no GPU needed; the backend runs the unfused ops for any other width.
bool fused_gemv_supports(int64_t dim);

/// One decode row through RMSNorm (Zhang & Sennrich 2019, eq. 4) and up to kMaxFusedGemvOuts
/// matrices in one launch: xn = x / sqrt(mean(x^2) + eps) * norm_weight, then
/// outs[m].y = outs[m].w xn for every m. x, norm_weight: (dim) f32 device pointers; every
/// outs[m].w: (rows_m, dim), all of one dtype (any gemv() takes). Equals cuda::rmsnorm then
/// cuda::gemv per matrix up to summation order (~1e-6 relative). Throws InvalidArgument for null
/// pointers, 0 or more than kMaxFusedGemvOuts outputs, a dim fused_gemv_supports() refuses, a
/// matrix whose cols differ from dim or whose dtype differs from the first's, a negative or
/// non-finite eps; CudaError if the launch fails.
void rmsnorm_gemv_many(const float* x, const float* norm_weight, int64_t dim, float eps,
                       std::span<const FusedGemvOut> outs, cudaStream_t stream);

/// One decode row through RMSNorm, the gate and up projections and SwiGLU (Shazeer 2020, eq. 6)
/// in one launch: xn as rmsnorm_gemv_many(), then out[i] = silu(gate_i . xn) * (up_i . xn), silu(g) =
/// g / (1 + exp(-g)) (cuda::swiglu's formula). gate, up: (rows, dim) of one dtype; out: (rows)
/// f32 device pointer, not overlapping x. Equals cuda::rmsnorm, two cuda::gemv and cuda::swiglu
/// up to summation order. Throws as rmsnorm_gemv_many(), and InvalidArgument if gate and up
/// differ in rows or out is null.
void rmsnorm_gemv_swiglu(const float* x, const float* norm_weight, int64_t dim, float eps, const DeviceMatrix& gate,
                         const DeviceMatrix& up, float* out, cudaStream_t stream);

/// Whether gemv_q4_1_wide() takes `w`: Q4_1, cols a multiple of 32 and <= kGemvMaxSharedCols,
/// data and row_bytes 4-byte aligned (the 32-bit loads). Host-only, no GPU needed.
bool gemv_wide_supports(const DeviceMatrix& w);

/// gemv() for a Q4_1 matrix with issue 45's wide reader: each lane reads one 32-bit word of a
/// block's codes and one of its d and m (detail::q4_1_word_dot), so every weight byte is read once
/// with a quarter of the load instructions, where gemv()'s lanes read each code byte twice, one byte
/// at a time. Same results as gemv() up to summation order. Throws InvalidArgument as gemv() and
/// when !gemv_wide_supports(w); CudaError if the launch fails.
void gemv_q4_1_wide(const DeviceMatrix& w, const float* x, float* y, bool accumulate, cudaStream_t stream);

/// Same contract as gemv(); one thread per row, elements dequantized one at a time in column
/// order (the CPU's scalar loop). The reference gemv() is tested against.
void gemv_naive(const DeviceMatrix& w, const float* x, float* y, bool accumulate,
                cudaStream_t stream);

/// Most x rows matmul() sends to gemv_batched(); more go to dequantize + cuBLAS. Up to ~16
/// tokens a step is still bound by reading W (2 * 16 FLOPs per weight is far below an H100's
/// ~100 FLOPs per byte), so reading it once beats dequantizing it to an f32 copy first.
inline constexpr int64_t kGemvBatchedMaxRows = 16;

/// x rows gemv_batched() keeps in registers per pass over W: each lane holds 8 dequantized
/// weights and one accumulator per row, so W is read once per group of this many rows.
inline constexpr int64_t kGemvBatchedRowsPerPass = 8;

/// Largest `cols` for which gemv_batched() stages a group of x rows in shared memory
/// (kGemvBatchedRowsPerPass rows of cols floats, padded to a multiple of 4, in the default
/// 48 KiB); wider rows read x through L1/L2 instead.
inline constexpr int64_t kGemvBatchedMaxSharedCols = 48 * 1024 / 4 / kGemvBatchedRowsPerPass;

/// The small-batch matmul: y = x W^T, or y += x W^T when `accumulate`, for a few rows of x
/// (decode steps of a batch of sequences, short prefill chunks).
/// w: (rows, cols) any dtype gemv() supports; x: (n_rows, cols) f32; y: (n_rows, rows) f32;
/// device pointers; y must not overlap x.
/// Work layout: one warp per output row (weight row), lanes over columns as in gemv(); each
/// lane dequantizes its 8 weights once into registers (detail::Weights8) and multiplies them
/// with up to kGemvBatchedRowsPerPass x rows staged in shared memory, one accumulator per row.
/// W is read once per group of 8 rows (twice for 9..16 rows; the second read mostly hits L2).
/// Per x row the arithmetic is gemv()'s, in the same order (same lane/column mapping, same
/// detail::Weights8::dot, same warp reduction), so it agrees with gemv() on that row to a few
/// ulp (bitwise unless the compiler contracts differently), and with cpu::matmul to ~1e-6 of
/// sum_j |w_j x_j| per output (f32 accumulation in another order than the CPU's).
/// Preconditions (throw InvalidArgument): as gemv(), and 0 <= n_rows <= INT32_MAX (0 launches
/// nothing). Any n_rows works; matmul() sends it 2 .. kGemvBatchedMaxRows.
/// Throws CudaError if the launch fails.
void gemv_batched(const DeviceMatrix& w, const float* x, float* y, int64_t n_rows,
                  bool accumulate, cudaStream_t stream);

/// Same contract as gemv_batched(): gemv_naive() launched once per x row (one thread per
/// output, column order, W read n_rows times). The reference gemv_batched() is tested against.
void gemv_batched_naive(const DeviceMatrix& w, const float* x, float* y, int64_t n_rows,
                        bool accumulate, cudaStream_t stream);

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

/// Causal grouped-query attention for a chunk of queries against a contiguous KV cache — the
/// contract of cpu::attention_reference. q: (n_q, n_heads, head_dim) for positions start_pos ..
/// start_pos + n_q - 1; k_cache, v_cache: (>= start_pos + n_q, n_kv_heads, head_dim);
/// query i attends to cache positions 0 .. start_pos + i; query head h reads KV head
/// h / (n_heads / n_kv_heads) (Ainslie et al. 2023). out: (n_q, n_heads, head_dim), must not
/// overlap q or the cache. softmax(scale * q.k) v, max-subtracted, in f32.
/// One block per (query, head): scores for all its keys go to shared memory (4 bytes per
/// key), then max, exp and sum, then P.V. Plain "materialize the scores" attention; chapter 07
/// replaces it with FlashAttention's tiled online softmax (Dao et al. 2022).
/// Preconditions (throw InvalidArgument): non-null pointers, n_q >= 0 (0 launches nothing),
/// start_pos >= 0, n_kv_heads > 0, n_heads a multiple of n_kv_heads, head_dim > 0, scale
/// finite, sizes within INT32_MAX, and start_pos + n_q <= attention_max_keys(head_dim)
/// ((keys + head_dim) * 4 bytes of shared memory per block: 8192 keys = 32 KiB; Hopper's
/// opt-in limit of 227 KiB holds ~58K keys). Throws CudaError if the launch fails.
void attention(const float* q, const float* k_cache, const float* v_cache, float* out,
               int64_t n_q, int64_t start_pos, int64_t n_heads, int64_t n_kv_heads,
               int64_t head_dim, float scale, cudaStream_t stream);

/// The most keys (start_pos + n_q) attention() handles at this head_dim on the current device:
/// its opt-in shared memory per block, less the kernel's static shared memory, in floats, less
/// head_dim. Throws InvalidArgument if head_dim <= 0, CudaError if the device query fails.
int64_t attention_max_keys(int64_t head_dim);

/// Same contract as attention() (without the shared-memory limit); one thread per
/// (query, head), walking the keys once with the running-max ("online") softmax of
/// cpu::attention_reference (Milakov & Gimelshein 2018). The reference attention() is tested
/// against.
void attention_naive(const float* q, const float* k_cache, const float* v_cache, float* out,
                     int64_t n_q, int64_t start_pos, int64_t n_heads, int64_t n_kv_heads,
                     int64_t head_dim, float scale, cudaStream_t stream);

/// The decode step: ONE query (n_heads, head_dim) over cache positions 0 .. n_ctx-1 (its own
/// K/V included, at n_ctx-1) — the contract of cpu::decode_attention; equals
/// attention(q, k, v, out, 1, n_ctx - 1, ...). Throws InvalidArgument if n_ctx < 1, else as
/// attention().
void decode_attention(const float* q, const float* k_cache, const float* v_cache, float* out,
                      int64_t n_ctx, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                      float scale, cudaStream_t stream);

// ---- paged KV cache ---------------------------------------------------------------------------

/// Writes each token's K and V row into the paged pool at its slot — vLLM's
/// reshape_and_cache (csrc/cache_kernels.cu) without the layout change:
///   k_pool[slot_mapping[t] * kv_dim + i] = k[t * kv_dim + i]   (and v likewise)
/// for t < n_tokens, i < kv_dim. A slot < 0 means "skip this row" (padding), as in vLLM.
/// k, v: (n_tokens, kv_dim); slot_mapping: (n_tokens) int32; k_pool, v_pool: one layer of the
/// pool, (n_slots, kv_dim) = (n_blocks, block_size, n_kv_heads, head_dim); device pointers;
/// the rows must not overlap the pool. Slots must be distinct (two rows writing one slot race)
/// and below n_slots: neither is checked here (ForwardBatch::validate checks them on the host).
/// One block per token, float4 copies when kv_dim % 4 == 0 and every pointer is 16-byte aligned.
/// Preconditions (throw InvalidArgument): non-null pointers, 0 <= n_tokens <= INT32_MAX (0
/// launches nothing), 0 < kv_dim <= INT32_MAX. Throws CudaError if the launch fails.
void kv_append(const float* k, const float* v, const int32_t* slot_mapping, int64_t n_tokens,
               int64_t kv_dim, float* k_pool, float* v_pool, cudaStream_t stream);

/// Same contract as kv_append(); one thread per (token, element), the literal assignment.
void kv_append_naive(const float* k, const float* v, const int32_t* slot_mapping,
                     int64_t n_tokens, int64_t kv_dim, float* k_pool, float* v_pool,
                     cudaStream_t stream);

/// Largest head_dim paged_attention() accepts: a lane keeps head_dim / 32 output elements in
/// registers (8 at 256) and q lives in static shared memory. Real models use 64..256.
inline constexpr int64_t kPagedAttentionMaxHeadDim = 256;

/// Paged causal grouped-query attention over a batch mixing prefill chunks and decode rows
/// (PagedAttention, Kwon et al. 2023, sec. 4.1; the varlen layout of vLLM v1 /
/// FlashAttention's flash_attn_varlen_func):
///   q, out: (n_tokens, n_heads, head_dim); k_pool, v_pool: one layer,
///   (n_slots, n_kv_heads, head_dim) = (n_blocks, block_size, n_kv_heads, head_dim);
///   query_start_loc: (n_seqs + 1) row offsets, [0] = 0, ascending, [n_seqs] = n_tokens;
///   seq_lens: (n_seqs) cached + new tokens of each sequence;
///   block_tables: (n_seqs, max_blocks_per_seq) block ids; all device pointers, int32.
/// Row i of sequence s (query_start_loc[s] <= i < query_start_loc[s+1]) is at position
/// p = seq_lens[s] - query_len(s) + (i - query_start_loc[s]) and attends to positions 0 .. p of
/// s; position j lives at slot block_tables[s * max_blocks_per_seq + j / block_size] *
/// block_size + j % block_size. Head h reads KV head h / (n_heads / n_kv_heads) (GQA, Ainslie
/// et al. 2023). out = softmax(scale * q.k) v, max-subtracted, in f32. The K/V of the batch's own
/// rows must already be in the pool (kv_append first). out must not overlap q or the pool.
/// Work layout: one block of 4 warps per (row, head); warp w takes key tiles w, w + 4, ... of 32
/// keys, lane = key: each lane computes its key's full score (q broadcast from shared memory),
/// the warp updates a running max / sum (online softmax, Milakov & Gimelshein 2018), then adds
/// p_j v_j with lanes over head_dim (coalesced V rows). The four warps' (max, sum, acc) merge in
/// shared memory at the end (FlashAttention-2's split over keys, Dao 2023, sec. 3.1). Nothing
/// grows with the context: no shared-memory limit on its length.
/// The index arrays' contents are NOT checked on the device (ForwardBatch::validate checks
/// them on the host: ascending query_start_loc, query_len(s) <= seq_lens[s], block ids in the
/// pool, tables long enough).
/// Preconditions (throw InvalidArgument): non-null pointers; 0 <= n_tokens <= INT32_MAX (0
/// launches nothing); n_seqs >= 1 when n_tokens > 0; max_blocks_per_seq >= 1; block_size >= 1;
/// max_blocks_per_seq * block_size <= INT32_MAX; n_kv_heads > 0; n_heads a multiple of
/// n_kv_heads and <= 65535; 0 < head_dim <= kPagedAttentionMaxHeadDim; scale finite.
/// Sliding window (Longformer, Beltagy et al. 2020, sec. 3.1; Gemma 3's local layers): with
/// window > 0, row p attends to positions max(0, p - window + 1) .. p only, and the key loop
/// starts at the window's first key (nothing before it is read); 0 = every earlier position.
/// InvalidArgument for window < 0 or > INT32_MAX.
/// Throws CudaError if the launch fails.
void paged_attention(const float* q, const float* k_pool, const float* v_pool, float* out,
                     const int32_t* query_start_loc, const int32_t* seq_lens,
                     const int32_t* block_tables, int64_t n_tokens, int64_t n_seqs,
                     int64_t max_blocks_per_seq, int64_t block_size, int64_t n_heads,
                     int64_t n_kv_heads, int64_t head_dim, float scale, cudaStream_t stream,
                     int64_t window = 0);

/// Same contract as paged_attention() (any head_dim > 0); one thread per (row, head): it finds
/// its sequence by binary search over query_start_loc, then walks positions 0 .. p in order
/// with the running-max softmax of cpu::attention_reference, `out` doubling as the accumulator —
/// the literal loop. The reference paged_attention() is tested against.
void paged_attention_naive(const float* q, const float* k_pool, const float* v_pool, float* out,
                           const int32_t* query_start_loc, const int32_t* seq_lens,
                           const int32_t* block_tables, int64_t n_tokens, int64_t n_seqs,
                           int64_t max_blocks_per_seq, int64_t block_size, int64_t n_heads,
                           int64_t n_kv_heads, int64_t head_dim, float scale,
                           cudaStream_t stream, int64_t window = 0);

// ---- int8 activations (chapter 03: W8A8 / W4A8) -----------------------------------------------

/// Whether gemv_int8() takes `dtype`: every block-quantized dtype (not F32, F16, BF16).
constexpr bool has_int8_kernel(DType dtype) {
  return dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16;
}

/// How quantize_activations_int8() groups x for its scales.
enum class ActivationGroup {
  Block32,  ///< one scale per 32-element block (ggml's Q8 activations; --activations int8)
  Token,    ///< one scale per row (SmoothQuant's per-token W8A8; --activations int8-token)
};

/// Rounds x (n_rows, cols) to int8 codes qx (n_rows, cols) with scales dx (n_rows, cols / 32),
/// x ~ dx[r][c / 32] * qx[r][c]:
///   Block32: d = max|x_block| / 127, qx = rint(x * (1 / d)) (half to even; 0 when d == 0) —
///            cpu::packed_matmul's Int8 rounding (kernels/cpu/packed_matmul.cpp, quantize_rows);
///   Token:   s = max|x_row| / 127, qx = round(x / s) (half away from zero; 0 when s == 0) —
///            chapter 03's quantize_row_int8, the CPU's Int8PerToken; dx repeats s per block.
/// So the CPU and CUDA backends round the same x to the same codes. One warp per 32-element
/// block (Block32) or one block of 256 threads per row (Token). Device pointers; cols a
/// positive multiple of 32 (every quantized dtype's rows are). Non-finite x is not checked.
/// Preconditions (throw InvalidArgument): non-null pointers, 0 <= n_rows <= INT32_MAX, 0 < cols
/// <= INT32_MAX, cols % 32 == 0. Throws CudaError if the launch fails.
void quantize_activations_int8(const float* x, int64_t n_rows, int64_t cols, ActivationGroup group, int8_t* qx,
                               float* dx, cudaStream_t stream);

/// y = x W^T, or y += x W^T when `accumulate`, with x already rounded to int8
/// (quantize_activations_int8): integer dot products of w's codes and x's codes, four at a
/// time (__dp4a, sm_61+), each 8-element group scaled once:
///   y[r][j] = sum over groups g of dx[r][g / 4] * (d_w * sum_i c_w qx + m_w * sum_i qx)
/// (detail::Codes8; Dettmers et al. 2022 / Xiao et al. 2023 for W8A8, ggml's vec_dot_q4_1_q8_1
/// for the minimum term). w: (rows, cols) Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K or Q6_K; qx:
/// (n_rows, cols) int8; dx: (n_rows, cols / 32); y: (n_rows, rows) f32; device pointers.
/// Work layout: gemv_batched()'s — one warp per weight row, lanes over 8-column groups, each
/// group's weights decoded once per pass of up to kGemvBatchedRowsPerPass x rows; larger
/// n_rows run more passes in the same launch (no cuBLAS: prefill stays integer, so the
/// rounding a run measures is the same at every batch size).
/// Preconditions (throw InvalidArgument): a usable matrix of one of those dtypes, non-null
/// pointers, 0 <= n_rows <= INT32_MAX (0 launches nothing). Throws CudaError if the launch fails.
void gemv_int8(const DeviceMatrix& w, const int8_t* qx, const float* dx, float* y, int64_t n_rows, bool accumulate,
               cudaStream_t stream);

// ---- quantized KV cache (chapter 03) ----------------------------------------------------------

/// Element type of a quantized KV pool layer (--kv-cache-dtype f16 | int8; f32 pools take
/// kv_append() and paged_attention()).
enum class KvQuant {
  F16,   ///< IEEE halves (uint16_t bits), round to nearest even
  Int8,  ///< int8 codes, one f32 scale per (slot, KV head): element = scale * code
};

/// One layer of an f16 or int8 paged KV pool as stored; device pointers.
///   k, v: (n_slots, n_kv_heads, head_dim) uint16_t f16 bits (F16) or int8_t codes (Int8);
///   k_scales, v_scales: (n_slots, n_kv_heads) f32 for Int8, nullptr for F16.
/// The layout of HostKvPool's key_data() / key_scales(), so the CPU and CUDA pools agree.
struct QuantizedKvLayer {
  KvQuant type = KvQuant::F16;  ///< element type
  void* k = nullptr;            ///< keys, (n_slots, n_kv_heads, head_dim) elements
  void* v = nullptr;            ///< values, laid out as k
  float* k_scales = nullptr;    ///< Int8: (n_slots, n_kv_heads) key scales; F16: nullptr
  float* v_scales = nullptr;    ///< Int8: the values' scales, laid out as k_scales
};

/// kv_append() into an f16 or int8 pool: each token's K and V rows, (n_tokens, n_kv_heads *
/// head_dim) f32, rounded into `pool` at slot_mapping[t] (slot < 0: skipped).
///   F16:  bits = __float2half_rn(x) (IEEE round to nearest even, as lio::f32_to_f16);
///   Int8: per (token, KV head) vector x of head_dim values, s = max|x| / 127 and
///         code_d = round(x_d / s) (half away from zero), 0 when s == 0 — chapter 03's
///         quantize_row_int8 applied per head (kv_pool.h), so CPU and CUDA pools hold the
///         same codes (every step is exact IEEE arithmetic: no fast-math).
/// One block per token, one warp per KV head (its max|x| a warp reduction). Non-finite inputs
/// are not checked (the CPU path throws on them): they give garbage codes for that head.
/// Preconditions (throw InvalidArgument): non-null k, v, slot_mapping, pool.k, pool.v (and the
/// scales for Int8), 0 <= n_tokens <= INT32_MAX, 0 < n_kv_heads, 0 < head_dim, n_kv_heads *
/// head_dim <= INT32_MAX. Throws CudaError if the launch fails.
void kv_append_quantized(const float* k, const float* v, const int32_t* slot_mapping, int64_t n_tokens,
                         int64_t n_kv_heads, int64_t head_dim, const QuantizedKvLayer& pool, cudaStream_t stream);

/// paged_attention() over an f16 or int8 pool: the same rows, heads, index arrays and work
/// layout, with K and V dequantized as they are read (vLLM's fp8 KV cache and its
/// kv_cache_dtype do the same in their paged attention kernels). For Int8 the key scale
/// multiplies the q . codes dot product once per key and the value scale p_j once per key.
/// Same preconditions (and sliding `window`) as paged_attention() plus a non-null pool (pool.k,
/// pool.v, and the scales for Int8); throws InvalidArgument otherwise, CudaError if the launch
/// fails.
void paged_attention_quantized(const float* q, const QuantizedKvLayer& pool, float* out,
                               const int32_t* query_start_loc, const int32_t* seq_lens,
                               const int32_t* block_tables, int64_t n_tokens, int64_t n_seqs,
                               int64_t max_blocks_per_seq, int64_t block_size, int64_t n_heads,
                               int64_t n_kv_heads, int64_t head_dim, float scale, cudaStream_t stream,
                               int64_t window = 0);

// ---- multi-head latent attention (chapter 02) --------------------------------------------------

/// Largest kv_lora_rank (d_c), qk_nope_head_dim and v_head_dim the MLA kernels accept: a lane
/// keeps d / 32 accumulators in registers (32 at 1024) and the block stages q in static shared
/// memory. DeepSeek-V2 uses d_c 512, d_nope 128, d_v 128.
inline constexpr int64_t kMlaMaxLatentDim = 1024;
/// Largest qk_rope_head_dim (d_R) the MLA kernels accept (DeepSeek-V2: 64).
inline constexpr int64_t kMlaMaxRopeDim = 256;

/// The head shape of an MLA layer (DeepSeek-V2 sec. 2.1; ModelConfig's MLA fields).
struct MlaShape {
  int64_t n_heads = 0;  ///< query heads
  int64_t d_nope = 0;   ///< qk_nope_head_dim: the part of each query/key head without RoPE
  int64_t d_rope = 0;   ///< qk_rope_head_dim: each head's RoPE query, and the shared RoPE key
  int64_t d_c = 0;      ///< kv_lora_rank: the latent c_kv
  int64_t d_v = 0;      ///< v_head_dim
};

/// RoPE with explicit frequencies, in place, on the last d_rope floats of each head of q
/// (n_tokens, n_heads, d_nope + d_rope) and of each latent row (n_tokens, d_c + d_rope): pair
/// (2i, 2i+1) turns by positions[t] * inv_freq[i] (i < d_rope / 2), the angle in double as
/// cpu::rope_freqs. All device pointers. Throws InvalidArgument for a bad shape (check as in
/// mla_absorbed_attention) or null pointers, CudaError if the launch fails. d_rope = 0 or
/// n_tokens = 0 launches nothing.
void mla_rope(float* q, float* latent, const int32_t* positions, const float* inv_freq,
              int64_t n_tokens, const MlaShape& shape, cudaStream_t stream);

/// Writes each row of latent (n_tokens, 2 half) into one layer of the pool at its slot: floats
/// [0, half) to k_pool[slot] (n_slots, half), [half, 2 half) to v_pool[slot]; a slot < 0 is
/// padding and skipped. Slots are not checked here (ForwardBatch::validate does). Throws
/// InvalidArgument for null pointers or bad sizes, CudaError if the launch fails.
void mla_latent_append(const float* latent, const int32_t* slot_mapping, int64_t n_tokens,
                       int64_t half, float* k_pool, float* v_pool, cudaStream_t stream);

/// MLA's absorbed attention (DeepSeek-V2 sec. 2.1.2; chapter 02 Task 4) over the paged pool:
/// for row i (position p of sequence s, as in paged_attention) and head h,
///   q_lat = W_UK[h]^T q_nope,  s_j = scale (q_lat . c_j + q_pe . k_pe_j),  j = 0 .. p,
///   out[i, h] = W_UV[h] sum_j softmax(s)_j c_j,
/// with [c_j ; k_pe_j] the latent row of position j, its halves in k_pool / v_pool (n_slots,
/// (d_c + d_rope) / 2) at the slot the block table gives. q: (n_tokens, n_heads, d_nope +
/// d_rope); w_uk: (n_heads * d_nope, d_c); w_uv: (n_heads * d_v, d_c) row-major f32; out:
/// (n_tokens, n_heads * d_v); index arrays as paged_attention(); all device pointers. The batch's
/// own latents must already be in the pool (mla_latent_append). One block of 4 warps per (row,
/// head), the layout of paged_attention(). Throws InvalidArgument for d_c, d_nope, d_v outside
/// [1, kMlaMaxLatentDim], odd d_rope or d_c + d_rope, d_rope > kMlaMaxRopeDim, n_heads outside
/// [1, 65535], bad batch sizes, a non-finite scale or null pointers; CudaError if the launch
/// fails.
void mla_absorbed_attention(const float* q, const float* k_pool, const float* v_pool,
                            const float* w_uk, const float* w_uv, float* out,
                            const int32_t* query_start_loc, const int32_t* seq_lens,
                            const int32_t* block_tables, int64_t n_tokens, int64_t n_seqs,
                            int64_t max_blocks_per_seq, int64_t block_size, const MlaShape& shape,
                            float scale, cudaStream_t stream);

/// The naive path's first step: every cached latent row of every sequence, in order, out of the
/// pool: context row r = ctx_first[s] + j (position j of sequence s; ctx_first (n_seqs + 1)
/// ascending prefix sums of seq_lens, device) goes to c_out (n_ctx_total, d_c) and k_pe_out
/// (n_ctx_total, d_rope). Throws as mla_absorbed_attention for bad shapes or pointers.
void mla_gather_latents(const float* k_pool, const float* v_pool, const int32_t* ctx_first,
                        const int32_t* block_tables, int64_t n_ctx_total, int64_t n_seqs,
                        int64_t max_blocks_per_seq, int64_t block_size, const MlaShape& shape,
                        float* c_out, float* k_pe_out, cudaStream_t stream);

/// The naive path's attention, after the up-projections K_nope = C W_UK^T (n_ctx_total,
/// n_heads * d_nope) and V = C W_UV^T (n_ctx_total, n_heads * d_v): row i of sequence s, head
/// h attends over context rows ctx_first[s] .. ctx_first[s] + p with keys [k_nope ; k_pe] and
/// values v; out: (n_tokens, n_heads * d_v). Same block layout and errors as
/// mla_absorbed_attention (d_v bounds the accumulator).
void mla_naive_attention(const float* q, const float* k_nope, const float* k_pe, const float* v,
                         float* out, const int32_t* query_start_loc, const int32_t* seq_lens,
                         const int32_t* ctx_first, int64_t n_tokens, int64_t n_seqs,
                         const MlaShape& shape, float scale, cudaStream_t stream);

// ---- greedy sampling ------------------------------------------------------------------------

/// What argmax() finds in one row of logits: enough for the host to pick the greedy token, or
/// to see that Sampler::sample would reject the row (then it copies the row back for the error).
struct ArgmaxResult {
  int32_t index = 0;      ///< first position of the largest value, as lio::argmax (NaN is never
                          ///< chosen over a number; 0 when every value is NaN)
  int32_t n_invalid = 0;  ///< values that are NaN or +inf (the sampler rejects such a row)
  int32_t n_masked = 0;   ///< values equal to -inf (the sampler rejects a row of only these)
};

/// Greedy decoding's argmax, per row: out[r] = {lio::argmax(x[r]), counts}. x: (n_rows, n) f32,
/// out: (n_rows) — device pointers. One block of 1024 threads per row: strided coalesced
/// reads, then a warp-shuffle and shared-memory reduction of (value, index) candidates whose
/// order ("larger value, then lower index") makes the result independent of reduction order.
/// Preconditions (throw InvalidArgument): 0 <= n_rows <= INT32_MAX (0 launches nothing),
/// 1 <= n <= INT32_MAX, non-null pointers. Throws CudaError if the launch fails.
void argmax(const float* x, ArgmaxResult* out, int64_t n_rows, int64_t n, cudaStream_t stream);

/// Same contract as argmax(); one thread per row scanning it in order. The reference.
void argmax_naive(const float* x, ArgmaxResult* out, int64_t n_rows, int64_t n, cudaStream_t stream);

/// The repetition penalty in place: logits[t] = repeat_penalty_logit(logits[t], penalty) for each
/// id t in `tokens` — lio::repeat_penalty_logit (lio/sampler.h; CTRL, Keskar et al. 2019,
/// sec. 4.1), bit for bit. logits: (vocab_size) f32; tokens: (n_tokens) int32 — device pointers.
/// The ids must be DISTINCT (each token is penalized once; duplicates would race) and inside
/// [0, vocab_size): lio::repeat_penalty_tokens() gives such a list; neither is re-checked here.
/// Preconditions (throw InvalidArgument): n_tokens >= 0 (0 launches nothing), penalty > 0 and
/// finite, non-null pointers. Throws CudaError if the launch fails.
void repeat_penalty(float* logits, const int32_t* tokens, int64_t n_tokens, float penalty,
                    cudaStream_t stream);

// ---- matmul (gemv, gemv_batched or cuBLAS) --------------------------------------------------

/// y = x W^T for n rows of x, or y += x W^T when `accumulate` — the contract of cpu::matmul
/// on device pointers. x: (n, w.cols); y: (n, w.rows); no overlap.
/// n == 1: gemv() (the weights are read once, dequantized in registers).
/// 2 <= n <= kGemvBatchedMaxRows (decode batches, short chunks): gemv_batched() (W read once
/// per 8 rows, dequantized in registers; no scratch needed).
/// n > kGemvBatchedMaxRows (prefill): W is dequantized into `scratch` (unless it is F32) and
/// multiplied with cublasSgemm — y^T = W x^T in cuBLAS's column-major terms (cuBLAS docs,
/// "cublas<t>gemm()").
/// Every path accumulates in f32 (SGEMM without TF32): agreement with cpu::matmul to ~1e-6 of
/// sum_j |w_j x_j| per output.
/// scratch: device floats, at least w.rows * w.cols when n > kGemvBatchedMaxRows and w is not
/// F32 (otherwise it may be null).
/// Preconditions (throw InvalidArgument): as gemv(), n >= 0 (0 does nothing), n <= INT32_MAX,
/// scratch large enough. Throws CudaError on a launch or cuBLAS failure.
void matmul(const CublasHandle& cublas, const DeviceMatrix& w, const float* x, float* y,
            int64_t n, bool accumulate, float* scratch, int64_t scratch_floats,
            cudaStream_t stream);

// ---- chapter 07: FlashAttention ---------------------------------------------------------------
// Attention without the N x N score matrix (Dao et al. 2022; FlashAttention-2, Dao 2023), its
// split-KV decode (Flash-Decoding, Dao, Haziza, Massa, Sizov 2023), a tensor-core bf16 variant
// for the kernel benchmark, and the naive twin that does materialize the scores. The CPU
// contract of the same chapter is kernels/cpu/flash_attention.h (same semantics).

/// Largest head_dim flash_attention() and naive_attention() accept: a thread of the flash kernel
/// keeps its share of a row's head_dim accumulators in registers, and a query tile of
/// head_dim-float rows lives in shared memory. 256 covers every model LIO runs (64: SmolLM2 and
/// Llama 3.2 1B; 128: Llama 3 8B, Qwen2.5; 256: Gemma 3), as paged_attention() does.
inline constexpr int64_t kFlashAttentionMaxHeadDim = 256;

/// Longest query (max_query_len) flash_attention() treats as decode: a block then holds 4 or 8
/// (row, head) query vectors instead of 64, and the keys may be split across blocks
/// (Flash-Decoding).
inline constexpr int64_t kFlashDecodeMaxQueryLen = 4;

/// Keys per K/V tile (Bc): a Flash-Decoding split walks whole tiles, so one tile is the fewest
/// keys a non-empty split holds.
inline constexpr int64_t kFlashKeyTile = 32;

/// Most splits of one row's keys (bounds the workspace: n_splits x n_tokens x n_heads x
/// (head_dim + 2) floats).
inline constexpr int64_t kFlashMaxSplits = 64;

/// Device scratch and settings of flash_attention(), owned by the caller (one per backend or
/// benchmark, on one device; no hidden allocation or global state). Its first use reads the SM
/// count and sets the kernels' shared-memory attribute once. The partials are sized by the
/// caller up front (flash_attention_workspace_floats(); CudaBackend::reserve does it at
/// start-up) and grown by the launcher only past that size (synchronizing `stream` first, since
/// queued kernels may still read the old allocation; counted in `grows`); never shrunk.
struct FlashWorkspace {
  /// Flash-Decoding's split partials: accumulators (n_splits, n_tokens, n_heads, head_dim), then
  /// (m, l) pairs (n_splits, n_tokens, n_heads, 2); empty until a call splits or it is reserved.
  DeviceBuffer<float> partials;
  /// Streaming multiprocessors of the device (the split rule's input), read on first use.
  int sm_count = 0;
  /// Dynamic shared memory a block may opt in to on the device (bytes), read on first use.
  int64_t max_smem_bytes = 0;
  /// True once the SM count is read and the kernels' attributes are set.
  bool configured = false;
  /// cudaFuncSetAttribute calls made for this workspace (all on its first use).
  int64_t attribute_sets = 0;
  /// Times a launch had to grow `partials` (each synchronizes the stream; 0 when reserved).
  int64_t grows = 0;
};

/// Configures `workspace` for the current device now instead of at its first flash_attention()
/// call: reads the SM count and sets the shared-memory attribute of every flash kernel that
/// needs more than 48 KiB (cudaFuncSetAttribute, once; up to what the GPU allows a block).
/// Idempotent. Throws CudaError if a query or the attribute call fails.
void configure_flash_attention(FlashWorkspace& workspace);

/// (row, head) query vectors one flash_attention() block holds, from the batch's shape: decode
/// (max_query_len <= kFlashDecodeMaxQueryLen) 4 when group x max_query_len <= 4 (group = n_heads /
/// n_kv_heads: a GQA-3 or MQA-4 decode row), else 8; prefill 64, or 32 when head_dim > 128 (the
/// accumulators stay in registers). Host-only arithmetic, no GPU needed. Throws InvalidArgument
/// unless n_heads is a positive multiple of n_kv_heads > 0, max_query_len >= 1 and
/// 0 < head_dim <= kFlashAttentionMaxHeadDim.
int64_t flash_attention_vectors_per_block(int64_t max_query_len, int64_t n_heads, int64_t n_kv_heads,
                                          int64_t head_dim);

/// Query rows (of one sequence) one flash_attention() block holds: its vectors
/// (flash_attention_vectors_per_block()) shared among the group's heads: vectors / min(group,
/// vectors). This is the query tile Br. Host-only arithmetic; throws as
/// flash_attention_vectors_per_block().
int64_t flash_attention_rows_per_block(int64_t max_query_len, int64_t n_heads, int64_t n_kv_heads,
                                       int64_t head_dim);

/// Number of Flash-Decoding splits flash_attention() uses, from the batch's shape alone (never
/// the context length, so a decode step's grid is the same at every length: what a CUDA graph
/// needs). The rule: none (1) unless max_query_len <= kFlashDecodeMaxQueryLen. Otherwise the
/// blocks without splits (n_seqs x query tiles x KV heads x head chunks) are multiplied until
/// they fill every SM twice (2 x sm_count blocks: a full wave plus room to hide the tail), at most
/// kFlashMaxSplits:  splits = clamp(ceil(2 sm_count / blocks), 1, kFlashMaxSplits).
/// On the device each block then cuts the keys its tile sees into that many ranges of whole
/// kFlashKeyTile tiles (flash_split.cuh): a short context leaves the later splits empty (they
/// write only their running max, -inf, which the merge skips), a long one gives every split
/// ceil(keys / splits) keys rounded up to a tile. At batch 1 on a 132-SM card a GQA 9/3 decode row
/// gets 64 splits: 4,096 keys run as 192 blocks of 64 keys, not 3 blocks of 4,096.
/// Host-only arithmetic, no GPU needed. Throws InvalidArgument for non-positive arguments, as
/// flash_attention_vectors_per_block().
int64_t flash_attention_splits(int64_t max_query_len, int64_t n_seqs, int64_t n_heads, int64_t n_kv_heads,
                               int64_t head_dim, int64_t sm_count);

/// Floats of FlashWorkspace::partials a call with `n_splits` splits over n_tokens rows needs:
/// n_splits x n_tokens x n_heads x (head_dim + 2), or 0 without splits. Host-only arithmetic.
/// Throws InvalidArgument for n_splits, n_heads or head_dim < 1 or n_tokens < 0.
int64_t flash_attention_workspace_floats(int64_t n_splits, int64_t n_tokens, int64_t n_heads, int64_t head_dim);

/// FlashAttention-2 forward (Dao 2023, Algorithm 1) over the paged f32 pool, for a batch mixing
/// prefill chunks and decode rows: the contract of paged_attention() (same q, pool, index arrays
/// and GQA mapping) plus
///   causal: row i at position p sees keys 0 .. p (true), or all seq_lens[s] keys (false);
///   lse: (n_tokens, n_heads) each row's logsumexp m + log(l) of the scaled scores, natural log,
///        or null (not written);
///   max_query_len: the longest query_len(s) in the batch (host int: the grid is sized without
///        reading the device); a smaller value leaves rows unwritten (not checked);
///   workspace: the caller's scratch (split partials), grown on demand;
///   split_kv: false forces one block per row's keys (no Flash-Decoding; the benchmark's
///        "without");
///   window: sliding window (0: none), causal only: row p sees keys p - window + 1 .. p, and key
///        tiles wholly before a query tile's window are never loaded (the splits cut only the
///        keys the tile sees), as the CPU kernel's skip_window_tiles.
/// Work layout: grid (sequence, query tile x split, KV head x head chunk); a block of 128
/// threads holds a query tile of Br = flash_attention_rows_per_block() rows times the group's
/// heads (so each K/V tile is gathered through the block table into shared memory ONCE per
/// group), walks key tiles of 32 with the online softmax per (row, head) (running m, l and a
/// register accumulator), skips key tiles wholly above the diagonal (causal) and masks the rest
/// per key. Decode (max_query_len <= kFlashDecodeMaxQueryLen): 4 or 8 query vectors per block,
/// and each row's keys split into flash_attention_splits() ranges processed by different blocks
/// (Flash-Decoding), each writing its partial (m, l, acc) to the workspace; a merge kernel then
/// combines them per (row, head): out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
/// The grid depends on n_seqs, max_query_len and the model's shape only, not on the context.
/// Shared memory: (Q tile + K + V + P) floats, up to 101 KiB (32 vectors at head_dim 256; opt-in
/// beyond 48 KiB, sm_80+, set once per workspace). f32 throughout, summed in another order than
/// paged_attention_reference (test_cuda_flash_attention holds it to 1e-4 of the outputs' scale).
/// Preconditions (throw InvalidArgument): paged_attention()'s, with 0 < head_dim <=
/// kFlashAttentionMaxHeadDim; 1 <= max_query_len <= n_tokens when n_tokens > 0; 0 <= window <=
/// INT32_MAX, and window 0 unless causal; n_kv_heads and
/// the grid's other dimensions within 65535. Throws CudaError if a launch or allocation fails,
/// UnsupportedError if the GPU's per-block shared memory is below a tile's.
void flash_attention(const float* q, const float* k_pool, const float* v_pool, float* out,
                     float* lse, const int32_t* query_start_loc, const int32_t* seq_lens,
                     const int32_t* block_tables, int64_t n_tokens, int64_t n_seqs,
                     int64_t max_blocks_per_seq, int64_t block_size, int64_t n_heads,
                     int64_t n_kv_heads, int64_t head_dim, float scale, bool causal,
                     int64_t max_query_len, FlashWorkspace& workspace, cudaStream_t stream,
                     bool split_kv = true, int64_t window = 0);

/// Standard attention, flash_attention()'s naive twin (Vaswani et al. 2017, eq. 1; "standard
/// attention implementation", Dao et al. 2022, Algorithm 0), on the same arguments: for each
/// sequence in turn, S = scale Q K^T is materialized in device memory as (n_heads, query_len,
/// n_keys) (causal: -inf above the diagonal), softmaxed row by row in place (max subtracted),
/// then out = P V. One thread per score, one block per softmax row, one thread per output
/// element; three launches per sequence. `scores` is the caller's buffer for S, grown (after
/// synchronizing `stream`) to n_heads x max_scores_per_head floats, where max_scores_per_head is
/// the largest query_len(s) x seq_lens[s] of the batch when the caller knows it (the host batch:
/// CudaBackend), or 0 for the bound max_query_len x max_blocks_per_seq x block_size. A value
/// below some sequence's query_len x seq_len overruns the buffer (not checked on the device, as
/// the index arrays are not). Returns the bytes of S this call needed: the O(N^2) memory
/// FlashAttention avoids. `window` as flash_attention() (S keeps its masked scores: -inf
/// before the window). Same preconditions and errors as flash_attention(), plus
/// InvalidArgument for max_scores_per_head < 0 or above the bound.
int64_t naive_attention(const float* q, const float* k_pool, const float* v_pool, float* out,
                        float* lse, const int32_t* query_start_loc, const int32_t* seq_lens,
                        const int32_t* block_tables, int64_t n_tokens, int64_t n_seqs,
                        int64_t max_blocks_per_seq, int64_t block_size, int64_t n_heads,
                        int64_t n_kv_heads, int64_t head_dim, float scale, bool causal,
                        int64_t max_query_len, DeviceBuffer<float>& scores, cudaStream_t stream,
                        int64_t max_scores_per_head = 0, int64_t window = 0);

/// FlashAttention-2 forward on tensor cores, for the kernel benchmark: one sequence of n tokens,
/// contiguous bf16 (uint16_t bits, as lio::f32_to_bf16) q (n_heads, n, head_dim) and k, v
/// (n_kv_heads, n, head_dim); query head h reads KV head h / (n_heads / n_kv_heads). out:
/// (n_heads, n, head_dim) f32 = softmax(scale q k^T [+ causal mask]) v; lse: (n_heads, n)
/// natural-log logsumexp of the scaled scores, or null. Work layout: a block of 4 warps per
/// (tile of 64 query rows, head), each warp 16 rows; K/V tiles of 64 keys in shared memory;
/// S = Q K^T and O += P V with nvcuda::wmma 16x16x16 (bf16 in, f32 accumulate); the online
/// softmax runs in f32 registers, P rounded to bf16 for the second product; causal tiles above
/// the diagonal are skipped. Error vs f32: P's bf16 rounding (~2^-9 relative per weight).
/// Preconditions (throw InvalidArgument): non-null, 16-byte-aligned q, k, v, out; 0 <= n <=
/// INT32_MAX (0 launches nothing); head_dim 64 or 128;
/// n_heads a positive multiple of n_kv_heads, n_heads <= 65535; scale finite. Throws
/// UnsupportedError on a GPU older than sm_80, CudaError if the launch fails.
void flash_attention_bf16(const uint16_t* q, const uint16_t* k, const uint16_t* v, float* out,
                          float* lse, int64_t n, int64_t n_heads, int64_t n_kv_heads,
                          int64_t head_dim, float scale, bool causal, cudaStream_t stream);

/// FLOPs of flash_attention_bf16() (the two matmuls, 2 FLOPs per multiply-add): 4 n^2 head_dim
/// n_heads, halved when causal (FlashAttention-2's benchmark convention, Dao 2023, sec. 4.1).
double flash_attention_bf16_flops(int64_t n, int64_t n_heads, int64_t head_dim, bool causal);

}  // namespace lio::cuda
