// Chapter 08, Tasks 1-5 — reference solution: the column/row shard of a linear layer and the KV
// heads a rank holds, the ring all-reduce over point-to-point sends, one rank's memory under
// tensor parallelism, the bytes a layer sends, and the Megatron-LM forward's meeting points.
// Declarations and contracts: common/parallel/include/lio/tensor_parallel.h. Lesson:
// docs/08_tensor_parallel.md.
#include "lio/tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "lio/error.h"

namespace lio {

namespace {

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
  check_rank(tp_size, rank, "shard_linear");
  if (rows < 1 || cols < 1 || unit < 1) {
    throw InvalidArgument("shard_linear: rows " + std::to_string(rows) + ", cols " + std::to_string(cols) +
                          " and unit " + std::to_string(unit) + " must be >= 1");
  }
  const bool by_rows = style == ParallelStyle::Column;  // column-parallel splits the outputs
  const int64_t split = by_rows ? rows : cols;
  if (split % (tp_size * unit) != 0) {
    throw InvalidArgument(std::string("shard_linear: ") + (by_rows ? "rows " : "cols ") + std::to_string(split) +
                          " do not split into " + std::to_string(tp_size) + " pieces of whole units of " +
                          std::to_string(unit));
  }
  const int64_t piece = split / tp_size;
  ShardSlice s{0, rows, 0, cols};
  if (by_rows) {
    s.row_begin = rank * piece;
    s.row_end = s.row_begin + piece;
  } else {
    s.col_begin = rank * piece;
    s.col_end = s.col_begin + piece;
  }
  return s;
}

KvHeadRange kv_heads_for_rank(int64_t n_kv_heads, int64_t tp_size, int64_t rank) {
  check_rank(tp_size, rank, "kv_heads_for_rank");
  if (n_kv_heads < 1) throw InvalidArgument("kv_heads_for_rank: n_kv_heads " + std::to_string(n_kv_heads) + " < 1");
  if (tp_size <= n_kv_heads) {
    if (n_kv_heads % tp_size != 0) {
      throw InvalidArgument("kv_heads_for_rank: " + std::to_string(n_kv_heads) + " KV heads do not split over " +
                            std::to_string(tp_size) + " ranks");
    }
    const int64_t per = n_kv_heads / tp_size;
    return {rank * per, rank * per + per};
  }
  if (tp_size % n_kv_heads != 0) {
    throw InvalidArgument("kv_heads_for_rank: " + std::to_string(tp_size) + " ranks cannot replicate " +
                          std::to_string(n_kv_heads) + " KV heads evenly");
  }
  // rank r holds head r / (tp_size / n_kv_heads): the one its query heads read.
  const int64_t replicas = tp_size / n_kv_heads;  // ranks sharing one KV head
  return {rank / replicas, rank / replicas + 1};
}

// ---- Task 2 -----------------------------------------------------------------------------------

void ring_all_reduce(float* data, int64_t n, Communicator& comm) {
  if (n < 0) throw InvalidArgument("ring_all_reduce: negative count " + std::to_string(n));
  const int p = comm.size();
  if (p == 1 || n == 0) return;
  const int r = comm.rank();
  const int next = (r + 1) % p;
  const int prev = (r - 1 + p) % p;
  const int64_t chunk = (n + p - 1) / p;
  auto begin = [&](int64_t c) { return std::min(n, c * chunk); };
  auto len = [&](int64_t c) { return std::min(n, (c + 1) * chunk) - begin(c); };
  auto mod = [&](int64_t c) { return ((c % p) + p) % p; };
  std::vector<float> incoming(static_cast<size_t>(chunk));
  // Reduce-scatter: after step s, rank r has summed s + 2 contributions into chunk (r - s - 1).
  for (int s = 0; s < p - 1; ++s) {
    const int64_t send_c = mod(r - s);
    const int64_t recv_c = mod(r - s - 1);
    comm.send_recv(data + begin(send_c), len(send_c), next, incoming.data(), len(recv_c), prev);
    float* dst = data + begin(recv_c);
    for (int64_t i = 0; i < len(recv_c); ++i) dst[i] += incoming[static_cast<size_t>(i)];
  }
  // All-gather: rank r owns the full sum of chunk (r + 1); pass the finished chunks around.
  for (int s = 0; s < p - 1; ++s) {
    const int64_t send_c = mod(r + 1 - s);
    const int64_t recv_c = mod(r - s);
    comm.send_recv(data + begin(send_c), len(send_c), next, data + begin(recv_c), len(recv_c), prev);
  }
}

// ---- Task 3 -----------------------------------------------------------------------------------

RankMemory tp_rank_memory(const TpMemoryInputs& in) {
  if (in.n_params <= 0 || in.bits_per_weight <= 0 || in.n_layers < 1 || in.head_dim < 1 ||
      in.kv_bytes_per_element <= 0 || in.gpu_bytes <= 0) {
    throw InvalidArgument("tp_rank_memory: parameters, bits, layers, head_dim, KV element bytes and card bytes must be > 0");
  }
  if (!(in.memory_utilization > 0 && in.memory_utilization <= 1)) {
    throw InvalidArgument("tp_rank_memory: memory_utilization " + std::to_string(in.memory_utilization) +
                          " outside (0, 1]");
  }
  const KvHeadRange kv = kv_heads_for_rank(in.n_kv_heads, in.tp_size, 0);
  RankMemory m;
  m.weight_bytes = in.n_params * in.bits_per_weight / 8.0 / static_cast<double>(in.tp_size);
  m.kv_bytes_per_token = 2.0 * static_cast<double>(in.n_layers) * static_cast<double>(kv.end - kv.begin) *
                         static_cast<double>(in.head_dim) * in.kv_bytes_per_element;
  m.kv_budget_bytes = in.gpu_bytes * in.memory_utilization - m.weight_bytes;
  m.max_kv_tokens = m.kv_budget_bytes > 0 ? static_cast<int64_t>(std::floor(m.kv_budget_bytes / m.kv_bytes_per_token)) : 0;
  return m;
}

// ---- Task 4 -----------------------------------------------------------------------------------

LayerCommVolume layer_comm_volume(int64_t n_tokens, int64_t d_model, int64_t bytes_per_element, int64_t tp_size) {
  if (n_tokens < 0 || d_model < 1 || bytes_per_element < 1 || tp_size < 1) {
    throw InvalidArgument("layer_comm_volume: n_tokens " + std::to_string(n_tokens) + ", d_model " +
                          std::to_string(d_model) + ", bytes " + std::to_string(bytes_per_element) + ", tp_size " +
                          std::to_string(tp_size) + " (need n_tokens >= 0, the others >= 1)");
  }
  LayerCommVolume v;
  v.all_reduce_bytes = 2 * n_tokens * d_model * bytes_per_element;
  // A ring sends 2 (n - 1) / n of each message per rank (Task 2).
  v.bytes_sent_per_rank = static_cast<double>(v.all_reduce_bytes) * 2.0 * static_cast<double>(tp_size - 1) /
                          static_cast<double>(tp_size);
  return v;
}

// ---- Task 5 -----------------------------------------------------------------------------------

void row_parallel_linear(const PartialProduct& partial, float* out, int64_t count, bool add_to_out,
                         const TpGroup& group) {
  if (count < 0) throw InvalidArgument("row_parallel_linear: negative count " + std::to_string(count));
  check_rank(group.size, group.rank, "row_parallel_linear");
  if (group.size > 1 && !group.all_reduce) {
    throw InvalidArgument("row_parallel_linear: a group of " + std::to_string(group.size) + " ranks needs an all_reduce");
  }
  // Every rank holds the same residual. Only rank 0 keeps it in its partial sum:
  // rank 0 adds into it, each other rank starts from zero, so the all-reduce adds it once.
  partial(out, add_to_out && group.rank == 0);
  if (group.size > 1) group.all_reduce(out, count);
}

void localize_vocab_ids(std::span<int32_t> ids, int64_t vocab_begin, int64_t vocab_local) {
  if (vocab_begin < 0 || vocab_local < 1) {
    throw InvalidArgument("localize_vocab_ids: vocab_begin " + std::to_string(vocab_begin) + ", vocab_local " +
                          std::to_string(vocab_local) + " (need >= 0 and >= 1)");
  }
  for (int32_t& id : ids) {
    id = id >= vocab_begin && id < vocab_begin + vocab_local ? static_cast<int32_t>(id - vocab_begin) : -1;
  }
}

void gather_vocab_shards(std::span<const float> gathered, int64_t tp_size, int64_t n_rows, int64_t vocab_local,
                         int64_t vocab, std::span<float> out) {
  if (tp_size < 1 || vocab_local < 1 || n_rows < 0 || vocab < 0 || vocab_local * tp_size < vocab) {
    throw InvalidArgument("gather_vocab_shards: tp_size " + std::to_string(tp_size) + ", n_rows " +
                          std::to_string(n_rows) + ", vocab_local " + std::to_string(vocab_local) + ", vocab " +
                          std::to_string(vocab) + " (need tp_size, vocab_local >= 1 and tp_size * vocab_local >= vocab)");
  }
  if (static_cast<int64_t>(gathered.size()) < tp_size * n_rows * vocab_local ||
      static_cast<int64_t>(out.size()) < n_rows * vocab) {
    throw InvalidArgument("gather_vocab_shards: spans of " + std::to_string(gathered.size()) + " and " +
                          std::to_string(out.size()) + " floats are shorter than their shapes");
  }
  for (int64_t r = 0; r < tp_size; ++r) {
    const int64_t cols = std::min(vocab_local, vocab - r * vocab_local);  // the padding is dropped
    for (int64_t i = 0; i < n_rows && cols > 0; ++i) {
      const float* src = gathered.data() + (r * n_rows + i) * vocab_local;
      std::copy(src, src + cols, out.data() + i * vocab + r * vocab_local);
    }
  }
}

}  // namespace lio
