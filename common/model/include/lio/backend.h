// backend.h — the operators one device supplies to the forward pass.
//
// The Llama forward pass is written once (Model, lio/model.h) as a sequence of calls on a
// Backend; a backend owns its weights in its own memory, its activation scratch and its
// stream, and implements each operator with its kernels (CpuBackend: kernels/cpu;
// cuda::CudaBackend: kernels/cuda). All pointers an operator takes are in the backend's memory
// ("device pointers"; host memory for the CPU). Operators may run asynchronously; only
// to_host() and the argmax hook wait. No device has its own copy of the layer loop.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lio/communicator.h"
#include "lio/error.h"
#include "lio/forward_batch.h"
#include "lio/kv_pool.h"
#include "lio/model_config.h"
#include "lio/weight_kind.h"

namespace lio {

/// Elements per row a norm weight normalizes: head_dim for QNorm / KNorm (one row per head),
/// d_model for AttnNorm, FfnNorm and OutputNorm.
int64_t norm_width(WeightKind kind, const ModelConfig& config);

/// Precision of the activations in the matmuls of quantized weights (--activations): F32;
/// Int8 (each 32-element block of x rounded to int8 with its own scale, integer dot products,
/// as llama.cpp does: its accuracy, and why it is not the default, in bench/results/
/// cpu_activations_kl.md); or Int8PerToken (W8A8:
/// one scale per token — on the CPU rounded by chapter 03's Task 6 — with the LM head left in
/// f32 activations; docs/03_quantization.md). Both backends run all three; f32 / f16 / bf16
/// weights always multiply f32 activations.
enum class ActivationPrecision { F32, Int8, Int8PerToken };

/// Which attention kernels a backend runs (--attention-backend; chapter 07). Flash, the
/// default: tiled attention with the online softmax (Dao et al. 2022, Algorithm 1; FlashAttention-2's
/// split over query tiles, Dao 2023), GQA-aware (each KV head's tiles read once for its group of
/// query heads) and split-KV for decode (Flash-Decoding, Dao, Haziza, Massa, Sizov 2023): memory
/// O(N) in the context. Naive: standard attention, the twin every fast kernel is tested against:
/// each sequence's score matrix S = scale Q K^T, (n_heads, query_len, n_ctx), is materialized,
/// softmaxed row by row and multiplied by V: memory O(N^2) (Vaswani et al. 2017, eq. 1).
/// Paged: chapter 04's PagedAttention kernel (Kwon et al. 2023, sec. 4.1), one block per (row,
/// head), online softmax over 32-key tiles, no split; kept beside flash so the two can be
/// compared on the GPU (CUDA: cuda::paged_attention). The CPU has one paged kernel,
/// paged_decode_attention, which its naive path already runs for decode rows: Paged runs that
/// path on the CPU.
enum class AttentionBackend { Naive, Flash, Paged };

/// The largest step a runner will be asked to run, known at start-up (the scheduler's limits):
/// a backend sizes every per-step buffer from it once (Backend::reserve), so a step within these
/// limits allocates nothing and never waits for the device to grow a buffer (what a CUDA graph
/// replay needs). A larger step still runs; its buffers grow then.
struct StepLimits {
  int64_t max_tokens = 0;          ///< rows of one forward pass (max_num_batched_tokens)
  int64_t max_seqs = 0;            ///< sequences in one pass (max_num_seqs)
  int64_t max_logits_rows = 0;     ///< logits rows of one pass (max_seqs; k + 1 per sequence when verifying drafts)
  int64_t max_blocks_per_seq = 0;  ///< block-table width: the context length in blocks
  int64_t kv_cache_groups = 1;     ///< KV cache groups of the pool: a slot mapping and block table each
};

/// Activation buffers the forward pass asks its backend for (see Backend::scratch).
/// Gathered: the tensor-parallel LM head's logits of every rank, (tp, n_logits, vocab / tp).
enum class Scratch { X, Xn, Q, K, V, Attn, Gate, Up, Rows, Logits, Gathered, kCount };

/// One output of Backend::matmul_many: y (n_rows, w.rows) = x W^T.
struct MatmulOut {
  WeightRef w;          ///< the weight
  float* y = nullptr;   ///< device memory, (n_rows, rows of w)
};

/// A ForwardBatch's index arrays in the backend's memory, valid until the next upload().
/// Pointers as ForwardBatch's fields (same shapes); `host` is the batch itself.
struct BatchView {
  const ForwardBatch* host = nullptr;      ///< the batch on the host
  const int32_t* token_ids = nullptr;      ///< (n_tokens)
  const int32_t* positions = nullptr;      ///< (n_tokens)
  const int32_t* slot_mapping = nullptr;   ///< (n_tokens)
  const int32_t* query_start_loc = nullptr;  ///< (n_seqs + 1)
  const int32_t* seq_lens = nullptr;       ///< (n_seqs)
  const int32_t* block_tables = nullptr;   ///< (n_seqs, max_blocks_per_seq)
  const int32_t* logits_rows = nullptr;    ///< (n_logits)
  /// KV cache groups 1 .. G-1 (lio/kv_pool.h, KvCacheGroups; empty with one group): each
  /// group's (n_tokens) slot mapping and (n_seqs, max_blocks_per_seq) block tables.
  std::vector<const int32_t*> group_slot_mapping;
  std::vector<const int32_t*> group_block_tables;  ///< (G - 1) block tables, as block_tables
  /// Tree verification (ForwardBatch::tree_masks / tree_lens): (n_tokens) and (n_seqs), or both
  /// null when the batch carries no draft tree.
  const uint64_t* tree_masks = nullptr;
  const int32_t* tree_lens = nullptr;  ///< see tree_masks

