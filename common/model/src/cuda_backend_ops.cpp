// cuda_backend_ops.cpp — the forward pass's operators of the CUDA backend: each Backend op is
// one or two launches of a kernels/cuda operator on the backend's stream, guarded (a throwing
// op drains the stream) and timed when profiling.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "cuda_backend_impl.h"
#include "dequant.h"
#include "device_kv_pool.h"
#include "device_matrix.h"
#include "elementwise.h"
#include "flash_attention_cuda.h"
#include "fused_kernels.h"
#include "gemv.h"
#include "gemv_batched.h"
#include "gemv_fused.h"
#include "gemv_int8.h"
#include "kv_append.h"
#include "lio/error.h"
#include "matmul.h"
#include "mla.h"
#include "paged_attention.h"
#include "rmsnorm.h"
#include "rope.h"

namespace lio::cuda {

namespace {

/// The op name profiling files a matmul of n rows under (the kernel cuda::matmul picks).
const char* matmul_op_name(int64_t n) {
  if (n == 1) return "gemv";
  if (n <= kGemvBatchedMaxRows) return "gemv_batched";
  return "gemm (dequantize + cuBLAS)";
}

}  // namespace

void CudaBackend::Impl::check_pool(const char* op, KvPool& pool, int64_t layer,
                                   const BatchView& batch) const {
  // Every layer's kv_append and attention call this: the message is built only when it throws.
  const auto where = [op] { return std::string("CudaBackend::") + op + ": "; };
  if (dynamic_cast<DeviceKvPool*>(&pool) == nullptr) {
    throw InvalidArgument(where() +
                          "the KV pool is not in device memory (make it with "
                          "CudaBackend::make_kv_pool)");
  }
  const auto n_model_layers = static_cast<int64_t>(pool.groups().layer_lane.size());
  if (pool.kv_dim() != config.kv_dim() || n_model_layers != config.n_layers) {
    throw InvalidArgument(where() + "the KV pool was made for another model shape");
  }
  if (layer < 0 || layer >= n_model_layers) {
    throw InvalidArgument(where() + "layer " + std::to_string(layer) + " outside [0, " +
                          std::to_string(n_model_layers) + ")");
  }
  if (batch.host == nullptr) throw InvalidArgument(where() + "no batch (call upload first)");
}

void CudaBackend::embedding(const int32_t* token_ids, int64_t n, float* out) {
  Impl& m = *impl_;
  m.guarded([&] {
    m.op("embedding", [&] { cuda::embedding(m.token_embd, token_ids, out, n, m.stream); });
    if (m.config.embedding_scale != 1.0f) {  // gemma3: rows times sqrt(d_model), as the CPU
      m.op("embedding scale", [&] { cuda::scale(out, m.config.embedding_scale, n * m.config.d_model, m.stream); });
    }
  });
}

void CudaBackend::rmsnorm(const float* x, WeightRef norm, float* out, int64_t n_rows) {
  Impl& m = *impl_;
  const float* weight = m.vector(norm);
  const int64_t width = norm_width(norm.kind, m.config);
  m.guarded([&] {
    m.op("rmsnorm", [&] { cuda::rmsnorm(x, weight, out, n_rows, width, m.config.rms_norm_eps, m.stream); });
  });
}

void CudaBackend::add_bias(float* y, WeightRef bias, int64_t n_rows) {
  Impl& m = *impl_;
  const float* b = m.vector(bias);
  const int64_t len = bias.kind == WeightKind::BiasQ ? m.config.q_dim() : m.config.kv_dim();
  m.guarded([&] { m.op("add_bias", [&] { cuda::add_bias(y, b, n_rows, len, m.stream); }); });
}

/// Chapter 03's int8 activations apply to `w` (as `matrix`): block-quantized weights only, and
/// (W8A8 per token) not the LM head — the CPU backend's rules (CpuBackend::matmul).
bool CudaBackend::Impl::int8_activations_for(WeightRef w, const DeviceMatrix& matrix) const {
  return activations != ActivationPrecision::F32 && has_int8_kernel(matrix.dtype) &&
         !(activations == ActivationPrecision::Int8PerToken && w.kind == WeightKind::Output);
}

void CudaBackend::Impl::quantize_x(const float* x, int64_t n_rows, int64_t cols) {
  grow(act_codes, n_rows * cols);
  grow(act_scales, n_rows * (cols / 32));
  op("quantize activations (int8)", [&] {
    quantize_activations_int8(x, n_rows, cols,
                              activations == ActivationPrecision::Int8 ? ActivationGroup::Block32 : ActivationGroup::Token,
                              act_codes.data(), act_scales.data(), stream);
  });
}

void CudaBackend::matmul(WeightRef w, const float* x, float* y, int64_t n_rows, bool accumulate) {
  Impl& m = *impl_;
  const DeviceMatrix& matrix = m.matrix(w);
  if (m.int8_activations_for(w, matrix) && n_rows > 0) {
    m.guarded([&] {
      m.quantize_x(x, n_rows, matrix.cols);
      m.op("gemv_int8 (int8 activations)", [&] {
        gemv_int8(matrix, m.act_codes.data(), m.act_scales.data(), y, n_rows, accumulate, m.stream);
      });
    });
    return;
  }
  if (m.fused.wide_q4_1_gemv(matrix, n_rows)) {  // issue 45: the wide Q4_1 reader
    m.guarded([&] { m.op("gemv (Q4_1, wide loads)", [&] { gemv_q4_1_wide(matrix, x, y, accumulate, m.stream); }); });
    return;
  }
  m.guarded([&] {
    if (n_rows > kGemvBatchedMaxRows && matrix.dtype != DType::F32) {
      m.grow(m.dequant_scratch, std::max(m.max_dequant_floats, matrix.rows * matrix.cols));
    }
    m.op(matmul_op_name(n_rows), [&] {
      cuda::matmul(*m.cublas, matrix, x, y, n_rows, accumulate, m.dequant_scratch.data(),
                   m.dequant_scratch.n_elems(), m.stream);
    });
  });
}

void CudaBackend::matmul_many(std::span<const MatmulOut> outs, const float* x, int64_t n_rows) {
  Impl& m = *impl_;
  // The outputs whose matrices take int8 codes share one rounding of x (it is the same x); the
  // rest (f32 / f16 / bf16 matrices) run as plain matmuls.
  int64_t int8_cols = -1;
  bool shared = n_rows > 0;
  for (const MatmulOut& o : outs) {
    const DeviceMatrix& matrix = m.matrix(o.w);
    if (!m.int8_activations_for(o.w, matrix)) continue;
    shared &= int8_cols < 0 || int8_cols == matrix.cols;
    int8_cols = matrix.cols;
  }
  if (int8_cols < 0 || !shared) return Backend::matmul_many(outs, x, n_rows);
  m.guarded([&] {
    m.quantize_x(x, n_rows, int8_cols);
    for (const MatmulOut& o : outs) {
      const DeviceMatrix& matrix = m.matrix(o.w);
      if (!m.int8_activations_for(o.w, matrix)) continue;
      m.op("gemv_int8 (int8 activations)", [&] {
        gemv_int8(matrix, m.act_codes.data(), m.act_scales.data(), o.y, n_rows, /*accumulate=*/false, m.stream);
      });
    }
  });
  for (const MatmulOut& o : outs) {
    if (!m.int8_activations_for(o.w, m.matrix(o.w))) matmul(o.w, x, o.y, n_rows, false);
  }
}

void CudaBackend::set_row_parallel_max(std::function<void(float* row_max, int64_t n)> row_max) {
  if (row_max && impl_->activations == ActivationPrecision::Int8PerToken) {
    throw UnsupportedError(
        "--activations int8-token under tensor parallelism: the CUDA backend rounds each rank's shard of W_o's "
        "and W_down's input at that shard's own scale (it does not exchange the row's max|x|), which is not one "
        "process's arithmetic; use --activations int8 or f32 on the GPU, or int8-token on the CPU");
  }
}

// ---- fused decode kernels (issue 45) -----------------------------------------------------------

bool CudaBackend::set_fused_kernels(bool on) {
  impl_->fused = FusedKernels(on);
  return true;
}

bool CudaBackend::Impl::can_fuse(WeightRef norm, std::span<const WeightRef> weights, int64_t n_rows) const {
  if (!fused.enabled() || weights.size() > static_cast<size_t>(kMaxFusedGemvOuts)) return false;
  std::array<const DeviceMatrix*, kMaxFusedGemvOuts> mats{};
  for (size_t i = 0; i < weights.size(); ++i) {
    mats[i] = &matrix(weights[i]);
    if (int8_activations_for(weights[i], *mats[i])) return false;
  }
  return fused.rmsnorm_gemv(norm_width(norm.kind, config), std::span(mats.data(), weights.size()), n_rows);
}

void CudaBackend::rmsnorm_matmul_many(const float* x, WeightRef norm, float* xn, std::span<const MatmulOut> outs,
                                      int64_t n_rows) {
  Impl& m = *impl_;
  std::array<WeightRef, kMaxFusedGemvOuts> refs{};
  const size_t n_outs = std::min(outs.size(), refs.size());
  for (size_t i = 0; i < n_outs; ++i) refs[i] = outs[i].w;
  if (outs.size() > refs.size() || !m.can_fuse(norm, std::span(refs.data(), n_outs), n_rows)) {
    Backend::rmsnorm_matmul_many(x, norm, xn, outs, n_rows);
    return;
  }
  std::array<FusedGemvOut, kMaxFusedGemvOuts> fused{};
  for (size_t i = 0; i < n_outs; ++i) fused[i] = {m.matrix(outs[i].w), outs[i].y};
  const float* weight = m.vector(norm);
  const int64_t width = norm_width(norm.kind, m.config);
  m.guarded([&] {
    m.op("rmsnorm + gemv (fused)", [&] {
      rmsnorm_gemv_many(x, weight, width, m.config.rms_norm_eps, std::span(fused.data(), n_outs), m.stream);
    });
  });
}

void CudaBackend::rmsnorm_swiglu(const float* x, WeightRef norm, float* xn, WeightRef w_gate, WeightRef w_up,
                                 float* gate, float* up, int64_t n_rows) {
  Impl& m = *impl_;
  const WeightRef refs[] = {w_gate, w_up};
  if (!m.can_fuse(norm, refs, n_rows) || m.matrix(w_gate).rows != m.matrix(w_up).rows) {
    Backend::rmsnorm_swiglu(x, norm, xn, w_gate, w_up, gate, up, n_rows);
    return;
  }
  const float* weight = m.vector(norm);
  const int64_t width = norm_width(norm.kind, m.config);
  m.guarded([&] {
    m.op("rmsnorm + gemv + swiglu (fused)", [&] {
      rmsnorm_gemv_swiglu(x, weight, width, m.config.rms_norm_eps, m.matrix(w_gate), m.matrix(w_up), gate, m.stream);
    });
  });
}

void CudaBackend::rope_qk(float* q, float* k, const int32_t* positions, int64_t n_tokens, int64_t n_heads,
                          int64_t n_kv_heads, float theta) {
  Impl& m = *impl_;
  if (!m.fused.rope_qk()) {
    Backend::rope_qk(q, k, positions, n_tokens, n_heads, n_kv_heads, theta);
    return;
  }
  const ModelConfig& c = m.config;
  m.guarded([&] {
    m.op("rope q + k (fused)", [&] {
      cuda::rope_qk(q, k, positions, n_tokens, n_heads, n_kv_heads, c.head_dim, theta, c.rope_style, m.stream);
    });
  });
}

void CudaBackend::rope(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads, float theta) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  m.guarded([&] {
    m.op("rope", [&] {
      cuda::rope(x, positions, n_tokens, n_heads, c.head_dim, theta, c.rope_style, m.stream);
    });
  });
}

