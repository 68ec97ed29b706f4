// tp_decoder_layer.h — chapter 08, Task 6: one Llama decoder layer on one rank of a tensor-
// parallel group, over that rank's shards; the layer every llama-family model runs when
// --tensor-parallel-size > 1.
#pragma once

#include <cstdint>

#include "lio/architecture.h"

namespace lio {

/// Chapter 08, Task 6 (lesson docs/08_tensor_parallel.md, "A tensor-parallel decoder layer" and
/// "Task 6"): the pre-norm Llama decoder layer of chapter 01's Task 5 (lio/decoder_layer.h), run
/// by rank p.tp.rank of a group of p.tp.size ranks (Shoeybi et al. 2019, "Megatron-LM", sec. 3,
/// Figure 3) for the n = p.n_tokens rows of a batch.
///
/// This rank's shard: p.config is the rank's slice of the model, not the whole model: its
/// p.config.n_heads query heads and the p.config.n_kv_heads KV heads they read (chapter 08's
/// Task 1), and its p.config.d_ff features of the MLP; d_model is the model's. Through p.be, the
/// weights of layer `layer` (WeightRef{kind, layer}) are the rank's pieces: AttnNorm and FfnNorm
/// whole; Wq, Wk, Wv, Gate and Up column-parallel (the rows of this rank's heads and features:
/// their products need nothing from the other ranks); Wo (d_model, n_heads * head_dim) and Down
/// (d_model, d_ff) row-parallel (the columns matching those heads and features: their products
/// are this rank's partial sums, full width).
///
/// In: p.x (n, d_model), the residual stream entering the layer, the same on every rank; the
/// batch's positions, slot mapping and block tables in p.view; the RoPE base
/// p.config.layer_rope_theta(layer).
/// Out, on every rank of the group: p.x holds the whole model's layer output (what chapter 01's
/// Task 5 layer gives on one rank, to the backend's rounding), the same on every rank, with the
/// entering residual counted once, not p.tp.size times. p.pool holds this rank's K and V heads
/// of every row at the row's slot, rotated as attention reads them.
/// Communication: exactly two calls of p.tp.all_reduce per layer on every rank (a collective:
/// the same calls, in the same order, with the same counts, on all ranks, or the job hangs),
/// each over n * d_model floats: one finishes the attention block (after W_o), one the MLP block
/// (after Down). Nothing else crosses ranks. (chapter 08's Task 5a, row_parallel_linear, is one
/// way to make such a call.)
/// Scratch: p.xn (n, d_model), p.q (n, n_heads * head_dim), p.k and p.v (n, n_kv_heads *
/// head_dim), p.attn (n, n_heads * head_dim), p.gate and p.up (n, d_ff), all at this rank's
/// sizes: any contents on entry, any on return. Use only p.be's operators and p.tp.all_reduce,
/// so that the same code runs on CPU ranks (Open MPI) and GPU ranks (NCCL).
/// Requires p.tp.size > 1 with p.tp.all_reduce set, and a GQA model (config.is_mla() false).
/// Throws as the operators and the all-reduce it calls.
void tp_decoder_layer(LayerPass& p, int64_t layer);

}  // namespace lio
