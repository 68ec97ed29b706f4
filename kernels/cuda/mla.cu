// mla.cu — multi-head latent attention (DeepSeek-V2, DeepSeek-AI 2024, sec. 2.1) over the paged
// KV pool: the latent row of each token (c_kv, kv_lora_rank floats, then the shared RoPE key
// k_pe, qk_rope_head_dim floats) is what the pool caches. The row is split in two equal halves:
// floats [0, half) live in the layer's K array, [half, 2 half) in its V array, at the token's
// slot (half = (d_c + d_R) / 2 = ModelConfig::kv_dim()).
//
//   mla_rope:            RoPE on each head's q_pe and on the row's k_pe, explicit frequencies.
//   mla_latent_append:   each batch row's latent into the pool at its slot.
//   mla_absorbed_attention: per (row i, head h), attention in latent space (sec. 2.1.2's
//       "absorb W_UK into W_Q and W_UV into W_O"):
//         q_lat = W_UK[h]^T q_nope                         (d_c)
//         s_j   = scale (q_lat . c_j + q_pe . k_pe_j)
//         o_lat = sum_j softmax(s)_j c_j                    (d_c)
//         out   = W_UV[h] o_lat                             (d_v)
//   mla_gather_latents + cuBLAS up-projection + mla_naive_attention: the naive path, which
//       up-projects every cached latent to K_nope = C W_UK^T and V = C W_UV^T each step and
//       runs ordinary attention with the key [k_nope_j ; k_pe_j].
//
// Both attention kernels share one block layout, the one of paged_attention.cu: one block of
// 4 warps per (row, head); warp w takes key tiles w, w + 4, ... of 32 keys, lane = key: the
// lane computes its key's whole score, the warp keeps a running max / sum (online softmax,
// Milakov & Gimelshein 2018) and, lanes over the value's dimensions, adds p_j v_j; the warps'
// partial results merge in shared memory at the end (FlashAttention-2's split over keys, Dao
// 2023 sec. 3.1). In the absorbed kernel the "value" of key j is the latent c_j itself.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "mla.h"
#include "lio/error.h"
#include "paged_index.cuh"
#include "reduce.cuh"

namespace lio::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * detail::kWarpSize;  // 128
constexpr int kMaxOut = static_cast<int>(kMlaMaxLatentDim);  // largest d_c / d_v / d_nope
constexpr int kMaxRope = static_cast<int>(kMlaMaxRopeDim);

// ---- device helpers -----------------------------------------------------------------------------

using detail::slot_of;

/// Element e of a latent row whose halves live at k_row (e < half) and v_row (e >= half).
__device__ __forceinline__ float latent_at(const float* k_row, const float* v_row, int half, int e) {
  return e < half ? k_row[e] : v_row[e - half];
}

/// The block's shared state for mla_attend.
struct AttendShared {
  float acc[kWarps][kMaxOut];
  float max[kWarps];
  float sum[kWarps];
};

/// Online-softmax attention of one (row, head) over n_keys keys, by the whole block:
/// out_shared (out_dim) = sum_j softmax_j(score(j)) value(key_j, e). score(j, &key) returns the
/// (already scaled) score of key j and sets `key`, the handle value() reads it by. Ends with a
/// __syncthreads(): out_shared is ready for every thread.
template <int kPerLane, typename Score, typename Value>
__device__ void mla_attend(int n_keys, int out_dim, Score score, Value value, AttendShared& sh,
                           float* out_shared) {
  const int lane = threadIdx.x % detail::kWarpSize;
  const int warp = threadIdx.x / detail::kWarpSize;
  float running_max = -INFINITY;
  float running_sum = 0.0f;
  float acc[kPerLane];
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) acc[c] = 0.0f;
  for (int tile = warp * detail::kWarpSize; tile < n_keys; tile += kWarps * detail::kWarpSize) {
    const int j = tile + lane;
    int64_t key = 0;
    const float s = j < n_keys ? score(j, key) : -INFINITY;
    const float new_max = fmaxf(running_max, detail::warp_max(s));
    const float correction = expf(running_max - new_max);  // 0 on the warp's first tile
    const float p = expf(s - new_max);                     // 0 past the last key
    running_sum = running_sum * correction + detail::warp_sum(p);
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) acc[c] *= correction;
    const int n_valid = min(detail::kWarpSize, n_keys - tile);
    for (int jj = 0; jj < n_valid; ++jj) {
      const float p_j = __shfl_sync(0xffffffffu, p, jj);
      const int64_t key_j = __shfl_sync(0xffffffffu, key, jj);
#pragma unroll
      for (int c = 0; c < kPerLane; ++c) {
        const int e = lane + c * detail::kWarpSize;
        if (e < out_dim) acc[c] += p_j * value(key_j, e);
      }
    }
    running_max = new_max;
  }
  if (lane == 0) {
    sh.max[warp] = running_max;
    sh.sum[warp] = running_sum;
  }
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    const int e = lane + c * detail::kWarpSize;
    if (e < out_dim) sh.acc[warp][e] = acc[c];
  }
  __syncthreads();
  float block_max = sh.max[0];  // warp 0 always has key 0
