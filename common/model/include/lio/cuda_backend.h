// cuda_backend.h — the forward pass's operators on an NVIDIA GPU (kernels/cuda).
//
// Model (lio/model.h) is the one layer loop; this backend supplies its operators on one CUDA
// device (0, or a rank's own): each Backend op is one or two launches of a kernel from
// kernels/cuda (one header per kernel, kernels/cuda/README.md) on the backend's stream,
// asynchronous until to_host() or greedy_argmax() waits. Matmuls pick their kernel by the number
// of rows: one token = gemv, 2..16 = gemv_batched (both dequantize the stored blocks in
// registers), more = cuBLAS SGEMM on a dequantized f32 copy. Attention is paged (over the pool's
// blocks): flash_attention (chapter 07, the default), its naive twin naive_attention or chapter
// 04's paged_attention on an f32 pool, paged_attention_quantized on an f16 / int8 pool; K/V go in
// with kv_append (vLLM's reshape_and_cache).
// Everything lives in this object: the stream, the cuBLAS handle, the weights (uploaded once,
// as stored or as converted by --dtype; a tied head shares the embedding's copy), the batch's
// index arrays, the activation scratch and the pinned staging buffers. No globals.
// This header needs no CUDA headers, so CPU-only code may include it; the class exists only
// in builds with CUDA (LIO_HAVE_CUDA).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lio/backend.h"
#include "lio/forward_batch.h"
#include "lio/kv_pool.h"
#include "lio/model_config.h"
#include "lio/model_loader.h"

namespace lio::cuda {

/// Device time spent in one kind of operation over the profiled forward passes.
struct OpTime {
  std::string op;       ///< "gemv", "gemv_batched", "gemm (dequantize + cuBLAS)", "attention", ...
  double total_ms = 0;  ///< summed device time (cudaEventElapsedTime), milliseconds
  int64_t calls = 0;    ///< number of ops timed
};

/// What a captured step queued (CudaBackend::capture_step): graph nodes by kind.
struct CapturedStep {
  int64_t kernels = 0;  ///< kernel launches
  int64_t copies = 0;   ///< memcpy nodes (the batch's index arrays in)
  int64_t other = 0;    ///< memsets, event records and anything else
};

/// Penalized token ids per logits row that CudaBackend::reserve() makes room for on the device
/// (a row's distinct context tokens, for the repetition / presence penalties of greedy sampling):
/// the first penalty request of up to this many distinct tokens a row grows nothing.
inline constexpr int64_t kReservedPenaltyIdsPerRow = 1024;

/// Backend on one CUDA device (`device`, 0 by default; chapter 08's ranks each take their local
/// rank's GPU). Not thread-safe: one forward pass at a time (any thread; each call makes the
/// backend's device current). Errors: InvalidArgument for bad shapes or references, CudaError
/// for device failures; an op that throws drains the stream first, so no work is left in flight.
class CudaBackend final : public Backend {
 public:
  /// Uploads `weights` (matrices in their dtype, norms as f32) to GPU `device` and creates the
  /// stream and cuBLAS handle. Copies `config`; `weights` may be freed afterwards.
  /// Throws UnsupportedError ("--device cuda: no CUDA device is available ...") if no GPU or
  /// driver is visible, if GPU `device` does not exist or cannot run this build's kernels, for
  /// a head_dim past the attention kernels' limit (cuda::kFlashAttentionMaxHeadDim, checked
  /// before any GPU work: the model is refused at load, not at its first forward), or for an
  /// MLA model whose shape is past the MLA kernels' limits (cuda::kMlaMaxLatentDim,
  /// kMlaMaxRopeDim) or whose up-projections are not f32; CudaError on an allocation or copy
  /// failure (e.g. "out of memory").
  /// `activations` (chapter 03): Int8 / Int8PerToken round x to int8 before every matmul of a
  /// block-quantized matrix (cuda::quantize_activations_int8, per 32-element block or per
  /// token) and multiply with cuda::gemv_int8 at every batch size; Int8PerToken leaves the LM
  /// head in f32 activations, as the CPU backend does.
  /// `attention` (chapter 07): Flash runs cuda::flash_attention (tiled, online softmax,
  /// split-KV decode); Naive the materialized-scores twin cuda::naive_attention.
  /// `attention` Paged runs chapter 04's cuda::paged_attention on an f32 pool (the kernel
  /// flash replaced; kept to compare them).
  CudaBackend(const ModelConfig& config, const Weights& weights,
              ActivationPrecision activations = ActivationPrecision::F32,
              AttentionBackend attention = AttentionBackend::Flash, int device = 0);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const ModelConfig& config() const override;
  /// "cuda:<device> (<name>, sm_<cc>, <memory> GiB)".
  std::string device_description() const override;
  /// Bytes of weights in device memory (a tied head once).
  int64_t weight_bytes() const override;
  /// cudaMemGetInfo's free bytes on this backend's GPU now (weights and any scratch already
  /// allocated are excluded; reserve() or the first forward pass allocates the scratch).
  int64_t free_memory_bytes() const override;