void CudaBackend::kv_append(KvPool& pool, int64_t layer, const float* k, const float* v,
                            const BatchView& batch) {
  Impl& m = *impl_;
  m.check_pool("kv_append", pool, layer, batch);
  m.guarded([&] {
    m.op("kv_append", [&] {
      if (pool.dtype() == KvCacheDType::F32) {
        cuda::kv_append(k, v, batch.slot_mapping, batch.host->n_tokens(), pool.kv_dim(), pool.keys(layer),
                        pool.values(layer), m.stream);
      } else {  // chapter 03: rounded to f16 or int8 as it is written
        cuda::kv_append_quantized(k, v, batch.slot_mapping, batch.host->n_tokens(), m.config.n_kv_heads,
                                  m.config.head_dim, static_cast<DeviceKvPool&>(pool).quantized_layer(layer),
                                  m.stream);
      }
    });
  });
}

void CudaBackend::attention(KvPool& pool, int64_t layer, const float* q, float* out,
                            const BatchView& batch) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  m.check_pool("attention", pool, layer, batch);
  const ForwardBatch& b = *batch.host;
  if (b.block_size != pool.block_size()) {
    throw InvalidArgument("CudaBackend::attention: the batch's block_size " +
                          std::to_string(b.block_size) + " is not the pool's " +
                          std::to_string(pool.block_size()));
  }
  const float scale = c.softmax_scale();
  const int64_t window = c.layer_window(layer);  // gemma3's local layers; 0: every earlier key
  const cuda::DraftTrees trees{batch.tree_lens, batch.tree_masks};  // tree verification (null: none)
  if (pool.dtype() != KvCacheDType::F32) {
    // Chapter 03's f16 / int8 pools: chapter 04's kernel with K and V dequantized as they are
    // read, for both attention backends. Flash over a quantized pool is not done.
    m.guarded([&] {
      m.op("attention (paged, quantized)", [&] {
        paged_attention_quantized(q, static_cast<DeviceKvPool&>(pool).quantized_layer(layer), out,
                                  batch.query_start_loc, batch.seq_lens, batch.block_tables, b.n_tokens(),
                                  b.n_seqs(), b.max_blocks_per_seq, b.block_size, c.n_heads, c.n_kv_heads,
                                  c.head_dim, scale, m.stream, window, trees);
      });
    });
    return;
  }
  // Sizes the kernels' grids (and the naive S) from the host batch, without reading the device.
  int64_t max_query_len = 0;
  int64_t max_scores_per_head = 0;  // the largest sequence's S: query_len x seq_len
  for (int64_t s = 0; s < b.n_seqs(); ++s) {
    max_query_len = std::max(max_query_len, b.query_len(s));
    max_scores_per_head = std::max(max_scores_per_head, b.query_len(s) * b.seq_lens[static_cast<size_t>(s)]);
  }
  m.guarded([&] {
    if (m.attention_backend == AttentionBackend::Paged) {
      m.op("attention (paged)", [&] {
        paged_attention(q, pool.keys(layer), pool.values(layer), out, batch.query_start_loc, batch.seq_lens,
                        batch.block_tables, b.n_tokens(), b.n_seqs(), b.max_blocks_per_seq, b.block_size, c.n_heads,
                        c.n_kv_heads, c.head_dim, scale, m.stream, window, trees);
      });
    } else if (m.attention_backend == AttentionBackend::Flash) {
      m.op("attention (flash)", [&] {
        flash_attention(q, pool.keys(layer), pool.values(layer), out, /*lse=*/nullptr, batch.query_start_loc,
                        batch.seq_lens, batch.block_tables, b.n_tokens(), b.n_seqs(), b.max_blocks_per_seq,
                        b.block_size, c.n_heads, c.n_kv_heads, c.head_dim, scale, /*causal=*/true, max_query_len,
                        m.flash_workspace, m.stream, /*split_kv=*/true, window, trees);
      });
    } else {
      m.op("attention (naive)", [&] {
        naive_attention(q, pool.keys(layer), pool.values(layer), out, /*lse=*/nullptr, batch.query_start_loc,
                        batch.seq_lens, batch.block_tables, b.n_tokens(), b.n_seqs(), b.max_blocks_per_seq,
                        b.block_size, c.n_heads, c.n_kv_heads, c.head_dim, scale, /*causal=*/true, max_query_len,
                        m.naive_scores, m.stream, max_scores_per_head, window, trees);
      });
    }
  });
}