#pragma unroll
  for (int w = 1; w < kWarps; ++w) block_max = fmaxf(block_max, sh.max[w]);
  float weight[kWarps];
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = expf(sh.max[w] - block_max);  // a warp with no tile: e^-inf = 0
    total += sh.sum[w] * weight[w];
  }
  const float inv_total = 1.0f / total;
  for (int e = threadIdx.x; e < out_dim; e += kThreads) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += sh.acc[w][e] * weight[w];
    out_shared[e] = o * inv_total;
  }
  __syncthreads();
}

/// Position count row `row` attends to (0 .. its own position) and its sequence.
struct RowContext {
  int seq;
  int n_keys;
};

__device__ __forceinline__ RowContext row_context(const int32_t* query_start_loc,
                                                  const int32_t* seq_lens, int n_seqs, int row) {
  const int s = detail::find_sequence(query_start_loc, n_seqs, row);
  const int q_start = query_start_loc[s];
  const int query_len = query_start_loc[s + 1] - q_start;
  return {s, seq_lens[s] - query_len + (row - q_start) + 1};
}

// ---- kernels ------------------------------------------------------------------------------------

/// Grid: ceil(n_tokens * (n_heads + 1) * d_rope / 2 / 128). One thread per (token, vector, pair):
/// vectors 0 .. n_heads-1 are the heads' q_pe, vector n_heads is the row's k_pe.
__global__ void mla_rope_kernel(float* q, float* latent, const int32_t* positions,
                                const float* inv_freq, int n_tokens, int n_heads, int d_nope,
                                int d_rope, int d_c) {
  const int n_pairs = d_rope / 2;
  const int64_t total = static_cast<int64_t>(n_tokens) * (n_heads + 1) * n_pairs;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int i = static_cast<int>(idx % n_pairs);
  const int vec = static_cast<int>((idx / n_pairs) % (n_heads + 1));
  const int t = static_cast<int>(idx / (static_cast<int64_t>(n_pairs) * (n_heads + 1)));
  float* x = vec < n_heads
                 ? q + (static_cast<int64_t>(t) * n_heads + vec) * (d_nope + d_rope) + d_nope
                 : latent + static_cast<int64_t>(t) * (d_c + d_rope) + d_c;
  // The angle in double, as cpu::rope_freqs computes it: positions reach 1e5, and a float
  // product would lose the low bits the high-frequency pairs turn by.
  const double angle = static_cast<double>(positions[t]) * static_cast<double>(inv_freq[i]);
  double s = 0.0;
  double c = 0.0;
  sincos(angle, &s, &c);
  const float cf = static_cast<float>(c);
  const float sf = static_cast<float>(s);
  const float a = x[2 * i];
  const float b = x[2 * i + 1];
  x[2 * i] = a * cf - b * sf;
  x[2 * i + 1] = a * sf + b * cf;
}

/// Grid: (n_tokens). Block: (kThreads). Row t's halves to its slot; slot < 0: padding, skipped.
__global__ void mla_latent_append_kernel(const float* latent, const int32_t* slot_mapping,
                                         int half, float* k_pool, float* v_pool) {
  const int t = blockIdx.x;
  const int64_t slot = slot_mapping[t];
  if (slot < 0) return;
  const float* row = latent + static_cast<int64_t>(t) * 2 * half;
  for (int e = threadIdx.x; e < half; e += kThreads) {
    k_pool[slot * half + e] = row[e];
    v_pool[slot * half + e] = row[half + e];
  }
}