  /// A pool in device memory: two buffers (K, V) of n_layers * n_slots * kv_dim elements of
  /// config.dtype (f32, f16, or int8 plus one f32 scale per slot and KV head), zeroed, laid out
  /// as HostKvPool's; keys(l) / values(l) (f32) or key_data(l) / key_scales(l) return device
  /// pointers into them. Throws InvalidArgument on a bad shape, UnsupportedError for an f16 /
  /// int8 pool of an MLA model, CudaError ("out of memory") when it does not fit.
  /// Swaps (copy_block_to_host / copy_block_from_host) and copy-on-write copies run on this
  /// backend's stream, in order with the forward passes around them, through a pinned staging
  /// buffer: a swap-in's bytes have landed before the next pass reads them.
  std::unique_ptr<KvPool> make_kv_pool(const KvPoolConfig& config) override;
  /// Allocates every per-step buffer for steps within `limits`: the activation scratch, the
  /// batch's index arrays (device and pinned), the int8 activations' codes, the cuBLAS path's
  /// dequantization scratch, flash_attention's split partials (for any decode batch of up to
  /// max_seqs sequences), the argmax rows, greedy sampling's penalized ids
  /// (kReservedPenaltyIdsPerRow per logits row) and the pinned logits staging; and configures the
  /// flash kernels (SM count, shared-memory attributes). Afterwards a step within the limits
  /// allocates nothing and does not synchronize (buffer_grows() stays put). Throws
  /// InvalidArgument for negative limits, CudaError when device memory runs out.
  void reserve(const StepLimits& limits) override;

  /// Copies the batch's index arrays to device memory in one transfer through pinned memory.
  /// Throws InvalidArgument if the arrays' lengths disagree with each other.
  BatchView upload(const ForwardBatch& batch) override;
  /// Grow-only device buffer per Scratch id (a larger request frees the old one after the
  /// stream is idle). Throws InvalidArgument for a bad id or n_floats < 0.
  float* scratch(Scratch id, int64_t n_floats) override;

