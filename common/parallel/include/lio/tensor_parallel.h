// tensor_parallel.h — chapter 08's exercise points: how a Llama layer is split over ranks
// (Megatron-LM's column- and row-parallel linear layers), the ring all-reduce that sums the
// row-parallel halves back together, and the two numbers a deployment is planned with: the
// memory each rank holds and the bytes each layer sends; and (Task 5) the Megatron-LM forward
// on one rank: every point where the ranks meet, which the engine's tensor-parallel path runs.
//
// Sources: Shoeybi et al. 2019, "Megatron-LM", sec. 3 (Figure 3: the MLP's A column-split, B
// row-split, one all-reduce g after B; self-attention split by heads, one all-reduce after the
// output projection); vLLM's `vllm/model_executor/layers/linear.py` (ColumnParallelLinear,
// RowParallelLinear, QKVParallelLinear's KV-head replication when tp_size > num_kv_heads);
// Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms for clusters of workstations"
// (the ring: a reduce-scatter then an all-gather); nccl-tests' doc/PERFORMANCE.md (bus
// bandwidth); Megatron-LM's VocabParallelEmbedding and vLLM's ParallelLMHead (Task 5). The
// lesson derives what each task computes; the doc comments below state only the contracts.
//
// Definitions: exercises/08_tensor_parallel/tensor_parallel.cpp (the learner's) and
// solutions/08_tensor_parallel/tensor_parallel.cpp; lesson docs/08_tensor_parallel.md.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "lio/communicator.h"

namespace lio {

/// How a linear layer y = x W^T with W (rows = out_features, cols = in_features) is split.
enum class ParallelStyle {
  Column,  ///< split W's rows (output features): each rank computes its slice of y, no communication
  Row,     ///< split W's columns (input features): each rank computes a partial y, summed by all-reduce
};

/// The block of W (row-major (rows, cols)) one rank holds: rows [row_begin, row_end) and
/// columns [col_begin, col_end).
struct ShardSlice {
  int64_t row_begin = 0;  ///< first output feature held
  int64_t row_end = 0;    ///< one past the last output feature held
  int64_t col_begin = 0;  ///< first input feature held
  int64_t col_end = 0;    ///< one past the last input feature held