/// Grid: (n_tokens, n_heads). Block: (kThreads). kPerLane = ceil(d_c / 32) rounded up to a
/// power of two: the lane's share of the latent accumulator, in registers.
template <int kPerLane>
__global__ void __launch_bounds__(kThreads)
mla_absorbed_kernel(const float* q,          // (n_tokens, n_heads, d_nope + d_rope)
                    const float* k_pool,     // (n_slots, half): latent floats [0, half)
                    const float* v_pool,     // (n_slots, half): latent floats [half, 2 half)
                    const float* w_uk,       // (n_heads * d_nope, d_c)
                    const float* w_uv,       // (n_heads * d_v, d_c)
                    float* out,              // (n_tokens, n_heads * d_v)
                    const int32_t* query_start_loc, const int32_t* seq_lens,
                    const int32_t* block_tables, int n_seqs, int max_blocks_per_seq,
                    int block_size, int n_heads, int d_nope, int d_rope, int d_c, int d_v,
                    float scale) {
  __shared__ float q_shared[kMaxOut + kMaxRope];  // [q_lat (d_c) ; q_pe (d_rope)]
  __shared__ float q_nope_shared[kMaxOut];
  __shared__ float o_lat[kMaxOut];
  __shared__ AttendShared sh;
  const int row = blockIdx.x;
  const int h = blockIdx.y;
  const int half = (d_c + d_rope) / 2;
  const RowContext ctx = row_context(query_start_loc, seq_lens, n_seqs, row);
  const int32_t* table = block_tables + static_cast<int64_t>(ctx.seq) * max_blocks_per_seq;

  // 1. q_lat = W_UK[h]^T q_nope: threads over the latent dimension (coalesced W_UK rows).
  const float* q_row = q + (static_cast<int64_t>(row) * n_heads + h) * (d_nope + d_rope);
  for (int d = threadIdx.x; d < d_nope; d += kThreads) q_nope_shared[d] = q_row[d];
  for (int d = threadIdx.x; d < d_rope; d += kThreads) q_shared[d_c + d] = q_row[d_nope + d];
  __syncthreads();
  const float* w_uk_h = w_uk + static_cast<int64_t>(h) * d_nope * d_c;
  for (int c = threadIdx.x; c < d_c; c += kThreads) {
    float acc = 0.0f;
    for (int d = 0; d < d_nope; ++d) acc += q_nope_shared[d] * w_uk_h[static_cast<int64_t>(d) * d_c + c];
    q_shared[c] = acc;
  }
  __syncthreads();

  // 2. Attention over the cached latent rows; the value of key j is c_j.
  const auto score = [&](int j, int64_t& slot) {
    slot = slot_of(table, block_size, j);
    const float* k_row = k_pool + slot * half;
    const float* v_row = v_pool + slot * half;
    float dot = 0.0f;
    for (int e = 0; e < half; ++e) dot += q_shared[e] * k_row[e];
    for (int e = 0; e < half; ++e) dot += q_shared[half + e] * v_row[e];
    return dot * scale;
  };
  const auto value = [&](int64_t slot, int e) {
    return latent_at(k_pool + slot * half, v_pool + slot * half, half, e);
  };
  mla_attend<kPerLane>(ctx.n_keys, d_c, score, value, sh, o_lat);

  // 3. out = W_UV[h] o_lat: one warp per output element, lanes over the latent dimension.
  const int lane = threadIdx.x % detail::kWarpSize;
  const int warp = threadIdx.x / detail::kWarpSize;
  const float* w_uv_h = w_uv + static_cast<int64_t>(h) * d_v * d_c;
  float* out_row = out + (static_cast<int64_t>(row) * n_heads + h) * d_v;
  for (int v = warp; v < d_v; v += kWarps) {
    float acc = 0.0f;
    for (int c = lane; c < d_c; c += detail::kWarpSize) acc += w_uv_h[static_cast<int64_t>(v) * d_c + c] * o_lat[c];
    acc = detail::warp_sum(acc);
    if (lane == 0) out_row[v] = acc;
  }
}