  /// cuda::embedding, then cuda::scale by config().embedding_scale when it is not 1 (gemma3).
  void embedding(const int32_t* token_ids, int64_t n, float* out) override;
  void rmsnorm(const float* x, WeightRef norm, float* out, int64_t n_rows) override;
  void add_bias(float* y, WeightRef bias, int64_t n_rows) override;
  /// cuda::matmul: gemv (1 row), gemv_batched (2 .. kGemvBatchedMaxRows), dequantize +
  /// cuBLAS SGEMM (more; the f32 scratch is held by the backend). With int8 activations and a
  /// block-quantized matrix: cuda::quantize_activations_int8 then cuda::gemv_int8, any n_rows.
  void matmul(WeightRef w, const float* x, float* y, int64_t n_rows, bool accumulate) override;
  /// As matmul() for each output; with int8 activations x is rounded ONCE
  /// (cuda::quantize_activations_int8) for every output whose matrix takes int8 codes of the
  /// same width (Q, K and V of a layer; gate and up), then one gemv_int8 per output.
  void matmul_many(std::span<const MatmulOut> outs, const float* x, int64_t n_rows) override;
  void rope(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads, float theta) override;
  /// cuda::kv_append into `pool` (which must come from a CudaBackend's make_kv_pool; else
  /// InvalidArgument); an f16 / int8 pool: cuda::kv_append_quantized.
  void kv_append(KvPool& pool, int64_t layer, const float* k, const float* v,
                 const BatchView& batch) override;
  /// Causal attention with scale config().softmax_scale() and the layer's sliding window
  /// (config().layer_window(layer): gemma3's local layers) over an f32 pool: cuda::flash_attention
  /// (AttentionBackend::Flash; split-KV for decode batches), cuda::naive_attention (Naive) or
  /// cuda::paged_attention (Paged), their scratch kept in this backend; over an f16 / int8 pool:
  /// cuda::paged_attention_quantized for all three (flash on a quantized pool is not done). Throws InvalidArgument if the pool is
  /// not a device pool or the batch's block_size differs from the pool's.
  void attention(KvPool& pool, int64_t layer, const float* q, float* out,
                 const BatchView& batch) override;
  /// cuda::mla_rope on each head's q_pe and each latent row's k_pe (MLA models, chapter 02).
  void mla_rope(float* q, float* latent, const int32_t* positions, int64_t n_tokens) override;
  /// cuda::mla_latent_append, then the absorbed path (cuda::mla_absorbed_attention) or the
  /// naive one (cuda::mla_gather_latents, cuBLAS up-projections of every cached latent to K
  /// and V, cuda::mla_naive_attention), as config().mla_absorbed says. Throws InvalidArgument
  /// as attention() does.
  void mla_attention(KvPool& pool, int64_t layer, const float* q, const float* latent, float* out,
                     const BatchView& batch) override;
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override;
  /// cuda::geglu (gemma3's MLP).
  void geglu(const float* gate, const float* up, float* out, int64_t n) override;
  /// cuda::add (gemma3's residual add after a post-norm).
  void add(float* x, const float* y, int64_t n) override;
  /// cuda::scale (granite's residual and logit scales).
  void scale(float* x, float factor, int64_t n) override;
  /// cuda::softcap (gemma2's final logits).
  void softcap(float* x, float cap, int64_t n) override;
  void gather_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t dim,
                   float* out) override;
  /// Device -> pinned (async), wait for the stream, pinned -> `host`.
  void to_host(const float* src, int64_t n_floats, float* host) override;
  void from_host(const float* host, int64_t n_floats, float* dst) override;
  bool host_memory() const override { return false; }

  bool has_device_argmax() const override { return true; }
  /// Per requested row: the repetition penalty (cuda::repeat_penalty, skipped when 1) over its
  /// distinct ids, then cuda::argmax; waits and returns the rows' ArgmaxRow (12 bytes each come
  /// back instead of vocab_size floats). Throws InvalidArgument if the three lists differ in
  /// length, a row is outside the last uploaded batch's logits rows, or a penalized id is
  /// outside the vocabulary; as cuda::repeat_penalty for a bad penalty.
  std::vector<ArgmaxRow> greedy_argmax(float* logits, std::span<const int32_t> rows,
                                       const std::vector<std::vector<int32_t>>& penalty_tokens,
                                       std::span<const float> penalties) override;

  /// When on, every op is bracketed by CUDA events and its device time is added to
  /// op_times() at the next wait (to_host, greedy_argmax). Events serialize nothing but cost
  /// ~1 us each: leave off when timing tok/s.
  void set_profiling(bool on);
  /// Accumulated per-op device times since the last clear_op_times(), largest first.
  std::vector<OpTime> op_times() const;
  /// Zeroes the accumulated op times.
  void clear_op_times();