  /// The view a layer of KV cache group `g` reads: slot_mapping and block_tables of that group
  /// (group 0: this view). Throws InvalidArgument if the batch has no such group.
  BatchView for_group(int64_t g) const {
    if (g == 0) return *this;
    if (g < 0 || g > static_cast<int64_t>(group_slot_mapping.size())) {
      throw InvalidArgument("BatchView: the batch has no tables for KV cache group " + std::to_string(g) +
                            " (it carries " + std::to_string(group_slot_mapping.size() + 1) + ")");
    }
    BatchView v = *this;
    v.slot_mapping = group_slot_mapping[static_cast<size_t>(g - 1)];
    v.block_tables = group_block_tables[static_cast<size_t>(g - 1)];
    return v;
  }
};

/// What a device argmax finds in one logits row: enough to pick the greedy token, or to see
/// that Sampler::sample would reject the row (NaN/+inf, or every value -inf).
struct ArgmaxRow {
  int32_t index = 0;      ///< first position of the largest value (lio::argmax)
  int32_t n_invalid = 0;  ///< NaN or +inf values
  int32_t n_masked = 0;   ///< -inf values
};

/// The operators of the Llama forward pass on one device. Not thread-safe: one forward pass
/// at a time. Errors: InvalidArgument for a bad shape, UnsupportedError / CudaError (CUDA)
/// for device failures; a backend that throws mid-pass leaves no work in flight.
class Backend {
 public:
  virtual ~Backend() = default;

  /// The model's hyper-parameters.
  virtual const ModelConfig& config() const = 0;
  /// The device in words, e.g. "cpu (2 threads)" or "cuda:0 (NVIDIA H100 80GB HBM3, ...)".
  virtual std::string device_description() const = 0;
  /// Bytes of weights this backend holds (the tied head once).
  virtual int64_t weight_bytes() const = 0;
  /// Bytes of device memory free for a KV pool after weights and scratch, or -1 when the
  /// backend cannot tell (the CPU: the caller picks a budget).
  virtual int64_t free_memory_bytes() const { return -1; }

  /// Allocates a KV pool of `config` on this device. Throws InvalidArgument on a bad shape,
  /// std::bad_alloc / CudaError when memory runs out.
  virtual std::unique_ptr<KvPool> make_kv_pool(const KvPoolConfig& config) = 0;
  /// Sizes every per-step buffer for steps within `limits` now (start-up), so such steps
  /// allocate nothing and never synchronize to grow one. The default does nothing (the CPU's
  /// buffers are host vectors). Throws InvalidArgument for negative limits, CudaError when the
  /// device memory runs out.
  virtual void reserve(const StepLimits& limits);