/// Grid: (n_ctx_total). Block: (kThreads). Context row r (of sequence s, position r - first[s])
/// gathered from the pool into c_out (r, d_c) and k_pe_out (r, d_rope).
__global__ void mla_gather_kernel(const float* k_pool, const float* v_pool,
                                  const int32_t* ctx_first, const int32_t* block_tables,
                                  int n_seqs, int max_blocks_per_seq, int block_size, int d_c,
                                  int d_rope, float* c_out, float* k_pe_out) {
  const int r = blockIdx.x;
  const int s = detail::find_sequence(ctx_first, n_seqs, r);
  const int64_t slot = slot_of(block_tables + static_cast<int64_t>(s) * max_blocks_per_seq,
                               block_size, r - ctx_first[s]);
  const int half = (d_c + d_rope) / 2;
  const float* k_row = k_pool + slot * half;
  const float* v_row = v_pool + slot * half;
  for (int e = threadIdx.x; e < d_c + d_rope; e += kThreads) {
    const float x = latent_at(k_row, v_row, half, e);
    if (e < d_c) {
      c_out[static_cast<int64_t>(r) * d_c + e] = x;
    } else {
      k_pe_out[static_cast<int64_t>(r) * d_rope + (e - d_c)] = x;
    }
  }
}

/// Grid: (n_tokens, n_heads). Block: (kThreads). Ordinary attention of q = [q_nope ; q_pe]
/// over keys [k_nope_j ; k_pe_j] and values v_j, all up-projected beforehand.
template <int kPerLane>
__global__ void __launch_bounds__(kThreads)
mla_naive_kernel(const float* q,          // (n_tokens, n_heads, d_nope + d_rope)
                 const float* k_nope,     // (n_ctx_total, n_heads * d_nope)
                 const float* k_pe,       // (n_ctx_total, d_rope)
                 const float* v,          // (n_ctx_total, n_heads * d_v)
                 float* out,              // (n_tokens, n_heads * d_v)
                 const int32_t* query_start_loc, const int32_t* seq_lens,
                 const int32_t* ctx_first, int n_seqs, int n_heads, int d_nope, int d_rope,
                 int d_v, float scale) {
  __shared__ float q_shared[kMaxOut + kMaxRope];
  __shared__ float o_shared[kMaxOut];
  __shared__ AttendShared sh;
  const int row = blockIdx.x;
  const int h = blockIdx.y;
  const RowContext ctx = row_context(query_start_loc, seq_lens, n_seqs, row);
  const int64_t first = ctx_first[ctx.seq];
  const float* q_row = q + (static_cast<int64_t>(row) * n_heads + h) * (d_nope + d_rope);
  for (int d = threadIdx.x; d < d_nope + d_rope; d += kThreads) q_shared[d] = q_row[d];
  __syncthreads();
  const int64_t k_stride = static_cast<int64_t>(n_heads) * d_nope;
  const int64_t v_stride = static_cast<int64_t>(n_heads) * d_v;
  const auto score = [&](int j, int64_t& r) {
    r = first + j;
    const float* kn = k_nope + r * k_stride + static_cast<int64_t>(h) * d_nope;
    const float* kp = k_pe + r * d_rope;
    float dot = 0.0f;
    for (int e = 0; e < d_nope; ++e) dot += q_shared[e] * kn[e];
    for (int e = 0; e < d_rope; ++e) dot += q_shared[d_nope + e] * kp[e];
    return dot * scale;
  };
  const auto value = [&](int64_t r, int e) { return v[r * v_stride + static_cast<int64_t>(h) * d_v + e]; };
  mla_attend<kPerLane>(ctx.n_keys, d_v, score, value, sh, o_shared);
  float* out_row = out + (static_cast<int64_t>(row) * n_heads + h) * d_v;
  for (int e = threadIdx.x; e < d_v; e += kThreads) out_row[e] = o_shared[e];
}

// ---- host helpers -------------------------------------------------------------------------------

void check_shape(const char* op, const MlaShape& m) {
  const std::string where = std::string("cuda::") + op + ": ";
  if (m.n_heads < 1 || m.n_heads > 65535 || m.d_nope < 1 || m.d_nope > kMlaMaxLatentDim ||
      m.d_rope < 0 || m.d_rope > kMlaMaxRopeDim || m.d_rope % 2 != 0 || m.d_c < 1 ||
      m.d_c > kMlaMaxLatentDim || m.d_v < 1 || m.d_v > kMlaMaxLatentDim ||
      (m.d_c + m.d_rope) % 2 != 0) {
    throw InvalidArgument(where + "need 1 <= n_heads <= 65535, 1 <= d_nope, d_c, d_v <= " +
                          std::to_string(kMlaMaxLatentDim) + ", even 0 <= d_rope <= " +
                          std::to_string(kMlaMaxRopeDim) + " and d_c + d_rope even, got n_heads=" +
                          std::to_string(m.n_heads) + " d_nope=" + std::to_string(m.d_nope) +
                          " d_rope=" + std::to_string(m.d_rope) + " d_c=" + std::to_string(m.d_c) +
                          " d_v=" + std::to_string(m.d_v));
  }
}

