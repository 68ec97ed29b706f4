// cpu_backend.h — the Backend on the CPU: kernels/cpu over weights in host memory.
//
// Attention: a row whose whole context lies in its sequence's first block reads a contiguous
// run of slots — chapter 01's cache — and runs through chapter 01's decode_attention (Task 4);
// other rows read their K/V through the block table with chapter 04's paged_decode_attention
// (Task 5), one (row, head) pair per call. K/V are appended with chapter 01's KvCache::write
// (Task 3) on the pool's slots. So the learner's chapter 01 and 04 code is on the engine's path. Both attention paths depend only on the row's own position and block size,
// never on what else is in the batch, so batch invariance holds.
//
// An f16 or int8 pool (--kv-cache-dtype, chapter 03) is written element by element (int8:
// each (token, KV head) vector through chapter 03's quantize_row_int8, Task 6) and read by
// cpu::paged_decode_attention_f16 / _int8 for every row, dequantizing as they read.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "cpu_ops.h"
#include "lio/backend.h"
#include "lio/model_loader.h"

namespace lio {

/// Backend on the host CPU (Eigen-free hand kernels + OpenMP). Keeps references to `config`
/// and `weights`, which must outlive it.
class CpuBackend final : public Backend {
 public:
  /// `activations`: precision of x inside the matmuls; F32 by default. Int8 is cpu::matmul's
  /// per-32-block rounding; Int8PerToken rounds each token's row with chapter 03's
  /// quantize_row_int8 (Task 6) and runs cpu::matmul_int8 (W8A8 on Q8_0 weights, W4A8 on
  /// Q4_0 / Q4_1; f32 / f16 weights and the LM head keep f32 activations).
  CpuBackend(const ModelConfig& config, const Weights& weights,
             cpu::MatmulActivations activations = cpu::MatmulActivations::F32);

  const ModelConfig& config() const override { return config_; }
  std::string device_description() const override;
  int64_t weight_bytes() const override { return weights_.size_bytes(); }
  std::unique_ptr<KvPool> make_kv_pool(const KvPoolConfig& config) override;
  BatchView upload(const ForwardBatch& batch) override;
  float* scratch(Scratch id, int64_t n_floats) override;
  void embedding(const int32_t* token_ids, int64_t n, float* out) override;
  void rmsnorm(const float* x, WeightRef norm, float* out, int64_t n_rows) override;
  void matmul(WeightRef w, const float* x, float* y, int64_t n_rows, bool accumulate) override;
  void rope(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads) override;
  void kv_append(KvPool& pool, int64_t layer, const float* k, const float* v,
                 const BatchView& batch) override;
  void attention(KvPool& pool, int64_t layer, const float* q, float* out,
                 const BatchView& batch) override;
  void mla_rope(float* q, float* latent, const int32_t* positions, int64_t n_tokens) override;
  void mla_attention(KvPool& pool, int64_t layer, const float* q, const float* latent, float* out,
                     const BatchView& batch) override;
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override;
  void gather_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t dim,
                   float* out) override;
  void to_host(const float* src, int64_t n_floats, float* host) override;

 private:
  const WeightMatrix& matrix(WeightRef w) const;
  /// attention() over an f16 or int8 pool: every row through its block table with
  /// cpu::paged_decode_attention_f16 / _int8 (dequantized as read; chapter 03).
  void attention_quantized_kv(KvPool& pool, int64_t layer, const float* q, float* out, const BatchView& batch);
  const std::vector<float>& norm(WeightRef w) const;
  const ModelConfig& config_;
  const Weights& weights_;
  cpu::MatmulActivations activations_;
  std::array<std::vector<float>, static_cast<size_t>(Scratch::kCount)> scratch_;
  std::vector<uint8_t> paged_rows_;  ///< (n_tokens) 1 = row goes through paged_decode_attention
  std::vector<int32_t> row_seq_;     ///< (n_tokens) the sequence of each row
  std::vector<int8_t> token_codes_;  ///< Int8PerToken: (n_rows, cols) a matmul input's codes
  std::vector<float> token_scales_;  ///< Int8PerToken: (n_rows) their per-token scales
  std::vector<int64_t> kv_head_;     ///< (n_heads) the KV head each query head reads (ch02 Task 1)
  std::vector<float> mla_latents_;   ///< MLA: each sequence's cached latent rows, gathered
  std::vector<float> mla_c_;         ///< MLA naive path: the latents' c_kv parts, contiguous
  std::vector<float> mla_k_, mla_v_; ///< MLA naive path: up-projected keys and values
};

}  // namespace lio
