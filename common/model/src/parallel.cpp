// parallel.cpp — the rank plan of a TP x PP grid and the weight shard a rank loads (chapter 08).
#include "lio/parallel.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include "lio/architecture.h"
#include "lio/dtype.h"
#include "lio/error.h"
#include "lio/nccl_communicator.h"
#include "lio/tensor_parallel.h"

namespace lio {

namespace {

int64_t block_elems(const WeightMatrix& w) { return dtype_info(w.dtype).block_elems; }

/// The largest quantization block among the row-parallel matrices (W_o, W_down) of any layer:
/// a row-parallel shard must start and end on a block boundary.
int64_t row_parallel_unit(const Weights& weights, WeightKind kind) {
  int64_t unit = 1;
  for (const LayerWeights& L : weights.layers) {
    unit = std::max(unit, block_elems(L.matrix(kind)));
  }
  return unit;
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

/// Rows [r0, r1) and columns [c0, c1) of `w`, copied into a buffer `out` owns, then padded with
/// zero rows up to `rows_out` rows (an all-zero block decodes to 0 in every GGUF type).
WeightMatrix slice(const WeightMatrix& w, int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t rows_out,
                   Weights& out) {
  const DTypeInfo info = dtype_info(w.dtype);
  if (c0 % info.block_elems != 0 || c1 % info.block_elems != 0) {
    throw InvalidArgument("tensor parallel: columns [" + std::to_string(c0) + ", " + std::to_string(c1) + ") of " +
                          single_quoted(w.name) + " do not fall on its " + std::string(info.name) + " blocks of " +
                          std::to_string(info.block_elems));
  }
  WeightMatrix s;
  s.name = w.name + "[rows " + std::to_string(r0) + ":" + std::to_string(r1) + ", cols " + std::to_string(c0) + ":" +
           std::to_string(c1) + "]";
  s.dtype = w.dtype;
  s.rows = rows_out;
  s.cols = c1 - c0;
  s.row_bytes = dtype_row_bytes(w.dtype, s.cols);
  auto buf = std::make_shared<std::vector<std::byte>>(static_cast<size_t>(s.rows * s.row_bytes), std::byte{0});
  const int64_t col_offset = c0 / info.block_elems * info.block_bytes;
  for (int64_t r = r0; r < r1; ++r) {
    std::memcpy(buf->data() + (r - r0) * s.row_bytes, w.row(r) + col_offset, static_cast<size_t>(s.row_bytes));
  }
  s.data = buf->data();
  out.storage.push_back(std::shared_ptr<const void>(buf, buf->data()));
  return s;
}

WeightMatrix rows_of(const WeightMatrix& w, int64_t r0, int64_t r1, Weights& out) {
  return slice(w, r0, r1, 0, w.cols, r1 - r0, out);
}

WeightMatrix cols_of(const WeightMatrix& w, int64_t c0, int64_t c1, Weights& out) {
  return slice(w, 0, w.rows, c0, c1, w.rows, out);
}

}  // namespace

std::vector<int64_t> valid_tensor_parallel_sizes(const ModelConfig& c, const Weights& weights) {
  std::vector<int64_t> sizes;
  if (c.is_mla()) return {1};
  const int64_t wo_unit = row_parallel_unit(weights, WeightKind::Wo);
  const int64_t down_unit = row_parallel_unit(weights, WeightKind::Down);
  for (int64_t t = 1; t <= c.n_heads; ++t) {
    if (c.n_heads % t != 0 || c.d_ff % t != 0) continue;
    if (c.n_kv_heads % t != 0 && t % c.n_kv_heads != 0) continue;
    if ((c.n_heads / t * c.head_dim) % wo_unit != 0 || (c.d_ff / t) % down_unit != 0) continue;
    sizes.push_back(t);
  }
  return sizes;
}

RankPlan make_rank_plan(const ModelConfig& c, const Weights& weights, const ParallelConfig& parallel,
                        int64_t world_rank) {
  const int64_t tp = parallel.tensor_parallel_size;
  const int64_t pp = parallel.pipeline_parallel_size;
  if (tp < 1 || pp < 1) {
    throw InvalidArgument("--tensor-parallel-size " + std::to_string(tp) + " and --pipeline-parallel-size " +
                          std::to_string(pp) + " must be >= 1");
  }
  if (pp > c.n_layers) {
    throw InvalidArgument("--pipeline-parallel-size " + std::to_string(pp) + ": the model has only " +
                          std::to_string(c.n_layers) + " layers to split into stages");
  }
  if (world_rank < 0 || world_rank >= tp * pp) {
    throw InvalidArgument("make_rank_plan: world rank " + std::to_string(world_rank) + " outside a grid of " +
                          std::to_string(tp * pp));
  }
  if (tp > 1 && c.is_mla()) {
    throw UnsupportedError("--tensor-parallel-size " + std::to_string(tp) +
                           ": tensor parallelism of an MLA model (latent KV shared by all heads) is not supported");
  }
  const std::vector<int64_t> valid = valid_tensor_parallel_sizes(c, weights);
  if (std::find(valid.begin(), valid.end(), tp) == valid.end()) {
    throw InvalidArgument("--tensor-parallel-size " + std::to_string(tp) + ": " + c.name + " has " +
                          std::to_string(c.n_heads) + " query heads, " + std::to_string(c.n_kv_heads) +
                          " KV heads and d_ff " + std::to_string(c.d_ff) +
                          "; the tensor-parallel sizes that split it are " + join(valid));
  }
  RankPlan p;
  p.tp_size = tp;
  p.pp_size = pp;
  p.tp_rank = world_rank % tp;
  p.pp_rank = world_rank / tp;
  // Pipeline stages: contiguous layer ranges, the first n_layers % pp stages one layer longer.
  const int64_t base = c.n_layers / pp, extra = c.n_layers % pp;
  p.layer_begin = p.pp_rank * base + std::min(p.pp_rank, extra);
  p.layer_end = p.layer_begin + base + (p.pp_rank < extra ? 1 : 0);
  p.vocab_size = c.vocab_size;
  if (tp == 1) {  // one rank holds everything: no chapter 08 code on the path
    p.head_end = c.n_heads;
    p.kv_head_end = c.n_kv_heads;
    p.ff_end = c.d_ff;
    p.vocab_local = c.vocab_size;
    return p;
  }
  // Tensor parallelism through chapter 08's Task 1.
  const ShardSlice q = shard_linear(c.n_heads * c.head_dim, c.d_model, ParallelStyle::Column, c.head_dim, tp, p.tp_rank);
  p.head_begin = q.row_begin / c.head_dim;
  p.head_end = q.row_end / c.head_dim;
  const KvHeadRange kv = kv_heads_for_rank(c.n_kv_heads, tp, p.tp_rank);
  p.kv_head_begin = kv.begin;
  p.kv_head_end = kv.end;
  const ShardSlice ff = shard_linear(c.d_ff, c.d_model, ParallelStyle::Column, 1, tp, p.tp_rank);
  p.ff_begin = ff.row_begin;
  p.ff_end = ff.row_end;
  p.vocab_local = (c.vocab_size + tp - 1) / tp;
  const ShardSlice vocab = shard_linear(p.vocab_local * tp, c.d_model, ParallelStyle::Column, 1, tp, p.tp_rank);
  p.vocab_begin = vocab.row_begin;
  // The query heads a rank holds must read only the KV heads it holds (GQA groups stay whole).
  const int64_t group = c.n_heads / c.n_kv_heads;
  if (p.head_begin / group < p.kv_head_begin || (p.head_end - 1) / group >= p.kv_head_end) {
    throw InternalError("make_rank_plan: rank " + std::to_string(p.tp_rank) + "'s query heads [" +
                        std::to_string(p.head_begin) + ", " + std::to_string(p.head_end) +
                        ") read KV heads it does not hold (Task 1's ranges disagree)");
  }
  return p;
}

LoadedModel shard_model(const LoadedModel& full, const RankPlan& p) {
  const ModelConfig& c = full.config;
  LoadedModel out;
  out.path = full.path;
  out.format = full.format;
  out.mode = full.mode;
  out.config = c;
  ModelConfig& lc = out.config;
  lc.n_layers = p.layer_end - p.layer_begin;
  lc.first_layer = c.first_layer + p.layer_begin;  // which layers are windowed follows the global index
  lc.n_heads = p.head_end - p.head_begin;
  lc.n_kv_heads = p.kv_head_end - p.kv_head_begin;
  lc.d_ff = p.ff_end - p.ff_begin;
  lc.vocab_size = p.vocab_local;
  Weights& w = out.weights;
  const Weights& fw = full.weights;
  w.output_norm = fw.output_norm;
  w.mla_rope_inv_freq = fw.mla_rope_inv_freq;
  const int64_t hd = c.head_dim;
  if (p.tp_size == 1) {  // whole matrices: share the full model's storage
    w.storage = fw.storage;
    w.token_embd = fw.token_embd;
    w.output = fw.output;
    w.layers.assign(fw.layers.begin() + p.layer_begin, fw.layers.begin() + p.layer_end);
    return out;
  }
  const int64_t v_end = std::min(c.vocab_size, p.vocab_begin + p.vocab_local);
  auto vocab_rows = [&](const WeightMatrix& m) {
    return slice(m, std::min(p.vocab_begin, c.vocab_size), v_end, 0, m.cols, p.vocab_local, w);
  };
  w.token_embd = vocab_rows(fw.token_embd);
  w.output = fw.output.data == fw.token_embd.data ? w.token_embd : vocab_rows(fw.output);
  // Each tensor is cut along its head or feature dimension, as its family's table names it
  // (lio/architecture.h Dim): a matrix with such rows is column-parallel (W_q, W_k, W_v, W_gate,
  // W_up: this rank's rows), one with such columns row-parallel (W_o, W_down: this rank's
  // columns, its partial sums all-reduced); a bias follows its projection's rows; everything
  // else (norms, QK-norm's per-head weight, the post-norms on all-reduced rows) is whole.
  const auto range = [&](Dim dim) -> std::pair<int64_t, int64_t> {
    switch (dim) {
      case Dim::Heads: return {p.head_begin * hd, p.head_end * hd};
      case Dim::KvHeads: return {p.kv_head_begin * hd, p.kv_head_end * hd};
      case Dim::DFf: return {p.ff_begin, p.ff_end};
      default: return {-1, -1};  // not split
    }
  };
  const Architecture& family = layer_architecture(c);
  bool shares_full_storage = false;
  for (int64_t l = p.layer_begin; l < p.layer_end; ++l) {
    const LayerWeights& f = fw.layers[static_cast<size_t>(l)];
    LayerWeights L;
    for (const TensorSpec& t : family.tensors) {
      const auto [r0, r1] = range(t.rows);
      if (t.cols == Dim::None) {
        const std::vector<float>& v = f.vec(t.kind);
        L.vec(t.kind) =
            r0 < 0 || v.empty() ? v : std::vector<float>(v.begin() + r0, v.begin() + r1);
        continue;
      }
      const WeightMatrix& m = f.matrix(t.kind);
      const auto [c0, c1] = range(t.cols);
      if (m.data == nullptr) continue;  // an optional tensor the file lacks
      if (r0 >= 0) {
        L.matrix(t.kind) = rows_of(m, r0, r1, w);  // column-parallel
      } else if (c0 >= 0) {
        L.matrix(t.kind) = cols_of(m, c0, c1, w);  // row-parallel
      } else {
        L.matrix(t.kind) = m;  // whole on every rank: keep the full model's storage alive
        shares_full_storage = true;
      }
    }
    w.layers.push_back(std::move(L));
  }
  if (shares_full_storage) w.storage.insert(w.storage.end(), fw.storage.begin(), fw.storage.end());
  return out;
}

void check_world_size(int world_size, const ParallelConfig& parallel) {
  const int64_t need = parallel.world_size();
  if (world_size == need) return;
  throw CommError("the job has " + std::to_string(world_size) + " rank(s), but --tensor-parallel-size " +
                  std::to_string(parallel.tensor_parallel_size) + " x --pipeline-parallel-size " +
                  std::to_string(parallel.pipeline_parallel_size) + " needs " + std::to_string(need) +
                  (need > 1 ? ": start it with scripts/mpirun.sh -n " + std::to_string(need)
                            : ": run it without mpirun (or with -n 1)"));
}

int cuda_device_for_rank(int local_rank, int local_size, int n_devices, bool nccl) {
  if (local_size < 1 || local_rank < 0 || local_rank >= local_size) {
    throw InvalidArgument("cuda_device_for_rank: local rank " + std::to_string(local_rank) + " outside [0, " +
                          std::to_string(local_size) + ")");
  }
  if (n_devices < 1) throw UnsupportedError("--device cuda: this rank sees no CUDA device");
  if (local_size > n_devices && nccl) {
    throw UnsupportedError("--all-reduce nccl needs one GPU per rank: this host runs " + std::to_string(local_size) +
                           " ranks and has " + std::to_string(n_devices) +
                           " GPU(s) (NCCL refuses two ranks on one GPU); start fewer ranks per host or use "
                           "--all-reduce library");
  }
  return local_rank % n_devices;
}

std::unique_ptr<ParallelContext> make_parallel_context(const RankPlan& plan, const ModelConfig& full_config,
                                                       std::unique_ptr<Communicator> world, int cuda_device) {
  check_world_size(world->size(), ParallelConfig{plan.tp_size, plan.pp_size});
  auto ctx = std::make_unique<ParallelContext>();
  ctx->plan = plan;
  ctx->full_config = full_config;
  ctx->tp = world->split(static_cast<int>(plan.pp_rank), static_cast<int>(plan.tp_rank));
  // --all-reduce nccl: the tensor-parallel group's all-reduces and gathers run on the GPUs; the
  // driver's commands and the pipeline's sends stay on MPI (host memory).
  if (world->algorithm() == AllReduceAlgorithm::Nccl) ctx->tp = make_nccl_communicator(*ctx->tp, cuda_device);
  ctx->world = std::move(world);
  return ctx;
}

std::vector<ForwardBatch> split_micro_batches(const ForwardBatch& batch, int64_t n) {
  if (n < 1) throw InvalidArgument("split_micro_batches: n must be >= 1, got " + std::to_string(n));
  const int64_t n_seqs = batch.n_seqs();
  const int64_t parts = std::max<int64_t>(1, std::min(n, n_seqs));
  std::vector<ForwardBatch> out;
  const auto& qsl = batch.query_start_loc;
  int64_t seq = 0;
  for (int64_t p = 0; p < parts; ++p) {
    // Sequences [seq, end): stop once this part holds its share of the rows (at least one sequence,
    // and leave one for every later part).
    const int64_t target = batch.n_tokens() * (p + 1) / parts;
    int64_t end = seq + 1;
    while (end < n_seqs - (parts - p - 1) && qsl[static_cast<size_t>(end)] < target) ++end;
    if (p == parts - 1) end = n_seqs;
    ForwardBatch b(batch.block_size);
    b.max_blocks_per_seq = batch.max_blocks_per_seq;
    b.n_layers = batch.n_layers;
    const int32_t r0 = qsl[static_cast<size_t>(seq)], r1 = qsl[static_cast<size_t>(end)];
    b.token_ids.assign(batch.token_ids.begin() + r0, batch.token_ids.begin() + r1);
    b.positions.assign(batch.positions.begin() + r0, batch.positions.begin() + r1);
    b.slot_mapping.assign(batch.slot_mapping.begin() + r0, batch.slot_mapping.begin() + r1);
    b.query_start_loc.clear();  // the constructor's {0}
    for (int64_t s = seq; s <= end; ++s) b.query_start_loc.push_back(qsl[static_cast<size_t>(s)] - r0);
    b.seq_lens.assign(batch.seq_lens.begin() + seq, batch.seq_lens.begin() + end);
    b.block_tables.assign(batch.block_tables.begin() + seq * batch.max_blocks_per_seq,
                          batch.block_tables.begin() + end * batch.max_blocks_per_seq);
    for (int32_t row : batch.logits_rows) {
      if (row >= r0 && row < r1) b.logits_rows.push_back(row - r0);
    }
    for (size_t g = 0; g < batch.group_slot_mapping.size(); ++g) {  // KV cache groups 1.., cut alike
      const std::vector<int32_t>& sm = batch.group_slot_mapping[g];
      const std::vector<int32_t>& bt = batch.group_block_tables[g];
      b.group_slot_mapping.emplace_back(sm.begin() + r0, sm.begin() + r1);
      b.group_block_tables.emplace_back(bt.begin() + seq * batch.max_blocks_per_seq,
                                        bt.begin() + end * batch.max_blocks_per_seq);
    }
    if (!batch.tree_lens.empty()) {  // draft trees (tree verification): their sequences' rows, cut alike
      b.tree_masks.assign(batch.tree_masks.begin() + r0, batch.tree_masks.begin() + r1);
      b.tree_lens.assign(batch.tree_lens.begin() + seq, batch.tree_lens.begin() + end);
    }
    out.push_back(std::move(b));
    seq = end;
  }
  return out;
}

double comm_clock_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace lio