  /// Rows held.
  int64_t n_rows() const { return row_end - row_begin; }
  /// Columns held.
  int64_t n_cols() const { return col_end - col_begin; }
  /// Same four bounds.
  bool operator==(const ShardSlice&) const = default;
};

/// Task 1a: the slice of W (rows, cols) that rank `rank` of `tp_size` holds under `style`:
/// the split dimension (rows for Column, cols for Row) cut into tp_size equal contiguous
/// pieces, rank r taking piece r; the other dimension whole. Every piece must be a whole
/// number of `unit`s (head_dim for a split by heads: Q/K/V rows, o_proj columns; 1 for the MLP;
/// the quantization block for a row split of block-quantized weights).
/// Throws InvalidArgument if rows, cols or unit < 1, tp_size < 1, rank outside [0, tp_size),
/// or the split dimension is not a multiple of tp_size * unit (the message names it).
ShardSlice shard_linear(int64_t rows, int64_t cols, ParallelStyle style, int64_t unit, int64_t tp_size,
                        int64_t rank);

/// The KV heads one rank holds: [begin, end).
struct KvHeadRange {
  int64_t begin = 0;  ///< first KV head
  int64_t end = 0;    ///< one past the last KV head
  /// Same bounds.
  bool operator==(const KvHeadRange&) const = default;
};

/// Task 1b: which KV heads rank `rank` of `tp_size` holds, as vLLM's QKVParallelLinear decides
/// (docs/08_tensor_parallel.md, section 3 and "Task 1"). tp_size <= n_kv_heads: n_kv_heads /
/// tp_size heads each, contiguous, in rank order (n_kv_heads % tp_size == 0). tp_size >
/// n_kv_heads: one head each, replicated on tp_size / n_kv_heads consecutive ranks (tp_size %
/// n_kv_heads == 0), and always the KV head the rank's own query heads read (Task 1a's split of
/// the query heads). Example: 2 KV heads at TP 4: ranks 0 and 1 hold head 0, ranks 2 and 3 head 1.
/// Throws InvalidArgument if n_kv_heads or tp_size < 1, rank outside [0, tp_size), or tp_size
/// neither divides nor is a multiple of n_kv_heads.
KvHeadRange kv_heads_for_rank(int64_t n_kv_heads, int64_t tp_size, int64_t rank);

/// Task 2: ring all-reduce (Patarasuk & Yuan 2009) over `comm`'s send_recv only, each rank
/// talking to its two ring neighbours: on return, data (n floats) on every rank = the
/// element-wise sum over all ranks, with the same bits on every rank, and each rank has sent
/// the bandwidth-optimal share of the data (docs/08_tensor_parallel.md, "Task 2", derives the
/// steps and the share). World size 1 or n == 0: data unchanged. Throws InvalidArgument if
/// n < 0, as send_recv otherwise.
void ring_all_reduce(float* data, int64_t n, Communicator& comm);

/// One rank's memory under tensor parallelism (decimal units: bytes).
struct RankMemory {
  double weight_bytes = 0;         ///< weights held by one rank
  double kv_bytes_per_token = 0;   ///< KV cache bytes one token costs on one rank, all layers
  double kv_budget_bytes = 0;      ///< what is left for the KV cache: usable memory - weights (< 0: does not fit)
  int64_t max_kv_tokens = 0;       ///< floor(kv_budget_bytes / kv_bytes_per_token), 0 when nothing fits
};

/// What a model and a card are (inputs of Task 3).
struct TpMemoryInputs {
  double n_params = 0;              ///< parameters of the model
  double bits_per_weight = 16;      ///< storage bits per weight, scales included (AWQ 4-bit g128: 4.25)
  int64_t n_layers = 0;             ///< decoder layers
  int64_t n_kv_heads = 0;           ///< KV heads of the model (before sharding)
  int64_t head_dim = 0;             ///< dimension of one head
  double kv_bytes_per_element = 2;  ///< bytes of one cached K or V element (fp16: 2)
  double gpu_bytes = 0;             ///< memory of one card (bytes; "40 GB" = 40e9)
  double memory_utilization = 0.9;  ///< vLLM's gpu_memory_utilization: the share LIO may use
  int64_t tp_size = 1;              ///< ranks the model is split over
};

/// Task 3: one rank's share of the weights, the KV-cache bytes one token costs it (the KV heads
/// it holds are kv_heads_for_rank's), the memory left for the KV cache out of the share of the
/// card LIO may use, and the tokens that fit there (docs/08_tensor_parallel.md, "Task 3").
/// Lecture note 000's deployment: Llama 3.1 70B in AWQ does not fit one A100 40 GB and fits two
/// with TP 2. Throws InvalidArgument for a non-positive count or size, utilization outside
/// (0, 1], or as kv_heads_for_rank.
RankMemory tp_rank_memory(const TpMemoryInputs& in);

/// What one decoder layer sends for `n_tokens` tokens under tensor parallelism (bytes).
struct LayerCommVolume {
  int64_t all_reduce_bytes = 0;    ///< bytes of the messages one layer all-reduces in the forward pass
  double bytes_sent_per_rank = 0;  ///< bytes a ring all-reduce (Task 2) sends per rank for them (0 at tp 1)
};

/// Task 4: the communication volume of one layer for n_tokens tokens of width d_model at
/// bytes_per_element, over tp_size ranks (Megatron-LM sec. 3 says where a layer all-reduces;
/// Patarasuk & Yuan what a ring sends; docs/08_tensor_parallel.md, "Task 4"). SmolLM2-135M
/// (d_model 576), f32, one token: 4,608 bytes all-reduced. Throws InvalidArgument if
/// n_tokens < 0, or d_model, bytes_per_element or tp_size < 1.
LayerCommVolume layer_comm_volume(int64_t n_tokens, int64_t d_model, int64_t bytes_per_element, int64_t tp_size);

// ---- Task 5: the Megatron-LM forward on one rank ----------------------------------------------
// With Task 1's shards loaded, a column-parallel layer (Q/K/V, gate/up, the LM head) needs no
// communication in the forward pass: the rank multiplies by the rows it holds (Megatron-LM's f
// operator is the identity going forward). The ranks meet only where a result is a SUM of their
// pieces or is spread over them. Task 5 is every such point of the engine's forward pass: the
// row-parallel layers (o_proj and down) of qwen2, qwen3 and gemma3 (common/model/src/arch/;
// a llama rank runs Task 6's whole layer, lio/tp_decoder_layer.h), the vocabulary-parallel
// embedding's ids and the vocabulary-parallel LM head's gathered logits
// (common/model/src/model.cpp). The engine calls these only when tensor_parallel_size > 1.

/// This rank's tensor-parallel group as a layer sees it.
struct TpGroup {
  int64_t rank = 0;  ///< this rank, 0 .. size - 1
  int64_t size = 1;  ///< ranks in the group (1: no tensor parallelism)
  /// Replaces buf (count floats, in the memory the backend computes in: host or device) with
  /// its element-wise sum over the group's ranks. A collective: every rank calls it the same
  /// number of times with the same count, or the job hangs. Empty when size == 1.
  std::function<void(float* buf, int64_t count)> all_reduce;
};

/// This rank's part of a row-parallel linear layer y = h W^T, h (n_tokens, in_features) and
/// W (d_out, in_features): with h_r this rank's slice of h's features and W_r the matching
/// columns of W (Task 1's ParallelStyle::Row shard), writes (accumulate = false) or adds
/// (accumulate = true) h_r W_r^T, (n_tokens, d_out), into `out`. The caller supplies it (the
/// model's backend matmul); it may be called at most once per row_parallel_linear.
using PartialProduct = std::function<void(float* out, bool accumulate)>;

/// Task 5a: a row-parallel linear layer on this rank (Megatron-LM sec. 3, Figure 3: the g
/// operator after W_o and after W_down). On return, on every rank of `group`,
///   out = out_before + sum over ranks r of h_r W_r^T   when add_to_out (the residual add),
///   out = sum over ranks r of h_r W_r^T               otherwise,
/// where out_before (count floats) is the same on every rank (the replicated residual stream)
/// and each rank's partial comes from its own `partial`. count = n_tokens * d_out. The residual
/// must be counted once in the sum, not group.size times. Group size 1: out = [out +] h W^T.
/// Throws InvalidArgument if count < 0, group.size < 1, group.rank outside [0, size), or
/// size > 1 without an all_reduce; passes on what partial and all_reduce throw.
void row_parallel_linear(const PartialProduct& partial, float* out, int64_t count, bool add_to_out,
                         const TpGroup& group);

/// Task 5b: the vocabulary-parallel embedding's lookup ids (Megatron-LM's
/// VocabParallelEmbedding; vLLM's vocab_parallel_embedding.py). The rank holds embedding rows
/// [vocab_begin, vocab_begin + vocab_local) of the table as its rows 0 .. vocab_local - 1.
/// Rewrites each id in place: an id inside the rank's range becomes its local row; any other id
/// becomes -1, which the backend's embedding turns into a zero row. The engine then all-reduces
/// the (n_tokens, d_model) rows: each token's row comes from the one rank that holds it.
/// Throws InvalidArgument if vocab_begin < 0 or vocab_local < 1 (ids themselves are checked
/// against the vocabulary before this is called).
void localize_vocab_ids(std::span<int32_t> ids, int64_t vocab_begin, int64_t vocab_local);

/// Task 5c: the vocabulary-parallel LM head's logits put back in vocabulary order. `gathered`
/// holds what an all-gather of every rank's logits gives, shape (tp_size, n_rows, vocab_local):
/// rank r's block holds the logits of vocabulary entries [r * vocab_local, (r + 1) *
/// vocab_local) for every row. `out` gets shape (n_rows, vocab), row-major. vocab_local *
/// tp_size may exceed vocab (the last shard padded to a whole split): the padding's columns
/// are dropped. Throws InvalidArgument if a size is negative, tp_size or vocab_local < 1,
/// vocab_local * tp_size < vocab, or a span is shorter than its shape.
void gather_vocab_shards(std::span<const float> gathered, int64_t tp_size, int64_t n_rows, int64_t vocab_local,
                         int64_t vocab, std::span<float> out);

}  // namespace lio
