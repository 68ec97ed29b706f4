// model.h — the Llama-family decoder forward pass, written once over a Backend's operators.
//
// Per block (Touvron et al. 2023, "LLaMA", sec. 2.2):
//   h = x + W_o . Attn(RoPE(W_q . RMSNorm(x)), RoPE(W_k . RMSNorm(x)), W_v . RMSNorm(x))
//   y = h + W_down . (silu(W_gate . RMSNorm(h)) * (W_up . RMSNorm(h)))
// then logits = W_out . RMSNorm(y) for the rows that need them. Attention is grouped-query
// (Ainslie et al. 2023) and paged (Kwon et al. 2023): K/V go to the pool through the slot
// mapping, and each row reads its sequence's cached prefix through the block table.
// The pass holds no sequence state: positions, slots and block tables come in the batch.
#pragma once

#include <span>

#include "lio/backend.h"
#include "lio/forward_batch.h"
#include "lio/kv_pool.h"
#include "lio/model_config.h"

namespace lio {

/// Runs the forward pass on `backend` (which must outlive the Model).
class Model {
 public:
  /// Keeps a reference to `backend` (not owned; it must outlive the Model).
  explicit Model(Backend& backend) : backend_(backend) {}

  /// Runs `batch` (validated against the model and `pool` first), writes every row's K/V
  /// into `pool`, and returns the logits of batch.logits_rows in the backend's memory:
  /// (n_logits, vocab_size) row-major, valid until the next forward. Work may still be in
  /// flight (Backend::to_host waits). Throws InvalidArgument for a bad batch.
  float* forward_device(const ForwardBatch& batch, KvPool& pool);

  /// forward_device(), then the logits copied to `logits` (n_logits * vocab_size floats, host).
  /// Throws InvalidArgument if `logits` has another size, or as forward_device().
  void forward(const ForwardBatch& batch, KvPool& pool, std::span<float> logits);

  /// The backend's model config.
  const ModelConfig& config() const { return backend_.config(); }

 private:
  Backend& backend_;
};

}  // namespace lio
