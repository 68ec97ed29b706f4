#include "lio/model_runner.h"

#include <cstring>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "lio/cuda_graph_plan.h"
#include "lio/error.h"

namespace lio {

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::Cpu;
  if (text == "cuda") return Device::Cuda;
  throw InvalidArgument("--device must be 'cpu' or 'cuda', got '" + text + "'");
}

const char* device_name(Device device) { return device == Device::Cpu ? "cpu" : "cuda"; }

std::vector<ArgmaxRow> Backend::greedy_argmax(float*, std::span<const int32_t>,
                                              const std::vector<std::vector<int32_t>>&, std::span<const float>) {
  throw UnsupportedError("this backend has no device argmax");
}

void Backend::from_host(const float* host, int64_t n_floats, float* dst) {
  if (n_floats < 0 || (n_floats > 0 && (host == nullptr || dst == nullptr))) {
    throw InvalidArgument("Backend::from_host: need n_floats >= 0 and non-null pointers");
  }
  if (n_floats > 0) std::memcpy(dst, host, static_cast<size_t>(n_floats) * sizeof(float));
}

void Backend::capture_graph(int64_t, const std::function<float*()>&) {
  throw UnsupportedError("Backend::capture_graph: this backend has no CUDA graphs (" + device_description() + ")");
}

float* Backend::replay_graph(int64_t, const ForwardBatch&) { return nullptr; }

void Backend::reserve(const StepLimits& limits) {
  if (limits.max_tokens < 0 || limits.max_seqs < 0 || limits.max_logits_rows < 0 || limits.max_blocks_per_seq < 0) {
    throw InvalidArgument("Backend::reserve: negative step limits");
  }
  if (limits.kv_cache_groups < 1) throw InvalidArgument("Backend::reserve: kv_cache_groups must be >= 1");
}

int64_t norm_width(WeightKind kind, const ModelConfig& config) {
  return kind == WeightKind::QNorm || kind == WeightKind::KNorm ? config.head_dim : config.d_model;
}

void Backend::geglu(const float*, const float*, float*, int64_t) {
  throw UnsupportedError("this backend has no GeGLU kernel (gemma3's MLP): run it with --device cpu");
}

void Backend::add(float*, const float*, int64_t) {
  throw UnsupportedError("this backend has no residual-add kernel (gemma3's post-norms): run it with --device cpu");
}

void Backend::matmul_many(std::span<const MatmulOut> outs, const float* x, int64_t n_rows) {
  for (const MatmulOut& o : outs) matmul(o.w, x, o.y, n_rows, false);
}

void Backend::rmsnorm_matmul_many(const float* x, WeightRef norm, float* xn, std::span<const MatmulOut> outs,
                                  int64_t n_rows) {
  rmsnorm(x, norm, xn, n_rows);
  matmul_many(outs, xn, n_rows);
}

void Backend::rmsnorm_swiglu(const float* x, WeightRef norm, float* xn, WeightRef w_gate, WeightRef w_up, float* gate,
                             float* up, int64_t n_rows) {
  rmsnorm(x, norm, xn, n_rows);
  const MatmulOut gate_up[] = {{w_gate, gate}, {w_up, up}};
  matmul_many(gate_up, xn, n_rows);
  swiglu(gate, up, gate, n_rows * config().d_ff);
}

void Backend::rope_qk(float* q, float* k, const int32_t* positions, int64_t n_tokens, int64_t n_heads,
                      int64_t n_kv_heads, float theta) {
  rope(q, positions, n_tokens, n_heads, theta);
  rope(k, positions, n_tokens, n_kv_heads, theta);
}

void Backend::all_reduce(Communicator& comm, float* x, int64_t n) {
  if (comm.size() == 1 || n == 0) return;
  const bool device_comm = comm.memory_kind() == CommMemory::Device;
  if (host_memory() != device_comm) {  // CPU + MPI, or GPU + NCCL: the buffer is the comm's
    if (!host_memory()) to_host(x, 0, nullptr);  // waits for the kernels that wrote x
    return comm.all_reduce_sum(x, n);
  }
  std::vector<float> staged(static_cast<size_t>(n));  // GPU + MPI: through host memory
  to_host(x, n, staged.data());
  comm.all_reduce_sum(staged.data(), n);
  from_host(staged.data(), n, x);
}

