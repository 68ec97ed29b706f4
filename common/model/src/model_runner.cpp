// model_runner.cpp — ModelRunner (lio/model_runner.h): the step buffers, the decode CUDA
// graphs, the forward pass and device-side greedy sampling, and the default KV budget. The
// Backend defaults are in backend.cpp, the driver/worker messages in runner_rpc.cpp, the
// one-sequence helper in solo_sequence.cpp.
#include "lio/model_runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "lio/cuda_graph_plan.h"
#include "lio/error.h"
#include "runner_rpc.h"

namespace lio {

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

void ModelRunner::check_hidden_request(const ForwardBatch& batch) const {
  if (batch.return_hidden && parallel_ && parallel_->plan.pp_size > 1) {
    throw UnsupportedError("forward: hidden states (return_hidden) under pipeline parallelism are not supported: the "
                           "driver is not the last stage (run the drafter with --pipeline-parallel-size 1)");
  }
}

void ModelRunner::keep_hidden(const ForwardBatch& batch) {
  hidden_.clear();
  if (!batch.return_hidden || batch.n_logits() == 0) return;
  const float* rows = model_.hidden_device();
  LIO_CHECK(rows != nullptr, "return_hidden: the pass kept no hidden states");
  hidden_.resize(static_cast<size_t>(batch.n_logits() * config().d_model));
  backend_->to_host(rows, static_cast<int64_t>(hidden_.size()), hidden_.data());
}

void ModelRunner::embed_rows(std::span<const int32_t> ids, float* out) {
  if (parallel_ && parallel_->world->size() > 1) {
    throw UnsupportedError("embed_rows: the token embedding is split over " + std::to_string(parallel_->world->size()) +
                           " processes (run the EAGLE drafter on one process)");
  }
  const ModelConfig& c = config();
  for (const int32_t id : ids) {
    if (id < 0 || id >= c.vocab_size) {
      throw InvalidArgument("embed_rows: token id " + std::to_string(id) + " outside [0, " + std::to_string(c.vocab_size) + ")");
    }
  }
  const auto n = static_cast<int64_t>(ids.size());
  if (n == 0) return;
  // The ids must be readable by the backend: a device backend takes them from device memory.
  float* rows = backend_->scratch(Scratch::X, n * c.d_model);
  if (backend_->host_memory()) {
    backend_->embedding(ids.data(), n, rows);
  } else {
    static_assert(sizeof(int32_t) == sizeof(float));
    float* dev_ids = backend_->scratch(Scratch::Rows, n);
    backend_->from_host(reinterpret_cast<const float*>(ids.data()), n, dev_ids);
    backend_->embedding(reinterpret_cast<const int32_t*>(dev_ids), n, rows);
  }
  backend_->to_host(rows, n * c.d_model, out);
  if (c.embedding_scale != 1.0f)
    for (int64_t i = 0; i < n * c.d_model; ++i) out[i] /= c.embedding_scale;
}

std::span<const float> ModelRunner::forward(const ForwardBatch& batch) {
  check_hidden_request(batch);
  logits_.resize(static_cast<size_t>(batch.n_logits() * config().vocab_size));
  if (!graph_sizes_.empty()) {  // one process (a grid captures none): Model::forward's one-rank path
    const float* device_logits = forward_device(batch);
    backend_->to_host(device_logits, batch.n_logits() * config().vocab_size, logits_.data());
    keep_hidden(batch);
    return logits_;
  }
  if (parallel_ && parallel_->world->size() > 1) {
    // Checked before the workers see it: a bad batch is the caller's error, not the job's end.
    batch.validate(config().vocab_size, config().context_length, pool_->n_blocks(), pool_->n_groups());
    broadcast_command(rpc::kForward, rpc::serialize(batch));
  }
  model_.forward(batch, *pool_, logits_);
  keep_hidden(batch);
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
      // Nor a structured output's token mask (lio/grammar.h): those rows sample on the host.
      if (sc.temperature != 0.0f || sc.presence_penalty != 0.0f || sc.frequency_penalty != 0.0f || sc.logprobs >= 0 ||
          rows[static_cast<size_t>(i)].sampler->has_token_mask())
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
  check_hidden_request(batch);
  float* device_logits = forward_device(batch);
  keep_hidden(batch);
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