  // ---- one forward pass --------------------------------------------------------------
  /// Copies `batch`'s index arrays to the device (the batch must outlive the pass).
  virtual BatchView upload(const ForwardBatch& batch) = 0;
  /// Activation buffer `id` with room for n_floats floats (contents undefined; kept until
  /// the same id is asked for again with more room).
  virtual float* scratch(Scratch id, int64_t n_floats) = 0;

  /// out (n, d_model) = rows token_ids of TokenEmbd, dequantized. Ids are checked beforehand
  /// (ForwardBatch::validate); an id of -1 gives a row of zeros (chapter 08: a token whose row
  /// another tensor-parallel rank's vocabulary shard holds).
  virtual void embedding(const int32_t* token_ids, int64_t n, float* out) = 0;
  /// out (n_rows, w) = RMSNorm(x) * weight `norm` row by row, w = norm_width(norm.kind): d_model
  /// for AttnNorm, FfnNorm, OutputNorm; head_dim for QNorm / KNorm (QK-norm: x is (n_tokens,
  /// n_heads, head_dim) and n_rows = n_tokens * n_heads). May alias. Zhang & Sennrich 2019, eq. 4.
  /// Throws InvalidArgument / InternalError for a kind that is not a norm or a model without it.
  virtual void rmsnorm(const float* x, WeightRef norm, float* out, int64_t n_rows) = 0;
  /// y (n_rows, len) += bias `bias` (BiasQ, BiasK or BiasV, len its length) on every row: the
  /// Q/K/V projection biases of qwen2 (llama.cpp's llm_build_qwen2: ggml_add after the matmul).
  /// Throws InternalError for a model without that bias.
  virtual void add_bias(float* y, WeightRef bias, int64_t n_rows) = 0;
  /// y (n_rows, w.rows) = x (n_rows, w.cols) W^T, or y += x W^T when `accumulate`.
  virtual void matmul(WeightRef w, const float* x, float* y, int64_t n_rows, bool accumulate) = 0;
  /// The matmuls of several weights that read the same x (n_rows, cols): Q, K and V of a layer,
  /// its gate and up. Same results as calling matmul(out.w, x, out.y, n_rows, false) for each
  /// out, which is what the default does (and what a ForwardingBackend that watches matmul
  /// sees); a backend may run them as one launch.
  virtual void matmul_many(std::span<const MatmulOut> outs, const float* x, int64_t n_rows);
  /// A layer's RMSNorm and the projections that read it (Q/K/V): xn (n_rows, d_model) =
  /// rmsnorm(x, norm), then matmul_many(outs, xn, n_rows). The default does exactly that; a
  /// backend may fuse them into one launch (CudaBackend with fused kernels on:
  /// cuda::rmsnorm_gemv_many), and then leaves xn unwritten — callers must not read xn afterwards.
  /// Throws as rmsnorm() and matmul_many().
  virtual void rmsnorm_matmul_many(const float* x, WeightRef norm, float* xn, std::span<const MatmulOut> outs,
                                   int64_t n_rows);
  /// The SwiGLU MLP's first half (Shazeer 2020, eq. 6): xn = rmsnorm(x, norm), gate (n_rows,
  /// d_ff) = xn W_gate^T, up = xn W_up^T, then gate = silu(gate) * up (d_ff: config().d_ff, this
  /// rank's features under tensor parallelism). The default runs rmsnorm, matmul_many and swiglu;
  /// a backend may fuse them (cuda::rmsnorm_gemv_swiglu) and leave xn and up unwritten. Throws as
  /// those ops.
  virtual void rmsnorm_swiglu(const float* x, WeightRef norm, float* xn, WeightRef w_gate, WeightRef w_up, float* gate,
                              float* up, int64_t n_rows);
  /// rope(q, positions, n_tokens, n_heads, theta) then rope(k, ..., n_kv_heads, theta): what the
  /// default does; a backend may rotate both in one launch (cuda::rope_qk), with the same results.
  virtual void rope_qk(float* q, float* k, const int32_t* positions, int64_t n_tokens, int64_t n_heads,
                       int64_t n_kv_heads, float theta);
  /// RoPE in place on x (n_tokens, n_heads, head_dim) at `positions` (n_tokens), base
  /// frequency `theta` (ModelConfig::layer_rope_theta: Gemma 3's windowed layers use another).
  virtual void rope(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads, float theta) = 0;
  /// Writes each row's K and V (n_tokens, kv_dim) into `layer` of the pool at the row's slot
  /// (batch.slot_mapping): vLLM's reshape_and_cache.
  virtual void kv_append(KvPool& pool, int64_t layer, const float* k, const float* v,
                         const BatchView& batch) = 0;
  /// Paged causal attention: out (n_tokens, n_heads, head_dim) for q (same shape); row i of
  /// sequence s at position p attends to positions 0 .. p of s through its block table.
  virtual void attention(KvPool& pool, int64_t layer, const float* q, float* out,
                         const BatchView& batch) = 0;
  /// MLA (chapter 02; DeepSeek-V2 sec. 2.1.3): RoPE in place on each head's RoPE query (the
  /// last qk_rope_head_dim values of each head in q (n_tokens, q_dim)) and on the shared key
  /// k_pe (the last qk_rope_head_dim values of each row of latent (n_tokens, kv_lora_rank +
  /// qk_rope_head_dim)), interleaved pairs at Weights::mla_rope_inv_freq. The default throws
  /// UnsupportedError (a backend without MLA kernels).
  virtual void mla_rope(float* q, float* latent, const int32_t* positions, int64_t n_tokens);
  /// MLA attention: writes each row's latent (c_kv then k_pe) to the pool at its slot, then
  /// out (n_tokens, n_heads * v_head_dim) = each query head's attention over its sequence's
  /// cached latents, by the naive path (K and V up-projected from the latents) or the absorbed
  /// one (attention in latent space), as config().mla_absorbed says. The default throws
  /// UnsupportedError.
  virtual void mla_attention(KvPool& pool, int64_t layer, const float* q, const float* latent, float* out,
                             const BatchView& batch);
  /// out = silu(gate) * up over n values; out may alias gate.
  virtual void swiglu(const float* gate, const float* up, float* out, int64_t n) = 0;
  /// GeGLU (Shazeer 2020, eq. 5, GELU in its tanh form as Gemma trains it): out = gelu_tanh(gate)
  /// * up over n values; out may alias gate. The default throws UnsupportedError (a backend
  /// without the kernel).
  virtual void geglu(const float* gate, const float* up, float* out, int64_t n);
  /// x += y over n values (a residual add the layer cannot fuse into a matmul: Gemma's
  /// post-norms). The default throws UnsupportedError (a backend without the kernel).
  virtual void add(float* x, const float* y, int64_t n);
  /// x *= factor over n values (granite's residual and logit scales). The default throws
  /// UnsupportedError (a backend without the kernel).
  virtual void scale(float* x, float factor, int64_t n);
  /// x = cap * tanh(x / cap) over n values, cap > 0 (Gemma 2's final logit soft-capping, sec. 2
  /// of its report; llama.cpp's llm_build_gemma2_iswa). The default throws UnsupportedError.
  virtual void softcap(float* x, float cap, int64_t n);
  /// out (n_rows, dim) = x[rows[i]] for i < n_rows; rows: device int32.
  virtual void gather_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t dim,
                           float* out) = 0;
  /// Copies n_floats device floats to `host` and waits for the pass to finish.
  virtual void to_host(const float* src, int64_t n_floats, float* host) = 0;

