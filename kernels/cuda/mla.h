// mla.h — multi-head latent attention on the GPU (mla.cu; chapter 02, DeepSeek-V2 sec. 2.1): RoPE
// on the decoupled parts, the latent append, the absorbed attention and the naive path's steps.
//
// Launcher conventions (README.md in this folder): device pointers, an explicit stream, shapes
// checked on the host (lio::InvalidArgument), launches checked (lio::cuda::CudaError).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lio::cuda {

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

}  // namespace lio::cuda