  /// Times a per-step device buffer (activation scratch, index arrays, int8 codes, split
  /// partials, ...) had to grow since construction. Each growth synchronizes the stream and
  /// allocates; after reserve(), a step within its limits adds none.
  int64_t buffer_grows() const;
  /// Reallocations of the buffers a captured graph may hold (buffer_grows() less greedy
  /// sampling's and the logits read-back's, which no graph holds, plus the flash workspace's split
  /// partials). replay_graph() refuses a graph captured at another count (issue 60, defects 4 and 5).
  int64_t graph_buffer_grows() const;
  /// Times an upload() found the previous pass's work unwaited and synchronized the stream
  /// first (every pass normally ends in a wait: to_host / greedy_argmax).
  int64_t upload_syncs() const;

  /// Runs `body` with this backend's stream capturing into a CUDA graph
  /// (cudaStreamCaptureModeGlobal: any allocation or synchronization inside invalidates the
  /// capture) and returns what it queued. Nothing runs; the graph is discarded. What a decode
  /// step's forward pass (Model::forward_device, without the final copy to the host) needs to
  /// be replayed as a graph, and how many kernel launches one eager step makes. Profiling must
  /// be off. Throws CudaError (cudaErrorStreamCaptureInvalidated, ...) if `body` allocated or
  /// synchronized, and whatever `body` throws.
  CapturedStep capture_step(const std::function<void()>& body);

  // ---- fused decode kernels (issue 45) ---------------------------------------------------
  /// Throws UnsupportedError under per-token int8 activations (see Backend::set_row_parallel_max).
  void set_row_parallel_max(std::function<void(float* row_max, int64_t n)> row_max) override;
  /// Backend::set_fused_kernels; returns true. Which fused kernel runs where is
  /// cuda::FusedKernels' choice (kernels/cuda/fused_kernels.h), the one place that decides.
  bool set_fused_kernels(bool on) override;
  /// With fused kernels on and one row whose matrices fused_gemv_supports(), all of one dtype,
  /// no int8 activations: cuda::rmsnorm_gemv_many (xn unwritten); else the default.
  void rmsnorm_matmul_many(const float* x, WeightRef norm, float* xn, std::span<const MatmulOut> outs,
                           int64_t n_rows) override;
  /// Likewise cuda::rmsnorm_gemv_swiglu (xn and up unwritten); else the default.
  void rmsnorm_swiglu(const float* x, WeightRef norm, float* xn, WeightRef w_gate, WeightRef w_up, float* gate,
                      float* up, int64_t n_rows) override;
  /// With fused kernels on: cuda::rope_qk (bitwise the two rope() calls); else the default.
  void rope_qk(float* q, float* k, const int32_t* positions, int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads,
               float theta) override;

  // ---- decode CUDA graphs (issue 45) ----------------------------------------------------
  /// False for MLA models (the naive path sizes its gather from the sequence lengths) and for
  /// the naive attention kernel (its scores buffer and grid follow the longest sequence).
  bool supports_graphs() const override;
  /// cudaStreamBeginCapture (thread-local mode) around `forward`, cudaGraphInstantiate, kept
  /// under `key`; upload() records the captured batch's array sizes, which replay_graph checks.
  /// Waits for the stream first. Throws as Backend::capture_graph.
  void capture_graph(int64_t key, const std::function<float*()>& forward) override;
  /// Writes the batch's arrays into the pinned staging array the captured upload copies from
  /// (same order and sizes as the capture's), then cudaGraphLaunch: one launch for the whole
  /// forward pass. Returns nullptr as Backend::replay_graph says, and while profiling (a graph
  /// has no per-op events).
  float* replay_graph(int64_t key, const ForwardBatch& batch) override;
  void clear_graphs() override;
  void drop_graph(int64_t key) override;
  /// Graphs replayed since construction.
  int64_t graph_replays() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lio::cuda