  /// Copies n_floats host floats into device memory `dst` (queued on the backend's stream; the
  /// host buffer may be reused on return). CPU: memcpy.
  virtual void from_host(const float* host, int64_t n_floats, float* dst);
  /// True when this backend's "device pointers" are host memory (the CPU).
  virtual bool host_memory() const { return true; }

  // ---- communication between ranks (chapter 08) ---------------------------------------------
  /// x (n floats, device memory) = the sum of x over `comm`'s ranks: the all-reduce after a
  /// row-parallel layer (Megatron-LM's g operator). When the communicator's memory differs from
  /// this backend's (MPI and a GPU), x goes through host memory. Throws as the communicator.
  virtual void all_reduce(Communicator& comm, float* x, int64_t n);
  /// out (comm.size() * n floats, device memory) = every rank's `in` (n floats), rank 0 first:
  /// the vocabulary-parallel LM head's logits. Throws as the communicator.
  virtual void all_gather(Communicator& comm, const float* in, float* out, int64_t n);
  /// Tensor parallelism with per-token int8 activations (chapter 03, Task 6): the input of a
  /// row-parallel matmul (W_o's, W_down's; chapter 08) is split over the ranks, yet its token
  /// scale max|x| / 127 must be the whole row's, as in one process, or each rank rounds its
  /// shard on another grid (issue 62: TP 3's logits sat a mean 0.80 from one process's, where
  /// int8 block activations sit 0.16). `row_max` replaces n per-row maxima (host floats) by their
  /// maximum over the tensor-parallel group; an empty function (the default) means one rank.
  /// The CPU backend keeps it; a backend without per-token activations ignores it; the CUDA
  /// backend throws UnsupportedError when its activations are per token (it has no exchange).
  virtual void set_row_parallel_max(std::function<void(float* row_max, int64_t n)> row_max) { (void)row_max; }