void Backend::all_gather(Communicator& comm, const float* in, float* out, int64_t n) {
  const bool device_comm = comm.memory_kind() == CommMemory::Device;
  if (host_memory() != device_comm) {
    if (!host_memory()) to_host(in, 0, nullptr);
    return comm.all_gather(in, out, n);
  }
  std::vector<float> mine(static_cast<size_t>(n));
  std::vector<float> all(static_cast<size_t>(n) * static_cast<size_t>(comm.size()));
  to_host(in, n, mine.data());
  comm.all_gather(mine.data(), all.data(), n);
  from_host(all.data(), static_cast<int64_t>(all.size()), out);
}

void Backend::mla_rope(float*, float*, const int32_t*, int64_t) {
  throw UnsupportedError(device_description() + ": this backend has no MLA kernels yet (MLA models run with --device cpu)");
}

void Backend::mla_attention(KvPool&, int64_t, const float*, const float*, float*, const BatchView&) {
  throw UnsupportedError(device_description() + ": this backend has no MLA kernels yet (MLA models run with --device cpu)");
}

// ---- ModelRunner ----------------------------------------------------------------------

ModelRunner::ModelRunner(std::unique_ptr<Backend> backend, const KvPoolConfig& pool_config)
    : backend_(std::move(backend)),
      free_at_load_(backend_->free_memory_bytes()),
      pool_(backend_->make_kv_pool(pool_config)),
      model_(*backend_) {}

ModelRunner::~ModelRunner() {
  try {
    stop_workers();
  } catch (...) {  // a destructor does not throw; a dead job ends through mpirun anyway
  }
}

// ---- chapter 08: the driver and its workers ------------------------------------------------

namespace {

/// The driver's commands to the workers (the first int of each message).
enum Command : int32_t { kForward = 1, kCopyBlocks = 2, kSwapOut = 3, kSwapIn = 4, kStop = 5 };

void append(std::vector<int32_t>& out, const std::vector<int32_t>& v) {
  out.push_back(static_cast<int32_t>(v.size()));
  out.insert(out.end(), v.begin(), v.end());
}

/// A ForwardBatch as ints: block_size, max_blocks_per_seq, n_layers, then each array with its length.
std::vector<int32_t> serialize(const ForwardBatch& b) {
  std::vector<int32_t> out{static_cast<int32_t>(b.block_size), static_cast<int32_t>(b.max_blocks_per_seq),
                           static_cast<int32_t>(b.n_layers)};
  for (const std::vector<int32_t>* v : {&b.token_ids, &b.positions, &b.slot_mapping, &b.query_start_loc, &b.seq_lens,
                                        &b.block_tables, &b.logits_rows}) {
    append(out, *v);
  }
  return out;
}

ForwardBatch deserialize(const std::vector<int32_t>& in) {
  size_t at = 0;
  auto next = [&]() -> int32_t {
    if (at >= in.size()) throw CommError("worker: a forward batch from the driver ends early");
    return in[at++];
  };
  ForwardBatch b(next());
  b.max_blocks_per_seq = next();
  b.n_layers = next();
  for (std::vector<int32_t>* v : {&b.token_ids, &b.positions, &b.slot_mapping, &b.query_start_loc, &b.seq_lens,
                                  &b.block_tables, &b.logits_rows}) {
    const int32_t len = next();
    if (len < 0 || static_cast<size_t>(len) > in.size() - at) throw CommError("worker: a forward batch from the driver is malformed");
    v->assign(in.begin() + static_cast<std::ptrdiff_t>(at), in.begin() + static_cast<std::ptrdiff_t>(at) + len);
    at += static_cast<size_t>(len);
  }
  return b;
}

std::vector<int32_t> serialize(std::span<const BlockCopy> copies) {
  std::vector<int32_t> out;
  for (const BlockCopy& c : copies) out.insert(out.end(), {c.src, c.dst});
  return out;
}

std::vector<BlockCopy> copies_of(const std::vector<int32_t>& in) {
  std::vector<BlockCopy> out;
  for (size_t i = 0; i + 1 < in.size(); i += 2) out.push_back({in[i], in[i + 1]});
  return out;
}

}  // namespace