void CudaBackend::mla_rope(float* q, float* latent, const int32_t* positions, int64_t n_tokens) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  if (!c.is_mla()) throw InvalidArgument("CudaBackend::mla_rope: not an MLA model");
  const MlaShape shape{c.n_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.kv_lora_rank, c.v_head_dim};
  m.guarded([&] {
    m.op("mla_rope", [&] { cuda::mla_rope(q, latent, positions, m.mla_inv_freq, n_tokens, shape, m.stream); });
  });
}

void CudaBackend::mla_attention(KvPool& pool, int64_t layer, const float* q, const float* latent, float* out,
                                const BatchView& batch) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  if (!c.is_mla()) throw InvalidArgument("CudaBackend::mla_attention: not an MLA model");
  if (batch.tree_lens != nullptr) {
    throw UnsupportedError("CudaBackend: MLA attention has no tree mask; verify a draft tree on a model without MLA");
  }
  m.check_pool("mla_attention", pool, layer, batch);
  const ForwardBatch& b = *batch.host;
  if (b.block_size != pool.block_size()) {
    throw InvalidArgument("CudaBackend::mla_attention: the batch's block_size " + std::to_string(b.block_size) +
                          " is not the pool's " + std::to_string(pool.block_size()));
  }
  const MlaShape shape{c.n_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.kv_lora_rank, c.v_head_dim};
  const DeviceMatrix& wk_b = m.matrix({WeightKind::WkB, layer});
  const DeviceMatrix& wv_b = m.matrix({WeightKind::WvB, layer});
  const float scale = c.softmax_scale();
  m.guarded([&] {
    // 1. Each row's latent [c_kv ; k_pe] into the pool, halves in the K and V arrays.
    m.op("mla_latent_append", [&] {
      cuda::mla_latent_append(latent, batch.slot_mapping, b.n_tokens(), pool.kv_dim(), pool.keys(layer),
                              pool.values(layer), m.stream);
    });
    if (c.mla_absorbed) {
      // 2a. Attention in latent space (W_UK into the query, W_UV after the weighted sum).
      m.op("mla attention (absorbed)", [&] {
        cuda::mla_absorbed_attention(
            q, pool.keys(layer), pool.values(layer), reinterpret_cast<const float*>(wk_b.data),
            reinterpret_cast<const float*>(wv_b.data), out, batch.query_start_loc, batch.seq_lens,
            batch.block_tables, b.n_tokens(), b.n_seqs(), b.max_blocks_per_seq, b.block_size, shape,
            scale, m.stream);
      });
      return;
    }
    // 2b. Naive: every cached latent up-projected to K_nope and V for all heads, every step.
    const int64_t n_ctx = m.mla_ctx_total;
    m.grow(m.mla_c, n_ctx * c.kv_lora_rank);
    m.grow(m.mla_k_pe, std::max<int64_t>(n_ctx * c.qk_rope_head_dim, 1));
    m.grow(m.mla_k, n_ctx * c.n_heads * c.qk_nope_head_dim);
    m.grow(m.mla_v, n_ctx * c.n_heads * c.v_head_dim);
    m.op("mla gather latents (naive)", [&] {
      cuda::mla_gather_latents(pool.keys(layer), pool.values(layer), m.mla_ctx_first, batch.block_tables, n_ctx,
                               b.n_seqs(), b.max_blocks_per_seq, b.block_size, shape, m.mla_c.data(),
                               m.mla_k_pe.data(), m.stream);
    });
    m.op("mla up-projection (naive)", [&] {
      cuda::matmul(*m.cublas, wk_b, m.mla_c.data(), m.mla_k.data(), n_ctx, false, nullptr, 0,
                   m.stream);
      cuda::matmul(*m.cublas, wv_b, m.mla_c.data(), m.mla_v.data(), n_ctx, false, nullptr, 0,
                   m.stream);
    });
    m.op("mla attention (naive)", [&] {
      cuda::mla_naive_attention(q, m.mla_k.data(), m.mla_k_pe.data(), m.mla_v.data(), out, batch.query_start_loc,
                                batch.seq_lens, m.mla_ctx_first, b.n_tokens(), b.n_seqs(), shape, scale, m.stream);
    });
  });
}

