// cpu_backend.h — the Backend on the CPU: kernels/cpu over weights in host memory.
//
// Attention (chapter 07): every row of a batch, prefill and decode alike, goes through
// cpu::flash_attention, which reads K/V through each sequence's block table a tile at a time
// with the learner's online softmax, merge and tile rule (Tasks 2-4 under LIO_EXERCISES=07),
// after checking chapter 02's Task 1 names the GQA grouping it uses. A row's result depends
// only on its own position and keys, never on what else is in the batch, so batch invariance
// holds. --attention-backend naive (and paged: the CPU's paged kernel is this path's decode
// half) runs the naive twin instead: chapter 04's
// paged_decode_attention (Task 5) for decode rows, cpu::naive_attention (the score matrix
// materialized) for prefill chunks. K/V are appended with chapter 01's KvCache::write (Task 3)
// on the pool's slots. Chapter 01's contiguous decode_attention (Task 4) is not on this path:
// ch01_kv_cache runs it (chapters/01_kv_cache/contiguous_attention.h); the reference every
// kernel is tested against is kernels/cpu/attention_reference.h.
//
// An f16 or int8 pool (--kv-cache-dtype, chapter 03) is written element by element (int8:
// each (token, KV head) vector through chapter 03's quantize_row_int8, Task 6) and dequantized
// as the attention kernels gather each tile (naive: each sequence's K/V).
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cpu_ops.h"
#include "flash_attention.h"
#include "packed_matmul.h"
#include "lio/backend.h"
#include "lio/model_loader.h"

namespace lio {

/// Wall time the calling thread spent in one kind of CpuBackend operation over the profiled
/// forward passes (CpuBackend::set_profiling). An op's time includes its OpenMP fork and join
/// and the wait for the slowest thread, so "matmul" time is what the step pays for the matrix,
/// not one core's kernel time.
struct CpuOpTime {
  std::string op;            ///< "matmul q/k/v", "matmul gate/up", "attention", "rmsnorm", ...
  double total_ms = 0;       ///< summed wall time, milliseconds (std::chrono::steady_clock)
  int64_t calls = 0;         ///< number of ops timed
  double weight_bytes = 0;   ///< matmuls: packed weight bytes read over those calls, else 0
};

/// Backend on the host CPU (Eigen-free hand kernels + OpenMP). Keeps references to `config`
/// and `weights`, which must outlive it.
///
/// Matmuls: at construction every matrix is repacked into 16-row panels (cpu::PackedMatrix,
/// about the source's bytes again; the tied LM head gets its own copy, the embedding still
/// reads token_embd's rows), and cpu::packed_matmul runs them on the instruction set `isa`
/// picks.
class CpuBackend final : public Backend {
 public:
  /// `activations`: precision of x inside the matmuls; F32 by default. Int8 is
  /// cpu::packed_matmul's per-32-block rounding (ggml's Q8 activations); Int8PerToken rounds each token's row with
  /// chapter 03's quantize_row_int8 (Task 6) and runs cpu::packed_matmul_int8 (W8A8 on Q8_0,
  /// W4A8 on 4-bit weights; float weights and the LM head keep f32 activations).
  /// `attention` (chapter 07): Flash runs cpu::flash_attention (the default), Naive the
  /// materialized-scores twin cpu::naive_attention.
  /// `isa`: the packed kernels' instruction set (results are bitwise the same on each);
  /// default cpu::default_cpu_isa(). Throws as cpu::PackedMatrix for a malformed matrix.
  CpuBackend(const ModelConfig& config, const Weights& weights,
             cpu::MatmulActivations activations = cpu::MatmulActivations::F32,
             AttentionBackend attention = AttentionBackend::Flash, cpu::CpuIsa isa = cpu::default_cpu_isa());

  const ModelConfig& config() const override { return config_; }
  std::string device_description() const override;
  /// The packed matrices, token_embd and the norms.
  int64_t weight_bytes() const override { return weight_bytes_; }
  std::unique_ptr<KvPool> make_kv_pool(const KvPoolConfig& config) override;
  BatchView upload(const ForwardBatch& batch) override;
  float* scratch(Scratch id, int64_t n_floats) override;
  void embedding(const int32_t* token_ids, int64_t n, float* out) override;
  void rmsnorm(const float* x, WeightRef norm, float* out, int64_t n_rows) override;
  void add_bias(float* y, WeightRef bias, int64_t n_rows) override;
  void matmul(WeightRef w, const float* x, float* y, int64_t n_rows, bool accumulate) override;
  /// One OpenMP region for all outputs (x rounded to int8 once).
  void matmul_many(std::span<const MatmulOut> outs, const float* x, int64_t n_rows) override;
  void rope(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads, float theta) override;
  void kv_append(KvPool& pool, int64_t layer, const float* k, const float* v,
                 const BatchView& batch) override;
  void attention(KvPool& pool, int64_t layer, const float* q, float* out,
                 const BatchView& batch) override;
  void mla_rope(float* q, float* latent, const int32_t* positions, int64_t n_tokens) override;
  void mla_attention(KvPool& pool, int64_t layer, const float* q, const float* latent, float* out,
                     const BatchView& batch) override;
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override;
  void geglu(const float* gate, const float* up, float* out, int64_t n) override;
  void add(float* x, const float* y, int64_t n) override;
  void scale(float* x, float factor, int64_t n) override;
  /// cpu::softcap_scores (gemma2's final logits).
  void softcap(float* x, float cap, int64_t n) override;
  void gather_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t dim,
                   float* out) override;
  void to_host(const float* src, int64_t n_floats, float* host) override;
  void set_row_parallel_max(std::function<void(float* row_max, int64_t n)> row_max) override {
    row_parallel_max_ = std::move(row_max);
  }

