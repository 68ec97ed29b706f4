// model_runner.h — one model on one device with its KV pool: what the Engine drives.
//
// vLLM's ModelRunner owns the model on its device, the KV cache and the input buffers, and
// executes one scheduled batch per step; ours does the same. The device is a Backend
// (CpuBackend, cuda::CudaBackend); the forward pass (Model) is the same code for both.
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
#include "lio/model.h"
#include "lio/model_loader.h"
#include "lio/parallel.h"
#include "lio/sampler.h"

namespace lio {

/// Where the forward pass runs.
enum class Device { Cpu, Cuda };

/// "cpu" or "cuda" (lio/cli_parse.h's parse_device reads the --device flag).
const char* device_name(Device device);

/// One logits row's sampling: the sequence's own sampler and its tokens so far (for the
/// penalties).
struct SampleRow {
  Sampler* sampler = nullptr;          ///< not owned
  std::span<const int32_t> history;    ///< prompt + generated tokens (repetition penalty)
  std::span<const int32_t> output;     ///< generated tokens (presence / frequency penalties)
};

/// What ModelRunner::capture_decode_graphs captured.
struct GraphCapture {
  std::vector<int64_t> sizes;  ///< buckets captured, ascending (empty: every pass runs eagerly)
  double seconds = 0;          ///< wall time of the warm-up passes, captures and instantiations
  /// Device memory the graphs took (free memory before minus after), bytes; -1 when the backend
  /// cannot tell.
  int64_t device_bytes = -1;
  /// What the graphs could take (bytes, measured at capture): kGpuMemoryUtilization of the free
  /// device memory when the runner was made, less what the KV pool and the per-step buffers took
  /// since; -1 when the backend cannot tell (no budget: the CPU captures nothing anyway).
  int64_t budget_bytes = -1;
  /// Why the capture stopped before the last bucket (the larger buckets then run eagerly), or
  /// empty.
  std::string error;
};

/// The share of the device memory free when a ModelRunner is made (after the weights) that its KV
/// pool, per-step buffers and decode CUDA graphs may take together: vLLM's default
/// gpu_memory_utilization (0.9). The default KV budget (default_kv_cache_mib) is 0.8 of that free
/// memory; the graphs are counted against what the pool and the step buffers leave (issue 60).
inline constexpr double kGpuMemoryUtilization = 0.9;

/// A backend, its KV pool and the forward pass. Not thread-safe (the Engine's thread uses it).
class ModelRunner {
 public:
  /// Takes `backend` and allocates a pool of `pool_config` on it. Throws as
  /// Backend::make_kv_pool.
  ModelRunner(std::unique_ptr<Backend> backend, const KvPoolConfig& pool_config);
  /// The driver (world rank 0) of a grid tells the other ranks to stop (see serve_worker).
  ~ModelRunner();
  /// Not copyable: it owns a device's weights and pool.
  ModelRunner(const ModelRunner&) = delete;
  /// Not copyable.
  ModelRunner& operator=(const ModelRunner&) = delete;

  // ---- chapter 08: one rank of a tensor x pipeline parallel grid ----------------------------
  /// Makes this runner one rank of `parallel`'s grid (taken; the backend must hold the shard
  /// parallel->plan describes). vLLM's driver and workers: on the driver (world rank 0) every
  /// forward(), copy_blocks(), swap_out() and swap_in() is first broadcast to the other ranks,
  /// which run the same call on their shard from serve_worker(). Throws InvalidArgument if
  /// called twice.
  void set_parallel(std::unique_ptr<ParallelContext> parallel);
  /// The grid this runner is a rank of, or null (one process).
  const ParallelContext* parallel() const { return parallel_.get(); }
  /// The grid, to change its measurement settings (ParallelContext::split_wait; every rank must
  /// set the same), or null.
  ParallelContext* parallel() { return parallel_.get(); }
  /// True unless this runner is a non-driver rank of a grid.
  bool is_driver() const { return !parallel_ || parallel_->driver(); }
  /// A worker rank's loop: receives the driver's commands and runs them, until the driver's
  /// runner is destroyed (or stop_workers() is called). Throws InvalidArgument on the driver,
  /// CommError when the driver's messages make no sense, and what the commands throw (the caller
  /// then ends the job: abort_world).
  void serve_worker();
  /// Driver: tells the workers to return from serve_worker(); idempotent. The destructor calls it.
  void stop_workers();