void ModelRunner::set_parallel(std::unique_ptr<ParallelContext> parallel) {
  if (parallel_) throw InvalidArgument("ModelRunner::set_parallel: the runner already has a grid");
  parallel_ = std::move(parallel);
  model_.set_parallel(parallel_.get());
}

void ModelRunner::broadcast_command(int32_t cmd, const std::vector<int32_t>& payload) {
  if (!parallel_ || parallel_->world->size() == 1 || !parallel_->driver()) return;
  int64_t header[2] = {cmd, static_cast<int64_t>(payload.size())};
  parallel_->world->broadcast(header, sizeof(header), 0);
  if (!payload.empty()) {
    parallel_->world->broadcast(const_cast<int32_t*>(payload.data()),
                                static_cast<int64_t>(payload.size() * sizeof(int32_t)), 0);
  }
}

void ModelRunner::stop_workers() {
  if (workers_stopped_ || !parallel_ || !parallel_->driver() || !mpi_active()) return;
  workers_stopped_ = true;
  broadcast_command(kStop, {});
}

void ModelRunner::serve_worker() {
  if (is_driver()) throw InvalidArgument("ModelRunner::serve_worker: the driver (world rank 0) does not serve");
  Communicator& world = *parallel_->world;
  std::vector<int32_t> payload;
  for (;;) {
    int64_t header[2] = {0, 0};
    world.broadcast(header, sizeof(header), 0);
    if (header[1] < 0 || header[1] > (int64_t{1} << 31)) throw CommError("worker: a message of bad length from the driver");
    payload.resize(static_cast<size_t>(header[1]));
    if (!payload.empty()) world.broadcast(payload.data(), static_cast<int64_t>(payload.size() * sizeof(int32_t)), 0);
    switch (header[0]) {
      case kForward: {
        const ForwardBatch batch = deserialize(payload);
        model_.forward(batch, *pool_, {});
        break;
      }
      case kCopyBlocks: copy_blocks(copies_of(payload)); break;
      case kSwapOut:
      case kSwapIn: {
        const std::vector<BlockCopy> copies = copies_of(payload);
        int64_t host_blocks = 0;
        for (const BlockCopy& c : copies) host_blocks = std::max<int64_t>(host_blocks, 1 + (header[0] == kSwapOut ? c.dst : c.src));
        const auto need = static_cast<size_t>(host_blocks * pool_->block_floats());
        if (worker_swap_.size() < need) worker_swap_.resize(need);
        if (header[0] == kSwapOut) swap_out(copies, worker_swap_.data());
        else swap_in(copies, worker_swap_.data());
        break;
      }
      case kStop: return;
      default: throw CommError("worker: unknown command " + std::to_string(header[0]) + " from the driver");
    }
  }
}

void ModelRunner::copy_blocks(std::span<const BlockCopy> copies) {
  if (!copies.empty()) broadcast_command(kCopyBlocks, serialize(copies));
  for (const BlockCopy& c : copies) pool_->copy_block(c.src, c.dst);
}

void ModelRunner::swap_out(std::span<const BlockCopy> copies, float* host) {
  if (!copies.empty()) broadcast_command(kSwapOut, serialize(copies));
  for (const BlockCopy& c : copies) pool_->copy_block_to_host(c.src, host + c.dst * pool_->block_floats());
}

void ModelRunner::swap_in(std::span<const BlockCopy> copies, const float* host) {
  if (!copies.empty()) broadcast_command(kSwapIn, serialize(copies));
  for (const BlockCopy& c : copies) pool_->copy_block_from_host(host + c.src * pool_->block_floats(), c.dst);
}

void ModelRunner::reserve(const StepLimits& limits) {
  clear_decode_graphs();  // captured with the old buffers
  backend_->reserve(limits);
  limits_ = limits;
}