  /// When on, every op is timed on the calling thread (steady_clock before and after; an op
  /// another op calls counts in the outer one only) and added to op_times(). Costs two clock
  /// reads an op (~50 ns): leave off when timing tok/s.
  void set_profiling(bool on) { profiling_ = on; }
  /// Accumulated per-op times since the last clear_op_times(), largest first.
  std::vector<CpuOpTime> op_times() const;
  /// Zeroes the accumulated op times.
  void clear_op_times() { op_times_.clear(); }

 private:
  /// Starts timing `op` (profiling on and no op already being timed): returns the start time in
  /// steady_clock nanoseconds, else -1. end_op adds the time since then to op_times_[op].
  int64_t begin_op();
  void end_op(const char* op, int64_t t0, double weight_bytes = 0);
  /// The op name a matmul reading `w` first is filed under ("matmul q/k/v", "matmul o", ...).
  static const char* matmul_op_name(WeightKind w);
  /// RAII: begin_op at construction, end_op at destruction (every return path of an op).
  class OpScope;
  /// The matrix `w` names (Weights::matrix; empty where the layer has none).
  const WeightMatrix& matrix(WeightRef w) const;
  /// The packed copy of w. Throws InternalError for a matrix the model does not have.
  const cpu::PackedMatrix& packed(WeightRef w) const;
  /// Rounds x (n_rows, cols) one token at a time with chapter 03's Task 6 (Int8PerToken) into
  /// token_codes_ / token_scales_. `row_parallel` (W_o's and W_down's input under tensor
  /// parallelism, set_row_parallel_max given): x is this rank's shard of each row, and each row
  /// is rounded at the whole row's scale (the group's max|x|), so its codes are one process's.
  void round_tokens(const float* x, int64_t n_rows, int64_t cols, bool row_parallel);
  /// Whether w's matmul takes per-token int8 rows (Int8PerToken, an integer kernel, not the head).
  bool per_token_int8(WeightRef w, bool has_int8_kernel) const;
  /// The activations of a per-32-block matmul: Int8 under Int8, else F32.
  cpu::MatmulActivations block_activations() const;
  /// The norm or bias vector `w` names (a norm, QNorm / KNorm, BiasQ / K / V). Throws
  /// InvalidArgument (Weights::vector) for another kind or a vector this model's layers lack.
  const std::vector<float>& vector(WeightRef w) const;
  /// Fills row_seq_ for `b`: row i belongs to sequence row_seq_[i].
  void map_rows_to_sequences(const ForwardBatch& b);
  /// Positions row i of `b` attends (causal: 0 .. its own position), after map_rows_to_sequences.
  int64_t row_context(const ForwardBatch& b, int64_t i) const;
  const ModelConfig& config_;
  const Weights& weights_;
  cpu::MatmulActivations activations_;
  AttentionBackend attention_backend_;
  cpu::CpuIsa isa_;
  /// Packed matrices: per layer kPackedPerLayer slots (Wq, Wk, Wv, Wo, Gate, Up, Down, WkvA,
  /// WkB, WvB), then the LM head; null where the model has no such matrix.
  std::vector<std::unique_ptr<cpu::PackedMatrix>> packed_;
  cpu::PackedScratch packed_scratch_;
  int64_t weight_bytes_ = 0;
  cpu::FlashWorkspace flash_workspace_;  ///< flash_attention's tiles and split partials
  std::vector<float> naive_scores_;      ///< naive_attention's score matrix S
  std::array<std::vector<float>, static_cast<size_t>(Scratch::kCount)> scratch_;
  std::vector<int32_t> row_seq_;     ///< (n_tokens) the sequence of each row
  std::vector<float> attn_scores_;   ///< naive decode rows: (n_threads, longest context) Task 5's scores
  std::vector<int8_t> token_codes_;  ///< Int8PerToken: (n_rows, cols) a matmul input's codes
  std::vector<float> token_scales_;  ///< Int8PerToken: (n_rows) their per-token scales
  /// Tensor parallelism (set_row_parallel_max): the group's max over each row, or empty.
  std::function<void(float* row_max, int64_t n)> row_parallel_max_;
  std::vector<float> row_max_;       ///< Int8PerToken under TP: (n_rows) each row's max|x|
  std::vector<float> row_pad_;       ///< Int8PerToken under TP: (cols + 1) a row's shard and its max
  std::vector<float> mla_latents_;   ///< MLA: each sequence's cached latent rows, gathered
  std::vector<float> mla_c_;         ///< MLA naive path: the latents' c_kv parts, contiguous
  std::vector<float> mla_k_, mla_v_; ///< MLA naive path: up-projected keys and values
  bool profiling_ = false;
  bool op_open_ = false;  ///< an op is being timed (nested ops are not)
  std::vector<CpuOpTime> op_times_;
};

}  // namespace lio