  /// The model's hyper-parameters (the whole model's, also on one rank of a grid).
  const ModelConfig& config() const { return model_.config(); }
  /// The device in words.
  std::string device_description() const { return backend_->device_description(); }
  /// The backend (for its op timings or weight bytes).
  Backend& backend() { return *backend_; }
  /// The KV pool.
  KvPool& kv_pool() { return *pool_; }
  /// The forward pass (to queue a step without waiting for its logits: CudaBackend::capture_step).
  Model& model() { return model_; }

  /// Sizes the backend's per-step buffers for steps within `limits` (Backend::reserve), once at
  /// start-up: the Engine calls it with its scheduler's limits. Throws as Backend::reserve.
  void reserve(const StepLimits& limits);

  // ---- decode CUDA graphs (issue 45; vLLM's CUDAGraphRunner and cudagraph_capture_sizes) ----
  /// After reserve(): captures the decode forward pass once per bucket of
  /// graph_capture_sizes(max_num_seqs) (capped at the reserved limits), each bucket first run
  /// once eagerly on padding rows (it loads the kernels and sets cuBLAS up outside the capture;
  /// the rows write no K/V). From then on forward() and forward_sample() run a plain decode batch
  /// (is_graph_decode_batch) of up to the largest bucket as one graph launch, padded to its bucket
  /// and block tables reserve()'s width (graph_decode_batch); prefill, mixed, speculative and
  /// larger batches run eagerly, as does every batch after a per-step buffer grew. Replaces the
  /// graphs captured before. Captures nothing (empty sizes) when the backend has no graphs
  /// (Backend::supports_graphs: the CPU, MLA, the naive attention kernel), on a rank of a
  /// parallel grid, or before reserve(). A bucket whose capture throws ends the capture (its
  /// error is in the result; the buckets before it stay). Graph memory is counted: each bucket's
  /// bytes are measured (free device memory before and after), and a bucket is not captured when
  /// the last bucket's bytes would carry the total past `max_graph_bytes`, nor kept when it did
  /// (the result's error says so) — -1 (the default) means the budget GraphCapture::budget_bytes
  /// describes. Throws InvalidArgument if max_num_seqs < 1.
  GraphCapture capture_decode_graphs(int64_t max_num_seqs, int64_t max_graph_bytes = -1);
  /// Frees the graphs: every pass runs eagerly again (vLLM's --enforce-eager).
  void clear_decode_graphs();
  /// The captured buckets, ascending (empty: eager).
  const std::vector<int64_t>& graph_sizes() const { return graph_sizes_; }
  /// Forward passes run as a graph launch since construction.
  int64_t graph_steps() const { return graph_steps_; }
  /// Forward passes run eagerly (one launch per kernel) since construction.
  int64_t eager_steps() const { return eager_steps_; }

  /// Carries out copy-on-write copies (BlockManager::append_slots) before the next forward
  /// pass, in order. Throws InvalidArgument on an id outside the pool.
  void copy_blocks(std::span<const BlockCopy> copies);
  /// Slot copies, in order (src and dst are KV-pool slots, not blocks): chapter 06's tree
  /// verification moves the accepted drafts' K/V to their positions' slots (KvPool::copy_slot),
  /// before the next forward pass. Throws InvalidArgument on a slot outside the pool.
  void copy_slots(std::span<const BlockCopy> copies);
  /// Swap-outs: block src's K/V to host block dst of `host` ((n_host_blocks, block_floats)
  /// floats; KvPool::block_floats). Throws InvalidArgument on a device id outside the pool.
  void swap_out(std::span<const BlockCopy> copies, float* host);
  /// Swap-ins: host block src of `host` into device block dst.
  void swap_in(std::span<const BlockCopy> copies, const float* host);

  /// Runs `batch` and returns its logits on the host: (n_logits, vocab_size) row-major,
  /// valid until the next call. Throws as Model::forward_device.
  std::span<const float> forward(const ForwardBatch& batch);

  /// Runs `batch` and samples one token per logits row: out[i] =
  /// rows[i].sampler->sample(logits row i, rows[i].history, rows[i].output) — always that
  /// answer. Greedy rows without presence / frequency penalties, logprobs or a token mask run the
  /// repetition penalty + argmax on the device when the backend can (a GPU copies back 12 bytes per
  /// row instead of vocab_size floats); a row the sampler would reject is then copied back and
  /// handed to it, so the error is the CPU path's. Throws InvalidArgument if rows.size() !=
  /// batch.n_logits(), or as forward() and Sampler::sample.
  std::vector<int32_t> forward_sample(const ForwardBatch& batch, std::span<const SampleRow> rows);