  /// True when greedy_argmax() runs on this device (worth it where copying the logits row
  /// back costs more than the argmax: a GPU).
  virtual bool has_device_argmax() const { return false; }
  /// Greedy sampling on the device for the rows `rows` of logits (n_logits, vocab): applies
  /// the repetition penalty `penalties[i]` to the distinct ids `penalty_tokens[i]` of row i
  /// (lio::repeat_penalty_logit; modifies the logits), then argmax; waits and returns one
  /// ArgmaxRow per entry of `rows`. Throws UnsupportedError unless has_device_argmax().
  virtual std::vector<ArgmaxRow> greedy_argmax(float* logits, std::span<const int32_t> rows,
                                               const std::vector<std::vector<int32_t>>& penalty_tokens,
                                               std::span<const float> penalties);

  // ---- decode CUDA graphs (issue 45; CUDA Programming Guide, "CUDA Graphs") -----------------
  /// Turns the fused decode kernels on or off (issue 45: RMSNorm + Q/K/V, RMSNorm + gate/up +
  /// SwiGLU, RoPE of Q and K, each one launch for a decode row; rmsnorm_matmul_many and friends).
  /// Returns whether this backend has them (the CUDA backend; the CPU's ops are not launches).
  /// Off by default until a GPU check has compared them with the unfused ops (--fused-kernels).
  virtual bool set_fused_kernels(bool on) {
    (void)on;
    return false;
  }

  /// True when capture_graph() and replay_graph() work for this model: the CUDA backend, except
  /// where a launch's shape depends on the sequence lengths (MLA's naive path, the naive attention
  /// kernel). The CPU has none: its ops are function calls, there is no launch to save.
  virtual bool supports_graphs() const { return false; }
  /// Captures what `forward` queues on the device — one forward pass (Model::forward_device),
  /// which returns its device logits — into an executable graph kept under `key` (one of that key
  /// is replaced); nothing runs. Call it after reserve(): the pass must allocate nothing. Throws
  /// UnsupportedError unless supports_graphs(), InvalidArgument if a per-step buffer grew during
  /// the capture or profiling is on, CudaError when the pass cannot be captured (it synchronized),
  /// and what `forward` throws.
  virtual void capture_graph(int64_t key, const std::function<float*()>& forward);
  /// Replays graph `key` for `batch`: its index arrays go to the buffers the capture's upload()
  /// read, then the whole pass is one launch. `batch` must have the array shapes of the batch the
  /// graph was captured with (graph_decode_batch of the same bucket and width). Returns the
  /// device logits (batch.n_logits(), vocab_size), or nullptr — and queues nothing — when there is
  /// no such graph, the shapes differ, or a per-step buffer has moved since the capture: the
  /// caller then runs the pass eagerly. The base has no graphs (nullptr).
  virtual float* replay_graph(int64_t key, const ForwardBatch& batch);
  /// Frees every captured graph (their device memory with them). The base has none.
  virtual void clear_graphs() {}
  /// Frees graph `key` alone (none under that key: nothing happens). The base has none.
  virtual void drop_graph(int64_t key) { (void)key; }
};

}  // namespace lio
