// parallel.h — one model over several ranks (chapter 08): which part of the model each rank of
// a tensor-parallel x pipeline-parallel grid holds, and the shard of the weights it loads.
//
// Tensor parallelism (Shoeybi et al. 2019, Megatron-LM sec. 3): in every layer W_q, W_k, W_v,
// W_gate and W_up are column-parallel (each rank computes whole heads / its slice of d_ff, no
// communication), W_o and W_down row-parallel (each rank a partial sum, then one all-reduce
// each: two per layer); the embedding and the LM head are vocabulary-parallel (vLLM's
// VocabParallelEmbedding: each rank holds vocab / tp rows; embedding rows of other ranks' tokens
// are zero before the all-reduce; the LM head's logits are all-gathered). KV heads are split with
// the query heads, replicated when tp exceeds them (vLLM's rule). Pipeline parallelism
// (Narayanan et al. 2021, PTD-P): contiguous layer ranges per stage; activations (n_tokens,
// d_model) go from stage to stage; TP inside a stage. World rank = pp_rank * tp + tp_rank, as
// vLLM lays out its groups.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lio/communicator.h"
#include "lio/forward_batch.h"
#include "lio/model_config.h"
#include "lio/model_loader.h"
#include "lio/tensor_parallel.h"

namespace lio {

class Backend;

/// The grid the flags ask for (--tensor-parallel-size, --pipeline-parallel-size).
struct ParallelConfig {
  int64_t tensor_parallel_size = 1;    ///< ranks one layer is split over
  int64_t pipeline_parallel_size = 1;  ///< stages the layers are split over
  /// Ranks the job needs: tp x pp.
  int64_t world_size() const { return tensor_parallel_size * pipeline_parallel_size; }
};

/// What one rank of the grid holds.
struct RankPlan {
  int64_t tp_rank = 0;        ///< place in the tensor-parallel group
  int64_t tp_size = 1;        ///< ranks in the tensor-parallel group
  int64_t pp_rank = 0;        ///< pipeline stage
  int64_t pp_size = 1;        ///< pipeline stages
  int64_t layer_begin = 0;    ///< first decoder layer of this stage
  int64_t layer_end = 0;      ///< one past the stage's last decoder layer
  int64_t head_begin = 0;     ///< first query head held
  int64_t head_end = 0;       ///< one past the last query head held
  int64_t kv_head_begin = 0;  ///< first KV head held (kv_heads_for_rank)
  int64_t kv_head_end = 0;    ///< one past the last KV head held
  int64_t ff_begin = 0;       ///< first MLP intermediate feature held
  int64_t ff_end = 0;         ///< one past the last MLP intermediate feature held
  int64_t vocab_begin = 0;  ///< first vocabulary row held; the shard has vocab_local rows
  int64_t vocab_local = 0;  ///< rows of the embedding / LM head shard: ceil(vocab / tp) (the last shard zero-padded)
  int64_t vocab_size = 0;   ///< the whole vocabulary

  /// World rank of (pp, tp): pp * tp_size + tp.
  int64_t world_rank_of(int64_t pp, int64_t tp) const { return pp * tp_size + tp; }
  /// This rank's world rank.
  int64_t world_rank() const { return world_rank_of(pp_rank, tp_rank); }
  /// True for the stage that embeds the tokens.
  bool first_stage() const { return pp_rank == 0; }
  /// True for the stage that computes the logits.
  bool last_stage() const { return pp_rank == pp_size - 1; }
};

/// The tensor-parallel sizes `config` splits into (query heads, KV heads by split or replication,
/// d_ff, the quantization block of the row-parallel W_o / W_down columns of `weights`), ascending.
std::vector<int64_t> valid_tensor_parallel_sizes(const ModelConfig& config, const Weights& weights);

/// The plan of world rank `world_rank` under `parallel`, with chapter 08's Task 1 (shard_linear,
/// kv_heads_for_rank) for every split. Throws InvalidArgument when a size is < 1, pp exceeds the
/// layers, tp does not split the model (one message naming the sizes that do:
/// valid_tensor_parallel_sizes), or world_rank is outside the grid; UnsupportedError for an MLA
/// model with tp > 1.
RankPlan make_rank_plan(const ModelConfig& config, const Weights& weights, const ParallelConfig& parallel,
                        int64_t world_rank);

/// The weights and config rank `plan` runs: config with n_layers, n_heads, n_kv_heads, d_ff and
/// vocab_size of the shard (vocab_size = plan.vocab_local), weights copied out of `full` into owned
/// buffers (rows for column-parallel, columns for row-parallel; the norms whole); the tokenizer
/// is not copied (rank 0 keeps the full model's). What a rank holds is what the backend built on
/// it reports (Backend::weight_bytes): measured, not computed. Throws as make_rank_plan.
LoadedModel shard_model(const LoadedModel& full, const RankPlan& plan);

/// Time and bytes one kind of communication took on this rank (wall clock around the calls,
/// so the time includes waiting for the slowest rank to arrive: communication plus imbalance).
struct CommStats {
  int64_t calls = 0;     ///< calls made
  int64_t bytes = 0;     ///< bytes of the messages (the buffer each call reduces / gathers / sends)
  double seconds = 0;    ///< wall-clock seconds inside the calls