GraphCapture ModelRunner::capture_decode_graphs(int64_t max_num_seqs, int64_t max_graph_bytes) {
  if (max_num_seqs < 1) {
    throw InvalidArgument("capture_decode_graphs: max_num_seqs must be >= 1, got " + std::to_string(max_num_seqs));
  }
  clear_decode_graphs();
  GraphCapture out;
  const int64_t cap = std::min({max_num_seqs, limits_.max_seqs, limits_.max_tokens, limits_.max_logits_rows});
  if (parallel_ || !backend_->supports_graphs() || cap < 1 || limits_.max_blocks_per_seq < 1 ||
      limits_.kv_cache_groups != pool_->n_groups()) {
    return out;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t free_before = backend_->free_memory_bytes();
  if (max_graph_bytes >= 0) {
    out.budget_bytes = max_graph_bytes;
  } else if (free_at_load_ >= 0 && free_before >= 0) {
    // The pool and the step buffers took free_at_load_ - free_before of the utilization budget.
    const auto budget = static_cast<int64_t>(kGpuMemoryUtilization * static_cast<double>(free_at_load_));
    out.budget_bytes = std::max<int64_t>(budget - (free_at_load_ - free_before), 0);
  }
  const auto mib = [](int64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; };
  int64_t used = 0, last_bucket_bytes = 0;
  for (const int64_t bucket : graph_capture_sizes(cap)) {
    if (out.budget_bytes >= 0 && used + last_bucket_bytes > out.budget_bytes) {
      out.error = "bucket " + std::to_string(bucket) + ": the graphs' memory budget of " + mib(out.budget_bytes) +
                  " holds no more (" + mib(used) + " used, the last bucket took " + mib(last_bucket_bytes) + ")";
      break;
    }
    const ForwardBatch batch =
        graph_capture_batch(bucket, limits_.max_blocks_per_seq, pool_->block_size(), pool_->n_groups());
    const int64_t free_then = backend_->free_memory_bytes();
    try {
      const float* warm = model_.forward_device(batch, *pool_);  // padding rows: no K/V written
      backend_->to_host(warm, 0, nullptr);                      // waits
      backend_->capture_graph(bucket, [&] { return model_.forward_device(batch, *pool_); });
    } catch (const std::exception& e) {
      out.error = "bucket " + std::to_string(bucket) + ": " + e.what();
      break;
    }
    const int64_t free_now = backend_->free_memory_bytes();
    if (free_then >= 0 && free_now >= 0) last_bucket_bytes = std::max<int64_t>(free_then - free_now, 0);
    if (out.budget_bytes >= 0 && used + last_bucket_bytes > out.budget_bytes) {
      backend_->drop_graph(bucket);
      out.error = "bucket " + std::to_string(bucket) + ": took " + mib(last_bucket_bytes) + ", past the graphs' " +
                  "memory budget of " + mib(out.budget_bytes) + " (" + mib(used) + " used before it)";
      break;
    }
    used += last_bucket_bytes;
    out.sizes.push_back(bucket);
  }
  const int64_t free_after = backend_->free_memory_bytes();
  if (free_before >= 0 && free_after >= 0) out.device_bytes = std::max<int64_t>(free_before - free_after, 0);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  graph_sizes_ = out.sizes;
  return out;
}

void ModelRunner::clear_decode_graphs() {
  if (!graph_sizes_.empty()) backend_->clear_graphs();
  graph_sizes_.clear();
}

float* ModelRunner::forward_device(const ForwardBatch& batch) {
  if (!graph_sizes_.empty() && is_graph_decode_batch(batch) && batch.max_blocks_per_seq <= limits_.max_blocks_per_seq &&
      batch.block_size == pool_->block_size()) {
    const int64_t bucket = graph_bucket(graph_sizes_, batch.n_seqs());
    if (bucket > 0) {
      // Model::forward_device's checks, on the real rows (the padding is ours).
      const ModelConfig& c = config();
      batch.validate(c.vocab_size, c.context_length, pool_->n_blocks(), pool_->n_groups());
      const ForwardBatch padded = graph_decode_batch(batch, bucket, limits_.max_blocks_per_seq);
      if (float* logits = backend_->replay_graph(bucket, padded)) {
        ++graph_steps_;
        return logits;  // rows 0 .. n_logits - 1 are the real rows'
      }
    }
  }
  ++eager_steps_;
  return model_.forward_device(batch, *pool_);
}

std::span<const float> ModelRunner::forward(const ForwardBatch& batch) {
  logits_.resize(static_cast<size_t>(batch.n_logits() * config().vocab_size));
  if (!graph_sizes_.empty()) {  // one process (a grid captures none): Model::forward's one-rank path
    const float* device_logits = forward_device(batch);
    backend_->to_host(device_logits, batch.n_logits() * config().vocab_size, logits_.data());
    return logits_;
  }
  if (parallel_ && parallel_->world->size() > 1) {
    // Checked before the workers see it: a bad batch is the caller's error, not the job's end.
    batch.validate(config().vocab_size, config().context_length, pool_->n_blocks());
    broadcast_command(kForward, serialize(batch));
  }
  model_.forward(batch, *pool_, logits_);
  return logits_;
}

std::vector<int32_t> ModelRunner::forward_sample(const ForwardBatch& batch, std::span<const SampleRow> rows) {
  const int64_t n_out = batch.n_logits();
  const int64_t vocab = config().vocab_size;
  if (static_cast<int64_t>(rows.size()) != n_out) {
    throw InvalidArgument("forward_sample: " + std::to_string(rows.size()) + " samplers for " +
                          std::to_string(n_out) + " logits rows");
  }
  std::vector<int32_t> tokens(static_cast<size_t>(n_out), -1);
  // Greedy rows on the device where it pays: only 12 bytes per row come back.
  std::vector<int32_t> greedy;
  std::vector<std::vector<int32_t>> penalty_tokens;
  std::vector<float> penalties;
  if (backend_->has_device_argmax() && !parallel_) {  // over ranks the logits are gathered on the host
    for (int64_t i = 0; i < n_out; ++i) {
      const SamplerConfig& sc = rows[static_cast<size_t>(i)].sampler->config();
      // The device path knows the repetition penalty only, and returns no logits row.
      if (sc.temperature != 0.0f || sc.presence_penalty != 0.0f || sc.frequency_penalty != 0.0f || sc.logprobs >= 0)
        continue;
      // Checked on the host before anything runs: an id outside the vocabulary would index
      // past the logits on the device.
      penalty_tokens.push_back(sc.repeat_penalty == 1.0f
                                   ? std::vector<int32_t>{}
                                   : repeat_penalty_tokens(rows[static_cast<size_t>(i)].history,
                                                           sc.repeat_last_n, vocab));
      penalties.push_back(sc.repeat_penalty);
      greedy.push_back(static_cast<int32_t>(i));
    }
  }
  if (greedy.empty()) {
    std::span<const float> logits = forward(batch);
    std::vector<float> row(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < n_out; ++i) {
      std::copy_n(logits.begin() + i * vocab, vocab, row.begin());  // the penalty writes into it
      const SampleRow& r = rows[static_cast<size_t>(i)];
      tokens[static_cast<size_t>(i)] = r.sampler->sample(row, r.history, r.output);
    }
    return tokens;
  }
  float* device_logits = forward_device(batch);
  const std::vector<ArgmaxRow> found = backend_->greedy_argmax(device_logits, greedy, penalty_tokens, penalties);
  std::vector<uint8_t> done(static_cast<size_t>(n_out), 0);
  for (size_t g = 0; g < greedy.size(); ++g) {
    const ArgmaxRow& r = found[g];
    if (r.n_invalid == 0 && r.n_masked < vocab) {
      tokens[static_cast<size_t>(greedy[g])] = r.index;
      done[static_cast<size_t>(greedy[g])] = 1;
    }
  }
  if (std::all_of(done.begin(), done.end(), [](uint8_t x) { return x != 0; })) return tokens;
  // Other rows (sampled, or greedy rows the sampler must reject): the logits come back. The
  // greedy rows already carry their penalty, so their sampler gets an empty history.
  logits_.resize(static_cast<size_t>(n_out * vocab));
  backend_->to_host(device_logits, n_out * vocab, logits_.data());
  std::vector<float> row(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < n_out; ++i) {
    if (done[static_cast<size_t>(i)]) continue;
    const bool was_greedy = std::find(greedy.begin(), greedy.end(), i) != greedy.end();
    std::copy_n(logits_.begin() + i * vocab, vocab, row.begin());
    const SampleRow& r = rows[static_cast<size_t>(i)];
    tokens[static_cast<size_t>(i)] = was_greedy ? r.sampler->sample(row, {}) : r.sampler->sample(row, r.history, r.output);
  }
  return tokens;
}

// ---- SoloSequence ---------------------------------------------------------------------

SoloSequence::SoloSequence(ModelRunner& runner, int64_t capacity_tokens) : runner_(runner), capacity_(capacity_tokens) {
  const ModelConfig& c = runner.config();
  if (capacity_tokens < 1 || capacity_tokens > c.context_length) {
    throw InvalidArgument("KV cache capacity must be in [1, " + std::to_string(c.context_length) + "] tokens, got " +
                          std::to_string(capacity_tokens));
  }
  const KvPool& pool = runner.kv_pool();
  const int64_t n_blocks = (capacity_tokens + pool.block_size() - 1) / pool.block_size();
  if (n_blocks * pool.n_groups() > pool.n_blocks()) {  // every KV cache group its own blocks
    throw InvalidArgument("a sequence of " + std::to_string(capacity_tokens) + " tokens needs " +
                          std::to_string(n_blocks * pool.n_groups()) + " KV blocks of " +
                          std::to_string(pool.block_size()) + " tokens; the pool has " +
                          std::to_string(pool.n_blocks()) + " (raise --kv-cache-mib)");
  }
  for (int64_t b = 0; b < n_blocks; ++b) block_table_.push_back(static_cast<int32_t>(b));
  for (int64_t g = 1; g < pool.n_groups(); ++g) {
    group_tables_.emplace_back();
    for (int64_t b = 0; b < n_blocks; ++b) group_tables_.back().push_back(static_cast<int32_t>(g * n_blocks + b));
  }
}

ForwardBatch SoloSequence::batch(std::span<const int32_t> tokens, bool all_logits) const {
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw InvalidArgument("forward: no tokens");
  if (n_tokens_ + n > capacity_) {
    throw InvalidArgument("forward: " + std::to_string(n_tokens_ + n) + " tokens do not fit in a KV cache of " +
                          std::to_string(capacity_) + " tokens");
  }
  ForwardBatch b(runner_.kv_pool().block_size());
  b.add_sequence(tokens, n_tokens_, block_table_, all_logits ? n : 1, true, group_tables_);
  return b;
}

std::span<const float> SoloSequence::forward(std::span<const int32_t> tokens, bool all_logits) {
  const ForwardBatch b = batch(tokens, all_logits);
  std::span<const float> logits = runner_.forward(b);
  n_tokens_ += b.n_tokens();
  return logits;
}

int32_t SoloSequence::forward_sample(std::span<const int32_t> tokens, Sampler& sampler,
                                     std::span<const int32_t> history) {
  const ForwardBatch b = batch(tokens, false);
  const SampleRow row{&sampler, history};
  const int32_t next = runner_.forward_sample(b, std::span<const SampleRow>(&row, 1)).front();
  n_tokens_ += b.n_tokens();
  return next;
}

// ---- construction ---------------------------------------------------------------------

int64_t default_kv_cache_mib(const Backend& backend) {
  constexpr int64_t kMiB = 1 << 20;
  const int64_t block = kv_block_bytes(backend.config(), 16);
  int64_t mib;
  const int64_t free_bytes = backend.free_memory_bytes();
  if (free_bytes >= 0) {
    mib = free_bytes / 10 * 8 / kMiB;
  } else {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    const int64_t phys = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 4LL << 30;
    mib = std::min<int64_t>(phys / 4 / kMiB, 1024);
  }
  return std::max(mib, (block + kMiB - 1) / kMiB);
}

}  // namespace lio
