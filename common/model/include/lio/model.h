// model.h — the decoder forward pass, written once over a Backend's operators: a
// model-independent frame around the layers of the model's family (lio/architecture.h).
//
// The frame: x = embedding rows of the batch's tokens; each layer of the family updates x
// (arch/<family>.cpp; Llama's, Touvron et al. 2023, sec. 2.2:
//   h = x + W_o . Attn(RoPE(W_q . RMSNorm(x)), RoPE(W_k . RMSNorm(x)), W_v . RMSNorm(x))
//   y = h + W_down . (silu(W_gate . RMSNorm(h)) * (W_up . RMSNorm(h))) );
// then logits = W_out . RMSNorm(y) for the rows that need them. Attention is grouped-query
// (Ainslie et al. 2023) and paged (Kwon et al. 2023): K/V go to the pool through the slot
// mapping, and each row reads its sequence's cached prefix through the block table.
// The pass holds no sequence state: positions, slots and block tables come in the batch.
//
// Over several ranks (chapter 08; Shoeybi et al. 2019, Megatron-LM sec. 3) the same code runs on
// each rank's shard (lio/parallel.h): the backend holds n_heads / tp heads and d_ff / tp features,
// W_o and W_down produce partial sums that one all-reduce each turns into the residual update
// (the two all-reduces per layer), the vocabulary-parallel embedding is all-reduced and the LM
// head's logits all-gathered; a pipeline stage receives the residual stream from the stage before
// and sends it to the next.
#pragma once

#include <span>
#include <vector>

#include "lio/architecture.h"
#include "lio/backend.h"
#include "lio/forward_batch.h"
#include "lio/kv_pool.h"
#include "lio/model_config.h"
#include "lio/parallel.h"

namespace lio {

/// Runs the forward pass on `backend` (which must outlive the Model).
class Model {
 public:
  /// Keeps a reference to `backend` (not owned; it must outlive the Model) and picks the layer
  /// of its config's family. Throws UnsupportedError for an architecture LIO does not run.
  explicit Model(Backend& backend);

  /// Makes this Model one rank of `parallel`'s grid (not owned; null = one rank). The backend
  /// must hold the shard parallel->plan describes (shard_model).
  void set_parallel(ParallelContext* parallel) { parallel_ = parallel; }

  /// Runs `batch` (validated against the model and `pool` first), writes every row's K/V
  /// into `pool`, and returns the logits of batch.logits_rows in the backend's memory:
  /// (n_logits, vocab_size) row-major, valid until the next forward. Work may still be in
  /// flight (Backend::to_host waits). Throws InvalidArgument for a bad batch.
  /// Over ranks: the last pipeline stage returns the tensor-parallel group's gathered logits,
  /// (tp, n_logits, vocab / tp) (Scratch::Gathered; forward() puts them in vocabulary order);
  /// other stages return null after sending their residual stream on. Throws CommError when a
  /// collective fails, UnsupportedError for early exit (batch.n_layers) under pipeline parallelism.
  float* forward_device(const ForwardBatch& batch, KvPool& pool);

  /// forward_device(), then the logits copied to `logits` (n_logits * vocab_size floats, host).
  /// Over ranks only the driver (world rank 0) receives them; other ranks pass an empty span.
  /// Throws InvalidArgument if `logits` has another size, or as forward_device().
  void forward(const ForwardBatch& batch, KvPool& pool, std::span<float> logits);

  /// The last forward_device()'s final hidden states in the backend's memory: the logits rows
  /// after the output norm, before the LM head, (n_logits, d_model) row-major, valid until the
  /// next forward. Null when that pass had no logits rows or was not the last pipeline stage.
  /// Over tensor parallelism every rank holds them whole.
  const float* hidden_device() const { return hidden_; }

  /// The model's config: the whole model's, also over ranks (the backend's is the shard's).
  const ModelConfig& config() const { return parallel_ ? parallel_->full_config : backend_.config(); }

 private:
  Backend& backend_;
  const Architecture& arch_;        ///< the family whose layers the frame runs
  ParallelContext* parallel_ = nullptr;
  ForwardBatch local_batch_;        ///< over tensor parallelism: the batch with shard-local token ids
  std::vector<float> staging_;      ///< host buffer of the logits' reordering (the pipeline's own: ParallelContext)
  const float* hidden_ = nullptr;   ///< the last pass's (n_logits, d_model) normed rows (Scratch::Rows), or null
};

}  // namespace lio