  /// The final hidden states of the last forward() / forward_sample(), on the host: each logits
  /// row's residual stream after the output norm, before the LM head, (n_logits, d_model)
  /// row-major (logits = hidden . W_out^T, before granite's scale or a soft-cap); valid until the
  /// next forward. Empty unless that batch set return_hidden. Medusa's heads and EAGLE's drafter
  /// read them (issue 63). Over tensor parallelism the driver's copy (every rank holds them
  /// whole); a return_hidden batch under pipeline parallelism throws UnsupportedError (the driver
  /// is not the last stage).
  std::span<const float> hidden_states() const { return hidden_; }

  /// The token embedding rows of `ids` on the host, unscaled (gemma3's sqrt(d_model) factor
  /// divided out): out (ids.size(), d_model) row-major. What EAGLE's drafter reads beside the
  /// hidden states (issue 63). Runs between forward passes (it uses the backend's Scratch::X).
  /// Throws InvalidArgument for an id outside the vocabulary, UnsupportedError on a grid of more
  /// than one process (the embedding is split over the ranks).
  void embed_rows(std::span<const int32_t> ids, float* out);

 private:
  /// Throws UnsupportedError when `batch` asks for hidden states under pipeline parallelism.
  void check_hidden_request(const ForwardBatch& batch) const;
  /// Copies the last pass's hidden states to hidden_ when `batch` asked for them, else clears it.
  void keep_hidden(const ForwardBatch& batch);
  /// Driver: sends command `cmd` with `payload` to the workers (no-op without a grid).
  void broadcast_command(int32_t cmd, const std::vector<int32_t>& payload);
  /// The forward pass on the device: a graph replay when `batch` fits a captured bucket, else
  /// Model::forward_device. Returns the device logits (batch.n_logits(), vocab_size) first.
  float* forward_device(const ForwardBatch& batch);
  std::unique_ptr<ParallelContext> parallel_;  ///< chapter 08's grid, or null (first: owns the shard the backend reads)
  std::unique_ptr<Backend> backend_;
  int64_t free_at_load_ = -1;  ///< the backend's free device memory before the pool (-1: cannot tell)
  std::unique_ptr<KvPool> pool_;
  Model model_;
  std::vector<float> logits_;  ///< (n_logits, vocab_size) host copy
  std::vector<float> hidden_;  ///< (n_logits, d_model) host copy when the batch set return_hidden
  std::vector<float> worker_swap_;  ///< a worker's host blocks for swap preemption
  bool workers_stopped_ = false;
  StepLimits limits_;                 ///< the last reserve()'s (graph buckets and block-table width)
  std::vector<int64_t> graph_sizes_;  ///< captured decode buckets, ascending
  int64_t graph_steps_ = 0;
  int64_t eager_steps_ = 0;
};

/// One sequence run straight on a runner, without an Engine: it owns blocks 0 .. of the
/// runner's pool in order (nothing else may use the pool meanwhile). Chapter 01's view of the
/// cache — one sequence, its blocks contiguous — and what `lio logits`, benchmarks and tests
/// use to feed a sequence chunk by chunk.
class SoloSequence {
 public:
  /// Reserves room for `capacity_tokens` positions. Throws InvalidArgument if capacity is
  /// outside [1, context_length] or the pool has fewer than ceil(capacity / block_size) blocks.
  SoloSequence(ModelRunner& runner, int64_t capacity_tokens);

  /// Runs `tokens` at positions n_tokens() .. + n - 1 and returns the host logits:
  /// (n, vocab_size) when all_logits, else (1, vocab_size) for the last token; valid until the
  /// next call. With `return_hidden` the logits rows' final hidden states are kept too
  /// (ModelRunner::hidden_states). Throws InvalidArgument if tokens is empty, an id is outside
  /// the vocabulary, or the chunk does not fit the capacity.
  std::span<const float> forward(std::span<const int32_t> tokens, bool all_logits = false, bool return_hidden = false);
  /// Runs `tokens` like forward() and samples the next token (ModelRunner::forward_sample).
  int32_t forward_sample(std::span<const int32_t> tokens, Sampler& sampler,
                         std::span<const int32_t> history);
  /// Positions filled so far.
  int64_t n_tokens() const { return n_tokens_; }
  /// Positions reserved.
  int64_t capacity_tokens() const { return capacity_; }
  /// Forgets every position (the next forward starts at 0).
  void clear() { n_tokens_ = 0; }

