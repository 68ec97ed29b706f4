#include "lio/model.h"

#include <algorithm>
#include <string>
#include <vector>

#include "lio/architecture.h"
#include "lio/error.h"
#include "lio/tensor_parallel.h"

namespace lio {

Model::Model(Backend& backend)
    : backend_(backend), arch_(layer_architecture(backend.config())) {}

float* Model::forward_device(const ForwardBatch& batch, KvPool& pool) {
  Backend& be = backend_;
  hidden_ = nullptr;
  const ModelConfig& c = be.config();  // this rank's shard (the whole model on one rank)
  const ModelConfig& full = config();
  batch.validate(full.vocab_size, full.context_length, pool.n_blocks(), pool.n_groups());
  if (batch.block_size != pool.block_size()) {
    throw InvalidArgument("forward: the batch uses blocks of " + std::to_string(batch.block_size) +
                          " tokens, the pool " + std::to_string(pool.block_size()));
  }
  if (batch.n_layers < 0 || batch.n_layers > full.n_layers) {
    throw InvalidArgument("forward: the batch asks for " + std::to_string(batch.n_layers) + " layers; the model has " +
                          std::to_string(full.n_layers) + " (0 = all)");
  }
  // ---- chapter 08: this rank's part of the grid (one rank: tp = pp = 1)
  ParallelContext* par = parallel_;
  const RankPlan plan = par ? par->plan : RankPlan{};
  const bool tp = plan.tp_size > 1;
  const bool pp = plan.pp_size > 1;
  if (pp && batch.n_layers != 0) {
    throw UnsupportedError("forward: early exit (" + std::to_string(batch.n_layers) +
                           " layers) under pipeline parallelism is not supported");
  }
  const int64_t n_run = batch.n_layers == 0 ? c.n_layers : batch.n_layers;  // early exit: fewer
  const int64_t n = batch.n_tokens();
  const int64_t n_out = batch.n_logits();
  const int64_t d = c.d_model;
  const ForwardBatch* run = &batch;
  if (tp) {  // vocabulary-parallel embedding: ids outside this rank's shard become -1 (a zero row)
    local_batch_ = batch;
    localize_vocab_ids(local_batch_.token_ids, plan.vocab_begin, plan.vocab_local);  // chapter 08, Task 5b
    run = &local_batch_;
  }
  const BatchView view = be.upload(*run);
  float* x = be.scratch(Scratch::X, n * d);           // (n, d_model) residual stream
  float* xn = be.scratch(Scratch::Xn, n * d);         // (n, d_model) normalized
  float* q = be.scratch(Scratch::Q, n * c.q_dim());   // (n, n_heads * head_dim)
  // (n, n_kv_heads * head_dim); MLA: (n, kv_lora_rank + qk_rope_head_dim), the latent rows
  float* k = be.scratch(Scratch::K, n * (c.is_mla() ? 2 * c.kv_dim() : c.kv_dim()));
  float* v = be.scratch(Scratch::V, n * c.kv_dim());
  float* attn = be.scratch(Scratch::Attn, n * c.attn_out_dim());
  float* gate = be.scratch(Scratch::Gate, n * c.d_ff);  // (n, d_ff)
  float* up = be.scratch(Scratch::Up, n * c.d_ff);

  if (plan.first_stage()) {
    be.embedding(view.token_ids, n, x);
    if (tp) par->tp_all_reduce(be, x, n * d);  // each token's embedding row came from one rank's shard
  } else {
    par->receive_from_previous_stage(be, x, n * d);  // same tensor-parallel rank, the stage before
  }
  // ---- the family's decoder layers (lio/architecture.h; arch/<family>.cpp). Row-parallel layers
  // (y = x + sum over ranks of h_r W_r^T) sum through chapter 08's Task 5a over `group`. One view
  // per KV cache group (lio/kv_pool.h; one without the hybrid layout): each layer reads and
  // writes its group's blocks.
  const TpGroup group = tp ? par->tp_group(be) : TpGroup{};
  std::vector<BatchView> group_views;
  for (int64_t g = 0; g < pool.n_groups(); ++g) group_views.push_back(view.for_group(g));
  for (int64_t l = 0; l < n_run; ++l) {
    LayerPass pass{be, c, pool, group_views[static_cast<size_t>(pool.groups().layer_group[static_cast<size_t>(l)])],
                   n, x, xn, q, k, v, attn, gate, up, group};
    arch_.layer(pass, l);
  }
  if (!plan.last_stage()) {
    par->send_to_next_stage(be, x, n * d);
    return nullptr;
  }
  // Only the rows whose logits are wanted go through the (vocab x d_model) head.
  float* logits = be.scratch(Scratch::Logits, n_out * c.vocab_size);
  if (n_out == 0) return logits;
  float* rows = be.scratch(Scratch::Rows, n_out * d);
  be.gather_rows(x, view.logits_rows, n_out, d, rows);
  be.rmsnorm(rows, {WeightKind::OutputNorm}, rows, n_out);
  hidden_ = rows;  // the final hidden states (the residual stream is whole on every rank)
  be.matmul({WeightKind::Output}, rows, logits, n_out, false);  // vocabulary-parallel: this rank's columns
  // Per-logit transforms (elementwise, so each rank's vocabulary columns alone): granite's 1 /
  // logit_scale, then gemma2's final soft-cap (llama.cpp's llm_build_granite / _gemma2_iswa).
  if (c.logit_scale != 1.0f) be.scale(logits, 1.0f / c.logit_scale, n_out * c.vocab_size);
  if (c.final_softcap > 0.0f) be.softcap(logits, c.final_softcap, n_out * c.vocab_size);
  if (!tp) return logits;
  float* gathered = be.scratch(Scratch::Gathered, plan.tp_size * n_out * c.vocab_size);
  par->tp_all_gather(be, logits, gathered, n_out * c.vocab_size);  // (tp, n_out, vocab / tp)
  return gathered;
}

void Model::forward(const ForwardBatch& batch, KvPool& pool, std::span<float> logits) {
  const int64_t n_out = batch.n_logits();
  const int64_t vocab = config().vocab_size;
  const int64_t n_floats = n_out * vocab;
  ParallelContext* par = parallel_;
  const bool receives = par == nullptr || par->driver();
  if (receives && static_cast<int64_t>(logits.size()) != n_floats) {
    throw InvalidArgument("forward: logits buffer holds " + std::to_string(logits.size()) + " floats, " +
                          std::to_string(n_floats) + " needed");
  }
  if (par == nullptr || par->plan.tp_size * par->plan.pp_size == 1) {
    const float* device_logits = forward_device(batch, pool);
    backend_.to_host(device_logits, n_floats, logits.data());
    return;
  }
  const RankPlan& plan = par->plan;
  const int64_t last_leader = plan.world_rank_of(plan.pp_size - 1, 0);  // gathers for the driver
  const bool gathers = plan.last_stage() && plan.tp_rank == 0;
  std::vector<float> ordered;
  float* out = logits.data();
  if (gathers && !par->driver()) {
    ordered.resize(static_cast<size_t>(n_floats));
    out = ordered.data();
  }
  // Pipeline: micro-batches one after another through the stages; every rank cuts the batch the
  // same way. The blocking sends pace the stages: stage s sends micro-batch j once stage s + 1
  // has taken j - 1, and computes j + 1 while s + 1 computes j.
  const int64_t n_micro = plan.pp_size == 1       ? 1
                          : par->micro_batches > 0 ? par->micro_batches
                          : batch.n_tokens() >= 64 * plan.pp_size ? plan.pp_size
                                                                  : 1;
  const std::vector<ForwardBatch> parts =
      n_micro > 1 ? split_micro_batches(batch, n_micro) : std::vector<ForwardBatch>{};
  const int64_t n_parts = parts.empty() ? 1 : static_cast<int64_t>(parts.size());
  int64_t row0 = 0;
  for (int64_t j = 0; j < n_parts; ++j) {
    const ForwardBatch& part = parts.empty() ? batch : parts[static_cast<size_t>(j)];
    const float* device_logits = forward_device(part, pool);
    const int64_t part_out = part.n_logits();
    if (gathers && part_out > 0) {
      // (tp, part_out, vocab_local) -> (part_out, vocab): chapter 08, Task 5c.
      staging_.resize(static_cast<size_t>(plan.tp_size * part_out * plan.vocab_local));
      backend_.to_host(device_logits, static_cast<int64_t>(staging_.size()), staging_.data());
      gather_vocab_shards(staging_, plan.tp_size, part_out, plan.vocab_local, vocab,
                          std::span<float>(out + row0 * vocab, static_cast<size_t>(part_out * vocab)));
    }
    row0 += part_out;
  }
  if (n_floats == 0 || last_leader == 0) return;
  const double t0 = comm_clock_seconds();
  if (gathers) {  // pipeline: the logits go from the last stage to the driver
    par->world->send_recv(out, n_floats, 0, nullptr, 0, -1);
  } else if (par->driver()) {
    par->world->send_recv(nullptr, 0, -1, logits.data(), n_floats, static_cast<int>(last_leader));
  }
  if (gathers || par->driver()) {
    par->send_recv.add(n_floats * static_cast<int64_t>(sizeof(float)), comm_clock_seconds() - t0);
  }
}

}  // namespace lio