void check_batch(const char* op, int64_t n_tokens, int64_t n_seqs, int64_t max_blocks_per_seq,
                 int64_t block_size) {
  const std::string where = std::string("cuda::") + op + ": ";
  if (n_tokens < 0 || n_tokens > INT_MAX || n_seqs < 0 || n_seqs > INT_MAX - 1 ||
      (n_tokens > 0 && n_seqs < 1) || block_size < 1 || max_blocks_per_seq < 1 ||
      max_blocks_per_seq > INT_MAX / block_size) {
    throw InvalidArgument(where + "need 0 <= n_tokens <= INT32_MAX, n_seqs >= 1, block_size >= 1, "
                          "max_blocks_per_seq >= 1 and their product <= INT32_MAX, got n_tokens=" +
                          std::to_string(n_tokens) + " n_seqs=" + std::to_string(n_seqs) +
                          " block_size=" + std::to_string(block_size) + " max_blocks_per_seq=" +
                          std::to_string(max_blocks_per_seq));
  }
}

void require(bool ok, const char* op, const char* what) {
  if (!ok) throw InvalidArgument(std::string("cuda::") + op + ": " + what);
}

/// Runs launch.template operator()<kPerLane>() with kPerLane covering `dim` floats per warp.
template <typename Launch>
void dispatch_per_lane(int64_t dim, Launch&& launch) {
  if (dim <= 128) {
    launch.template operator()<4>();
  } else if (dim <= 256) {
    launch.template operator()<8>();
  } else if (dim <= 512) {
    launch.template operator()<16>();
  } else {
    launch.template operator()<32>();
  }
}

}  // namespace

static_assert(kMlaMaxLatentDim == 32 * 32, "kPerLane 32 covers the largest latent");

void mla_rope(float* q, float* latent, const int32_t* positions, const float* inv_freq,
              int64_t n_tokens, const MlaShape& shape, cudaStream_t stream) {
  check_shape("mla_rope", shape);
  require(n_tokens >= 0 && n_tokens <= INT_MAX, "mla_rope", "need 0 <= n_tokens <= INT32_MAX");
  if (n_tokens == 0 || shape.d_rope == 0) return;
  require(q != nullptr && latent != nullptr && positions != nullptr && inv_freq != nullptr,
          "mla_rope", "null device pointer (q, latent, positions or inv_freq)");
  const int64_t total = n_tokens * (shape.n_heads + 1) * (shape.d_rope / 2);
  const int64_t blocks = (total + 255) / 256;
  require(blocks <= INT_MAX, "mla_rope", "too many (token, head, pair) triples for one launch");
  mla_rope_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      q, latent, positions, inv_freq, static_cast<int>(n_tokens), static_cast<int>(shape.n_heads),
      static_cast<int>(shape.d_nope), static_cast<int>(shape.d_rope), static_cast<int>(shape.d_c));
  CUDA_CHECK(cudaGetLastError());
}

void mla_latent_append(const float* latent, const int32_t* slot_mapping, int64_t n_tokens,
                       int64_t half, float* k_pool, float* v_pool, cudaStream_t stream) {
  require(n_tokens >= 0 && n_tokens <= INT_MAX && half > 0 && half <= INT_MAX,
          "mla_latent_append", "need 0 <= n_tokens <= INT32_MAX and 0 < half <= INT32_MAX");
  if (n_tokens == 0) return;
  require(latent != nullptr && slot_mapping != nullptr && k_pool != nullptr && v_pool != nullptr,
          "mla_latent_append", "null device pointer (latent, slot_mapping, k_pool or v_pool)");
  mla_latent_append_kernel<<<static_cast<unsigned>(n_tokens), kThreads, 0, stream>>>(
      latent, slot_mapping, static_cast<int>(half), k_pool, v_pool);
  CUDA_CHECK(cudaGetLastError());
}

