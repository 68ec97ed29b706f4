// Chapter 08, Tasks 1-5 — YOUR implementation: the column/row shard of a linear layer and the KV
// heads a rank holds, the ring all-reduce over point-to-point sends, one rank's memory under
// tensor parallelism, the bytes a layer sends, and the Megatron-LM forward's meeting points.
// Declarations and contracts: common/parallel/include/lio/tensor_parallel.h. Lesson:
// docs/08_tensor_parallel.md.
// Grade: ctest -R ch08_task_K (K = 1..5), or scripts/grade.sh 08 (Task 2 runs 3 ranks under
// scripts/mpirun.sh). Built with -DLIO_EXERCISES=08, the engine shards the model with your Task 1
// (lio generate --tensor-parallel-size N under scripts/mpirun.sh), runs every row-parallel layer,
// the embedding and the LM head through your Task 5, and `--all-reduce ring` sums with your Task 2.
#include "lio/tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "lio/error.h"

namespace lio {

namespace {

// Given (not a task; the solution has the same helper): the rank check Tasks 1 and 3 share.
void check_rank(int64_t tp_size, int64_t rank, const char* what) {
  if (tp_size < 1 || rank < 0 || rank >= tp_size) {
    throw InvalidArgument(std::string(what) + ": rank " + std::to_string(rank) + " of tp_size " +
                          std::to_string(tp_size) + " (need tp_size >= 1 and 0 <= rank < tp_size)");
  }
}

}  // namespace

// ---- Task 1 -----------------------------------------------------------------------------------

ShardSlice shard_linear(int64_t rows, int64_t cols, ParallelStyle style, int64_t unit, int64_t tp_size,
                        int64_t rank) {
  // TODO(Task 1): the block of W (rows = out_features, cols = in_features, row-major) that rank
  //   `rank` of `tp_size` holds. Column: cut the ROWS (output features) into tp_size equal
  //   contiguous pieces, rank r takes piece r, all columns. Row: cut the COLUMNS (input
  //   features) the same way, all rows. Ranges are half-open [begin, end).
  //   Careful: "column-parallel" splits W's rows (y's columns) — the name is about y = x W^T,
  //   not about W's storage. Each piece must be a whole number of `unit`s (head_dim when Q/K/V
  //   or o_proj are split by heads: a head is never cut in two).
  //   Must hold: SmolLM2-135M's q_proj (576, 576) at TP 3, unit 64: rank 1 holds rows [192, 384).
  //   Throw InvalidArgument if rows, cols or unit < 1, tp_size < 1, rank outside [0, tp_size)
  //   (check_rank above does that part), or the split dimension is not a multiple of
  //   tp_size * unit (say which dimension in the message).
  //   Lesson: docs/08_tensor_parallel.md, "Task 1" (Megatron-LM, sec. 3, Figure 3).
  (void)rows, (void)cols, (void)style, (void)unit, (void)tp_size, (void)rank, (void)check_rank;
  throw NotImplemented(
      "Task 1 (exercises/08_tensor_parallel/tensor_parallel.cpp): shard_linear — "
      "see docs/08_tensor_parallel.md, Task 1");
}

KvHeadRange kv_heads_for_rank(int64_t n_kv_heads, int64_t tp_size, int64_t rank) {
  // TODO(Task 1): the KV heads [begin, end) rank `rank` of `tp_size` holds, as vLLM's
  //   QKVParallelLinear decides. tp_size <= n_kv_heads: n_kv_heads / tp_size contiguous heads
  //   each. tp_size > n_kv_heads: there are not enough heads to go round, so each rank holds ONE
  //   head, replicated on tp_size / n_kv_heads consecutive ranks — the head its query heads read
  //   (8 query / 2 KV heads at TP 4: ranks 0, 1 hold head 0; ranks 2, 3 hold head 1).
  //   Throw InvalidArgument if n_kv_heads or tp_size < 1, rank outside [0, tp_size) (check_rank
  //   above), or tp_size neither divides nor is a multiple of n_kv_heads (3 KV heads, 2 ranks).
  //   Lesson: docs/08_tensor_parallel.md, "Task 1".
  (void)n_kv_heads, (void)tp_size, (void)rank, (void)check_rank;
  throw NotImplemented(
      "Task 1 (exercises/08_tensor_parallel/tensor_parallel.cpp): kv_heads_for_rank — "
      "see docs/08_tensor_parallel.md, Task 1");
}

// ---- Task 2 -----------------------------------------------------------------------------------

void ring_all_reduce(float* data, int64_t n, Communicator& comm) {
  // TODO(Task 2): on return, data (n floats) on every rank = the element-wise sum of every
  //   rank's data, using only comm.send_recv, each rank exchanging with its two ring
  //   neighbours. The lesson's "Task 2" (Patarasuk & Yuan 2009) derives the two phases, which
  //   piece of data moves at each step, and how much each rank sends. Must hold: every rank ends
  //   with the SAME bits (the test compares them), n not a multiple of the world size and
  //   n < world size work, and the bytes each rank sends are the bandwidth-optimal share.
  //   Careful: C++'s % of a negative number is negative. World size 1 or n == 0: return with
  //   data unchanged. Throw InvalidArgument if n < 0.
  (void)data, (void)n, (void)comm;
  throw NotImplemented(
      "Task 2 (exercises/08_tensor_parallel/tensor_parallel.cpp): ring_all_reduce — "
      "see docs/08_tensor_parallel.md, Task 2");
}

// ---- Task 3 -----------------------------------------------------------------------------------

RankMemory tp_rank_memory(const TpMemoryInputs& in) {
  // TODO(Task 3): one rank's memory under tensor parallelism, in bytes (decimal: "40 GB" = 40e9):
  //   the RankMemory fields as lio/tensor_parallel.h defines them. The weights split evenly; the
  //   KV heads one rank caches are Task 1's kv_heads_for_rank (replicated heads do not shrink
  //   further); the budget is what is left of the share of the card LIO may use (negative: does
  //   not fit), and whole tokens fit in it (0 when the budget is not positive).
  //   Must hold: lecture note 000's Llama 3.1 70B in AWQ (4.25 bits) does not fit one A100
  //   40 GB, and fits two with TP 2.
  //   Throw InvalidArgument for a non-positive count or size, memory_utilization outside (0, 1],
  //   or as kv_heads_for_rank. Lesson: docs/08_tensor_parallel.md, "Task 3".
  (void)in;
  throw NotImplemented(
      "Task 3 (exercises/08_tensor_parallel/tensor_parallel.cpp): tp_rank_memory — "
      "see docs/08_tensor_parallel.md, Task 3");
}

// ---- Task 4 -----------------------------------------------------------------------------------

LayerCommVolume layer_comm_volume(int64_t n_tokens, int64_t d_model, int64_t bytes_per_element, int64_t tp_size) {
  // TODO(Task 4): what one decoder layer sends for n_tokens tokens over tp_size ranks.
  //   all_reduce_bytes: the messages the layer all-reduces in the forward pass (where does a
  //   Megatron layer all-reduce, and what is each message? Megatron-LM sec. 3).
  //   bytes_sent_per_rank: what your Task 2 ring sends per rank for them — 0 at TP 1, where
  //   there is nothing to sum.
  //   Must hold: SmolLM2-135M (d_model 576), f32, one token: 4,608 bytes all-reduced.
  //   Throw InvalidArgument if n_tokens < 0, or d_model, bytes_per_element or tp_size < 1.
  //   Lesson: docs/08_tensor_parallel.md, "Task 4".
  (void)n_tokens, (void)d_model, (void)bytes_per_element, (void)tp_size;
  throw NotImplemented(
      "Task 4 (exercises/08_tensor_parallel/tensor_parallel.cpp): layer_comm_volume — "
      "see docs/08_tensor_parallel.md, Task 4");
}

// ---- Task 5 -----------------------------------------------------------------------------------

void row_parallel_linear(const PartialProduct& partial, float* out, int64_t count, bool add_to_out,
                         const TpGroup& group) {
  // TODO(Task 5), part a: one row-parallel linear layer (o_proj, down) on this rank. Every rank
  //   holds the same `out` (the residual stream when add_to_out) and computes only its partial
  //   product (call `partial` once, choosing accumulate). On return every rank must hold
  //   [out_before +] the sum of all ranks' partials, as lio/tensor_parallel.h states.
  //   Must hold: the residual counted once at any group size; the engine's logits at TP 2 equal one
  //   rank's (the grading test runs both under scripts/mpirun.sh). Group size 1: no all-reduce.
  //   Throw InvalidArgument if count < 0, the rank is outside the group (check_rank), or size > 1
  //   without an all_reduce.
  //   Lesson: docs/08_tensor_parallel.md, "Task 5" (Megatron-LM sec. 3, the g operator).
  (void)partial, (void)out, (void)count, (void)add_to_out, (void)group;
  throw NotImplemented(
      "Task 5 (exercises/08_tensor_parallel/tensor_parallel.cpp): row_parallel_linear — "
      "see docs/08_tensor_parallel.md, Task 5");
}

void localize_vocab_ids(std::span<int32_t> ids, int64_t vocab_begin, int64_t vocab_local) {
  // TODO(Task 5), part b: rewrite the batch's token ids for this rank's slice of the embedding
  //   table, as lio/tensor_parallel.h states (ids outside the slice become -1: a zero row the
  //   all-reduce after the lookup fills from the rank that holds it).
  //   Throw InvalidArgument if vocab_begin < 0 or vocab_local < 1.
  //   Lesson: docs/08_tensor_parallel.md, "Task 5".
  (void)ids, (void)vocab_begin, (void)vocab_local;
  throw NotImplemented(
      "Task 5 (exercises/08_tensor_parallel/tensor_parallel.cpp): localize_vocab_ids — "
      "see docs/08_tensor_parallel.md, Task 5");
}

void gather_vocab_shards(std::span<const float> gathered, int64_t tp_size, int64_t n_rows, int64_t vocab_local,
                         int64_t vocab, std::span<float> out) {
  // TODO(Task 5), part c: the all-gathered LM-head logits, (tp_size, n_rows, vocab_local), into
  //   (n_rows, vocab) in vocabulary order, as lio/tensor_parallel.h states.
  //   Must hold: a vocabulary that does not split evenly (49,152 at TP 5 gives shards of 9,831 with
  //   3 padding columns on the last rank) loses nothing and writes nothing past vocab.
  //   Throw InvalidArgument for the sizes and spans lio/tensor_parallel.h lists.
  //   Lesson: docs/08_tensor_parallel.md, "Task 5".
  (void)gathered, (void)tp_size, (void)n_rows, (void)vocab_local, (void)vocab, (void)out;
  throw NotImplemented(
      "Task 5 (exercises/08_tensor_parallel/tensor_parallel.cpp): gather_vocab_shards — "
      "see docs/08_tensor_parallel.md, Task 5");
}

}  // namespace lio