  /// Adds one call of `n_bytes` that took `s` seconds.
  void add(int64_t n_bytes, double s) { ++calls, bytes += n_bytes, seconds += s; }
};

/// What a Model needs to run as one rank of a grid: the plan, the full model's config (the
/// vocabulary the batch is checked against, the logits' width), and the communicators.
struct ParallelContext {
  RankPlan plan;                       ///< this rank's part
  ModelConfig full_config;             ///< the unsharded model's config
  std::unique_ptr<LoadedModel> shard;  ///< this rank's weights (shard_model), when the context owns them
  std::unique_ptr<Communicator> world; ///< every rank
  std::unique_ptr<Communicator> tp;    ///< this stage's tensor-parallel group (split of world by pp_rank)
  CommStats all_reduce;  ///< the row-parallel layers' and the embedding's all-reduces
  CommStats all_gather;  ///< the LM head's logits gathers
  CommStats send_recv;   ///< pipeline sends and receives (activations, logits to the driver)
  /// Measurement mode (ch08_tensor_parallel): a barrier before each tensor-parallel collective, timed
  /// apart as `wait`, so the collectives' times hold the communication alone and `wait` the ranks'
  /// imbalance (on an oversubscribed machine: the scheduler). Off in serving (a barrier costs a
  /// round trip).
  bool split_wait = false;
  CommStats wait;        ///< barrier time before the collectives when split_wait
  /// Pipeline parallelism: micro-batches one step's batch is cut into (by sequence; at most one
  /// per sequence), sent through the stages one after another so that stage s works on
  /// micro-batch j + 1 while stage s + 1 works on j (GPipe's schedule within a step; Huang et al.
  /// 2019). 0 = auto: as many as stages when the step has at least 64 rows per stage (prefill
  /// chunks, where each stage's matmuls are compute-bound), else 1 — a decode step's matmuls are
  /// bound by reading the weights, and two micro-batches read them twice (measured in
  /// bench/results/08_tensor_parallel_cpu.md: pp2 vs pp2_mb1).
  int64_t micro_batches = 0;

  /// True on the driver: world rank 0 (the scheduler, the tokenizer, the server).
  bool driver() const { return plan.world_rank() == 0; }

  // ---- the frame around a forward pass's layers (Model::forward_device): each exchange timed
  // into the CommStats above, so the layer loop holds no communication code.
  /// Pipeline: x (n_floats, the backend's memory) = the residual stream the stage before sent
  /// (same tensor-parallel rank). Throws as Communicator::send_recv.
  void receive_from_previous_stage(Backend& be, float* x, int64_t n_floats);
  /// Pipeline: sends x (n_floats, the backend's memory) to the next stage. Throws as send_recv.
  void send_to_next_stage(Backend& be, const float* x, int64_t n_floats);
  /// x (n_floats, the backend's memory) = its sum over the tensor-parallel group
  /// (Backend::all_reduce; Megatron-LM's g operator), timed into `all_reduce` (and `wait`).
  void tp_all_reduce(Backend& be, float* x, int64_t n_floats);
  /// out (tp_size * n_floats) = every TP rank's `in` (n_floats), rank 0 first (the
  /// vocabulary-parallel LM head), timed into `all_gather` (and `wait`).
  void tp_all_gather(Backend& be, const float* in, float* out, int64_t n_floats);
  /// The group the decoder layers sum through (chapter 08, Task 5a): this rank, the group's size
  /// and tp_all_reduce on `be`. Size 1 (no all_reduce) without tensor parallelism.
  TpGroup tp_group(Backend& be);

 private:
  /// Measurement mode (split_wait): waits for this rank's queued work (`buf`: any device
  /// pointer of it), then for the group, timed into `wait`.
  void wait_for_group(Backend& be, const float* buf);
  std::vector<float> staging_;  ///< host buffer of the pipeline's sends and receives
};

/// Throws CommError, saying how to start the job, when a job of `world_size` ranks cannot hold
/// `parallel`'s grid (world_size != tp x pp).
void check_world_size(int world_size, const ParallelConfig& parallel);

/// Builds the context for `plan` over `world` (taken): splits the TP group (color pp_rank, key
/// tp_rank). Every rank must call it (MPI_Comm_split is collective). With --all-reduce nccl the TP
/// group's collectives run on GPU `cuda_device` (this rank's: cuda_device_for_rank). Throws
/// CommError when world->size() != plan.tp_size * plan.pp_size, or as make_nccl_communicator.
std::unique_ptr<ParallelContext> make_parallel_context(const RankPlan& plan, const ModelConfig& full_config,
                                                       std::unique_ptr<Communicator> world, int cuda_device = 0);

/// The GPU a rank runs on: its rank among the job's ranks on this host (`local_rank` of
/// `local_size`: lio::local_rank()) over the `n_devices` GPUs this process sees. One rank per GPU
/// when there are enough (device = local_rank); more ranks than GPUs share them round-robin
/// (local_rank mod n_devices), which MPI's host-memory collectives allow but NCCL does not (it
/// refuses two ranks of one communicator on one GPU), so with `nccl` that is an error. A rank
/// narrows its GPUs with CUDA_VISIBLE_DEVICES as usual (n_devices counts the visible ones).
/// Throws UnsupportedError when n_devices < 1 or (nccl) local_size > n_devices, InvalidArgument
/// when local_rank is outside [0, local_size).
int cuda_device_for_rank(int local_rank, int local_size, int n_devices, bool nccl);

/// `batch` cut into at most `n` micro-batches of whole sequences, contiguous and in order, with
/// about as many rows each (rows, slots, block tables, draft trees and logits rows re-based; their
/// logits rows concatenated are the batch's). Fewer when the batch has fewer sequences. Throws InvalidArgument
/// if n < 1.
std::vector<ForwardBatch> split_micro_batches(const ForwardBatch& batch, int64_t n);

/// Seconds since an arbitrary epoch (steady clock), for CommStats.
double comm_clock_seconds();

}  // namespace lio