void CudaBackend::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  Impl& m = *impl_;
  m.guarded([&] { m.op("swiglu", [&] { cuda::swiglu(gate, up, out, n, m.stream); }); });
}

void CudaBackend::geglu(const float* gate, const float* up, float* out, int64_t n) {
  Impl& m = *impl_;
  m.guarded([&] { m.op("geglu", [&] { cuda::geglu(gate, up, out, n, m.stream); }); });
}

void CudaBackend::add(float* x, const float* y, int64_t n) {
  Impl& m = *impl_;
  m.guarded([&] { m.op("add", [&] { cuda::add(x, y, n, m.stream); }); });
}

void CudaBackend::scale(float* x, float factor, int64_t n) {
  Impl& m = *impl_;
  m.guarded([&] { m.op("scale", [&] { cuda::scale(x, factor, n, m.stream); }); });
}

void CudaBackend::softcap(float* x, float cap, int64_t n) {
  Impl& m = *impl_;
  m.guarded([&] { m.op("softcap", [&] { cuda::softcap(x, cap, n, m.stream); }); });
}

void CudaBackend::gather_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t dim,
                              float* out) {
  Impl& m = *impl_;
  m.guarded([&] {
    m.op("gather_rows", [&] { cuda::gather_rows(x, rows, n_rows, dim, out, m.stream); });
  });
}

}  // namespace lio::cuda