 private:
  ForwardBatch batch(std::span<const int32_t> tokens, bool all_logits) const;
  ModelRunner& runner_;
  int64_t capacity_;
  int64_t n_tokens_ = 0;
  /// One block table per KV cache group of the pool: group g holds blocks [g * n, (g + 1) * n).
  std::vector<std::vector<int32_t>> block_tables_;
};

/// Where the KV pool's size comes from.
struct KvPoolOptions {
  int64_t block_size = 16;    ///< tokens per block (--block-size)
  int64_t kv_cache_mib = 0;   ///< pool budget in MiB (--kv-cache-mib); 0 = default_kv_cache_mib
  KvCacheDType dtype = KvCacheDType::F32;  ///< element type (--kv-cache-dtype)
  /// KV cache groups for a model with both full and sliding-window layers (KvPoolConfig::hybrid).
  /// The Engine's commands turn it on (off again with --disable-hybrid-kv-cache-manager, vLLM's
  /// flag); code that builds its own block tables keeps one group. The parallel runners keep the
  /// groups: every rank's pool has the whole model's groups restricted to its layers.
  bool hybrid = false;
};

/// The default KV budget in MiB: on the CPU a quarter of physical memory, at most 1024 MiB;
/// on a GPU 80% of the memory free after the weights. At least one block's worth.
int64_t default_kv_cache_mib(const Backend& backend);

/// "flash", "naive" or "paged" (lio/cli_parse.h's parse_attention_backend reads
/// --attention-backend).
const char* attention_backend_name(AttentionBackend backend);

/// The backend for `device` over `model` (which must outlive it), running `attention`'s kernels
/// (chapter 07). Device::Cuda uploads the weights to GPU `cuda_device` (chapter 08's ranks: their
/// local rank's, cuda_device_for_rank). Throws UnsupportedError when this build has no CUDA
/// support or no usable GPU is present (the message says which), CudaError on a device failure.
std::unique_ptr<Backend> make_backend(const LoadedModel& model, Device device,
                                      ActivationPrecision activations = ActivationPrecision::F32,
                                      AttentionBackend attention = AttentionBackend::Flash, int cuda_device = 0);

/// make_backend() plus a KV pool sized by `pool` (budget / block bytes, rounded down). Throws
/// InvalidArgument if block_size < 1, kv_cache_mib < 0 or the budget holds no block, and as
/// make_backend().
std::unique_ptr<ModelRunner> make_runner(const LoadedModel& model, Device device,
                                         const KvPoolOptions& pool = {},
                                         ActivationPrecision activations = ActivationPrecision::F32);

/// Chapter 08: the runner of this process's rank in a tensor x pipeline parallel grid over
/// world_communicator(algorithm): the rank's plan (make_rank_plan), its shard of `model`
/// (shard_model; `model` must outlive the runner only until this returns — the shard is owned by
/// the runner), a backend on it (wrapped by `wrap` when given), a KV pool of as many blocks on
/// every rank (the budget pool.kv_cache_mib per rank, the smallest rank's block count; each
/// rank's blocks hold only its KV heads and layers) and the ParallelContext (ModelRunner::
/// set_parallel). With a grid of one rank it is make_runner(). Collective: every rank of the job
/// must call it. Throws CommError when the job's rank count differs from tp x pp, and as
/// make_rank_plan / make_runner.
std::unique_ptr<ModelRunner> make_parallel_runner(
    const LoadedModel& model, const ParallelConfig& parallel, AllReduceAlgorithm algorithm, Device device,
    const KvPoolOptions& pool, ActivationPrecision activations, AttentionBackend attention,
    const std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)>& wrap = {});

/// make_parallel_runner() over `world` (taken) instead of the job's world: how tests run a grid
/// on part of the ranks (Communicator::split).
std::unique_ptr<ModelRunner> make_parallel_runner(
    const LoadedModel& model, const ParallelConfig& parallel, std::unique_ptr<Communicator> world, Device device,
    const KvPoolOptions& pool, ActivationPrecision activations, AttentionBackend attention,
    const std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)>& wrap = {});

/// Throws InvalidArgument if pool.block_size < 1 or pool.kv_cache_mib < 0 (the checks
/// make_runner() makes before it builds a backend).
void check_kv_pool_options(const KvPoolOptions& pool);

/// A runner over a backend the caller built (make_backend's, perhaps wrapped in a
/// ForwardingBackend that replaces one operator: ch01_kv_cache's contiguous attention), with a
/// KV pool sized as make_runner() sizes it. Throws as make_runner() for a bad pool.
std::unique_ptr<ModelRunner> make_runner(std::unique_ptr<Backend> backend,
                                         const KvPoolOptions& pool);

}  // namespace lio