void mla_absorbed_attention(const float* q, const float* k_pool, const float* v_pool,
                            const float* w_uk, const float* w_uv, float* out,
                            const int32_t* query_start_loc, const int32_t* seq_lens,
                            const int32_t* block_tables, int64_t n_tokens, int64_t n_seqs,
                            int64_t max_blocks_per_seq, int64_t block_size, const MlaShape& shape,
                            float scale, cudaStream_t stream) {
  check_shape("mla_absorbed_attention", shape);
  check_batch("mla_absorbed_attention", n_tokens, n_seqs, max_blocks_per_seq, block_size);
  require(std::isfinite(scale), "mla_absorbed_attention", "scale must be finite");
  if (n_tokens == 0) return;
  require(q != nullptr && k_pool != nullptr && v_pool != nullptr && w_uk != nullptr &&
              w_uv != nullptr && out != nullptr && query_start_loc != nullptr &&
              seq_lens != nullptr && block_tables != nullptr,
          "mla_absorbed_attention", "null device pointer");
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(shape.n_heads));
  dispatch_per_lane(shape.d_c, [&]<int kPerLane>() {
    mla_absorbed_kernel<kPerLane><<<grid, kThreads, 0, stream>>>(
        q, k_pool, v_pool, w_uk, w_uv, out, query_start_loc, seq_lens, block_tables,
        static_cast<int>(n_seqs), static_cast<int>(max_blocks_per_seq),
        static_cast<int>(block_size), static_cast<int>(shape.n_heads),
        static_cast<int>(shape.d_nope), static_cast<int>(shape.d_rope),
        static_cast<int>(shape.d_c), static_cast<int>(shape.d_v), scale);
  });
  CUDA_CHECK(cudaGetLastError());
}

void mla_gather_latents(const float* k_pool, const float* v_pool, const int32_t* ctx_first,
                        const int32_t* block_tables, int64_t n_ctx_total, int64_t n_seqs,
                        int64_t max_blocks_per_seq, int64_t block_size, const MlaShape& shape,
                        float* c_out, float* k_pe_out, cudaStream_t stream) {
  check_shape("mla_gather_latents", shape);
  check_batch("mla_gather_latents", n_ctx_total, n_seqs, max_blocks_per_seq, block_size);
  if (n_ctx_total == 0) return;
  require(k_pool != nullptr && v_pool != nullptr && ctx_first != nullptr &&
              block_tables != nullptr && c_out != nullptr &&
              (k_pe_out != nullptr || shape.d_rope == 0),
          "mla_gather_latents", "null device pointer");
  mla_gather_kernel<<<static_cast<unsigned>(n_ctx_total), kThreads, 0, stream>>>(
      k_pool, v_pool, ctx_first, block_tables, static_cast<int>(n_seqs),
      static_cast<int>(max_blocks_per_seq), static_cast<int>(block_size),
      static_cast<int>(shape.d_c), static_cast<int>(shape.d_rope), c_out, k_pe_out);
  CUDA_CHECK(cudaGetLastError());
}

void mla_naive_attention(const float* q, const float* k_nope, const float* k_pe, const float* v,
                         float* out, const int32_t* query_start_loc, const int32_t* seq_lens,
                         const int32_t* ctx_first, int64_t n_tokens, int64_t n_seqs,
                         const MlaShape& shape, float scale, cudaStream_t stream) {
  check_shape("mla_naive_attention", shape);
  require(n_tokens >= 0 && n_tokens <= INT_MAX && n_seqs <= INT_MAX - 1 &&
              (n_tokens == 0 || n_seqs >= 1),
          "mla_naive_attention", "need 0 <= n_tokens <= INT32_MAX and n_seqs >= 1");
  require(std::isfinite(scale), "mla_naive_attention", "scale must be finite");
  if (n_tokens == 0) return;
  require(q != nullptr && k_nope != nullptr && (k_pe != nullptr || shape.d_rope == 0) &&
              v != nullptr && out != nullptr && query_start_loc != nullptr &&
              seq_lens != nullptr && ctx_first != nullptr,
          "mla_naive_attention", "null device pointer");
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(shape.n_heads));
  dispatch_per_lane(shape.d_v, [&]<int kPerLane>() {
    mla_naive_kernel<kPerLane><<<grid, kThreads, 0, stream>>>(
        q, k_nope, k_pe, v, out, query_start_loc, seq_lens, ctx_first, static_cast<int>(n_seqs),
        static_cast<int>(shape.n_heads), static_cast<int>(shape.d_nope),
        static_cast<int>(shape.d_rope), static_cast<int>(shape.d_v), scale);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace lio::cuda
