// cuda_backend.cpp — lio::cuda::CudaBackend: the Backend operators on kernels/cuda.
//
// The layer loop is Model's (model.cpp); the backend only maps each operator onto its kernel
// launch (cuda_backend_ops.cpp), owns the device memory those launches use (weights:
// cuda_backend_weights.cpp), and moves data across PCIe through pinned buffers. This file holds
// the device and stream, the batch upload, scratch, to_host and profiling; the shared state is
// CudaBackend::Impl (cuda_backend_impl.h). See lio/cuda_backend.h for the contract,
// docs/cuda_backend.md for the walkthrough.
#include "lio/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "cublas_handle.h"
#include "cuda_backend_impl.h"
#include "cuda_check.h"
#include "cuda_device_memory.h"
#include "cuda_runtime_info.h"
#include "device_kv_pool.h"
#include "flash_attention_cuda.h"
#include "gemv_batched.h"
#include "lio/error.h"
#include "mla.h"

namespace lio::cuda {

// ---- state ------------------------------------------------------------------------------------

CudaBackend::Impl::~Impl() {
  // Let queued work finish before anything it uses goes away; errors are dropped (a
  // destructor must not throw; a broken context reports itself at the next checked call).
  cudaSetDevice(device);  // the destroying thread may have another current device
  if (stream != nullptr) cudaStreamSynchronize(stream);
  destroy_graphs();
  cublas.reset();  // bound to `stream`: destroy it first
  for (auto& [start, stop] : events) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  if (stream != nullptr) cudaStreamDestroy(stream);
}

void CudaBackend::Impl::destroy_graphs() {
  for (auto& [key, g] : graphs) {
    if (g.exec != nullptr) cudaGraphExecDestroy(g.exec);
  }
  graphs.clear();
}

void CudaBackend::Impl::wait() {
  CUDA_CHECK(cudaStreamSynchronize(stream));
  stream_idle = true;
  for (size_t i = 0; i < event_ops.size(); ++i) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events[i].first, events[i].second));
    OpTime& t = op_times[event_ops[i]];
    t.op = event_ops[i];
    t.total_ms += ms;
    t.calls += 1;
  }
  event_ops.clear();
}

// ---- construction ---------------------------------------------------------------------------

CudaBackend::CudaBackend(const ModelConfig& config, const Weights& weights, ActivationPrecision activations,
                         AttentionBackend attention, int device)
    : impl_(std::make_unique<Impl>(config)) {
  impl_->activations = activations;
  impl_->attention_backend = attention;
  impl_->device = device;
  // Shapes the kernels cannot run are refused here, before any GPU work, not at the first
  // forward pass.
  if (!config.is_mla() && (config.head_dim < 1 || config.head_dim > kFlashAttentionMaxHeadDim)) {
    throw UnsupportedError("--device cuda: the attention kernels take head_dim up to " +
                           std::to_string(kFlashAttentionMaxHeadDim) + "; this model has " +
                           std::to_string(config.head_dim) + "; run it with --device cpu");
  }
  if (config.attn_softcap > 0.0f) {  // gemma2: the CUDA attention kernels do not cap their scores
    throw UnsupportedError("--device cuda: attention logit soft-capping (" + config.architecture + ", cap " +
                           std::to_string(config.attn_softcap) +
                           ") is not in the CUDA attention kernels; run it with --device cpu");
  }
  if (config.is_mla()) {
    const bool fits = config.kv_lora_rank <= kMlaMaxLatentDim && config.qk_nope_head_dim <= kMlaMaxLatentDim &&
                      config.v_head_dim <= kMlaMaxLatentDim && config.qk_rope_head_dim <= kMlaMaxRopeDim;
    if (!fits) {
      throw UnsupportedError("--device cuda: the MLA kernels take kv_lora_rank, qk_nope_head_dim and v_head_dim up to " +
                             std::to_string(kMlaMaxLatentDim) + " and qk_rope_head_dim up to " +
                             std::to_string(kMlaMaxRopeDim) + "; this model has " +
                             std::to_string(config.kv_lora_rank) + ", " + std::to_string(config.qk_nope_head_dim) +
                             ", " + std::to_string(config.v_head_dim) + " and " +
                             std::to_string(config.qk_rope_head_dim) + "; run it with --device cpu");
    }
    for (const LayerWeights& L : weights.layers) {
      if (L.matrix(WeightKind::WkB).dtype != DType::F32 ||
          L.matrix(WeightKind::WvB).dtype != DType::F32) {
        throw UnsupportedError("--device cuda: MLA up-projections (W_UK, W_UV) must be f32");
      }
    }
  }
  if (cuda_device_count() == 0) {
    throw UnsupportedError(
        "--device cuda: no CUDA device is available (no NVIDIA GPU or driver is "
        "visible to this process); run with --device cpu");
  }
  if (device < 0 || device >= cuda_device_count()) {
    throw UnsupportedError("--device cuda: GPU " + std::to_string(device) + " does not exist (this process sees " +
                           std::to_string(cuda_device_count()) + ")");
  }
  CUDA_CHECK(cudaSetDevice(device));
  if (!cuda_available()) {
    throw UnsupportedError(
        "--device cuda: GPU " + std::to_string(device) +
        " cannot run this build's kernels (built for its CMAKE_CUDA_ARCHITECTURES; reconfigure with "
        "-DCMAKE_CUDA_ARCHITECTURES=<yours>)");
  }
  Impl& m = *impl_;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  char mem[32];
  std::snprintf(mem, sizeof mem, "%.1f GiB", static_cast<double>(prop.totalGlobalMem) / (1u << 30));
  const char* act = activations == ActivationPrecision::Int8           ? ", int8 activations per 32 block"
                    : activations == ActivationPrecision::Int8PerToken ? ", int8 activations per token"
                                                                       : "";
  m.description = "cuda:" + std::to_string(device) + " (" + prop.name + ", sm_" + std::to_string(prop.major) +
                  std::to_string(prop.minor) + ", " + mem + act + ")";
  CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  m.cublas = std::make_unique<CublasHandle>();

  m.upload_weights(weights);
}

CudaBackend::~CudaBackend() = default;

const ModelConfig& CudaBackend::config() const { return impl_->config; }

std::string CudaBackend::device_description() const { return impl_->description; }

int64_t CudaBackend::weight_bytes() const { return impl_->weight_bytes; }

int64_t CudaBackend::free_memory_bytes() const {
  CUDA_CHECK(cudaSetDevice(impl_->device));
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<int64_t>(free_bytes);
}

std::unique_ptr<KvPool> CudaBackend::make_kv_pool(const KvPoolConfig& config) {
  if (config.dtype != KvCacheDType::F32 && impl_->config.is_mla()) {
    throw UnsupportedError(std::string("--kv-cache-dtype ") + kv_cache_dtype_name(config.dtype) +
                           ": an MLA model's latent cache is f32 only");
  }
  return impl_->guarded([&]() -> std::unique_ptr<KvPool> {
    return std::make_unique<DeviceKvPool>(impl_->config, config, impl_->device, impl_->stream);
  });
}

void CudaBackend::reserve(const StepLimits& limits) {
  Backend::reserve(limits);  // the checks
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  const int64_t n = limits.max_tokens;
  const int64_t seqs = limits.max_seqs;
  const int64_t rows = std::min(limits.max_logits_rows, n);
  const int64_t d = c.d_model;
  m.guarded([&] {
    // Model::forward_device's activations, as it asks for them.
    const std::pair<Scratch, int64_t> sizes[] = {
        {Scratch::X, n * d},
        {Scratch::Xn, n * d},
        {Scratch::Q, n * c.q_dim()},
        {Scratch::K, n * (c.is_mla() ? 2 * c.kv_dim() : c.kv_dim())},
        {Scratch::V, n * c.kv_dim()},
        {Scratch::Attn, n * c.attn_out_dim()},
        {Scratch::Gate, n * c.d_ff},
        {Scratch::Up, n * c.d_ff},
        {Scratch::Rows, rows * d},
        {Scratch::Logits, rows * c.vocab_size}};
    for (const auto& [id, floats] : sizes) m.grow(m.scratch[static_cast<size_t>(id)], floats);
    // upload(): token ids, positions, slots, query_start_loc, seq_lens, block tables, logits rows
    // (and MLA's context offsets), then each further KV cache group's slots and block tables.
    // A batch verifying draft trees adds their lengths, one int of padding and the masks (2 ints each).
    const int64_t index_ints = 3 * n + (seqs + 1) + seqs + seqs * limits.max_blocks_per_seq + rows +
                               (c.is_mla() ? seqs + 1 : 0) +
                               (limits.kv_cache_groups - 1) * (n + seqs * limits.max_blocks_per_seq) +
                               seqs + 1 + 2 * n;
    m.grow(m.batch_h, index_ints);
    m.grow(m.batch_d, index_ints);
    if (m.activations != ActivationPrecision::F32) {  // the widest x a matmul rounds
      const int64_t cols = std::max({d, c.d_ff, c.attn_out_dim(), c.q_dim()});
      m.grow(m.act_codes, n * cols);
      m.grow(m.act_scales, n * (cols / 32));
    }
    if (n > kGemvBatchedMaxRows && m.max_dequant_floats > 0) m.grow(m.dequant_scratch, m.max_dequant_floats);
    if (m.attention_backend == AttentionBackend::Flash && !c.is_mla()) {
      configure_flash_attention(m.flash_workspace);
      // The largest split partials of any decode batch (query_len <= kFlashDecodeMaxQueryLen) of
      // up to `seqs` sequences and n rows: fewer sequences split more, more sequences have rows.
      int64_t floats = 0;
      for (int64_t q = 1; q <= kFlashDecodeMaxQueryLen; ++q) {
        for (int64_t s = 1; s <= seqs && s <= n; ++s) {
          const int64_t splits =
              flash_attention_splits(q, s, c.n_heads, c.n_kv_heads, c.head_dim, m.flash_workspace.sm_count);
          floats = std::max(floats, flash_attention_workspace_floats(splits, std::min(q * s, n), c.n_heads, c.head_dim));
        }
      }
      m.grow(m.flash_workspace.partials, floats);
    }
    m.grow_outside_graphs(m.argmax_h, rows);
    m.grow_outside_graphs(m.argmax_d, rows);
    m.grow_outside_graphs(m.to_host_h, rows * c.vocab_size);
    // Greedy sampling's penalized ids (every row's distinct context tokens): reserved for
    // kReservedPenaltyIdsPerRow a row, so the first request with a repetition penalty does not
    // grow them inside a step (issue 60, defect 4); a longer list grows them, outside any graph.
    m.grow_outside_graphs(m.penalty_tokens_h, rows * kReservedPenaltyIdsPerRow);
    m.grow_outside_graphs(m.penalty_tokens_d, rows * kReservedPenaltyIdsPerRow);
  });
}

// ---- one forward pass -----------------------------------------------------------------------

namespace {

/// upload()'s index arrays of `batch` in their staging order: the fixed arrays (token ids,
/// positions, slots, query_start_loc, seq_lens, block tables, logits rows, MLA's context offsets
/// `ctx_first`), then each further KV cache group's slot mapping and block tables, then, for a
/// batch with draft trees, tree_lens, `tree_pad` (0 or 1 int, so the masks start 8-byte
/// aligned) and `tree_words` (the uint64 tree_masks as int32 pairs).
std::vector<const std::vector<int32_t>*> batch_arrays(const ForwardBatch& batch, const std::vector<int32_t>& ctx_first,
                                                      std::vector<int32_t>& tree_pad, std::vector<int32_t>& tree_words) {
  std::vector<const std::vector<int32_t>*> arrays = {
      &batch.token_ids, &batch.positions,    &batch.slot_mapping, &batch.query_start_loc,
      &batch.seq_lens,  &batch.block_tables, &batch.logits_rows,  &ctx_first};
  for (size_t g = 0; g < batch.group_slot_mapping.size(); ++g) {
    arrays.push_back(&batch.group_slot_mapping[g]);
    arrays.push_back(&batch.group_block_tables[g]);
  }
  if (!batch.tree_lens.empty()) {
    size_t ints = batch.tree_lens.size();
    for (const auto* a : arrays) ints += a->size();
    tree_pad.assign(ints % 2, 0);
    tree_words.resize(2 * batch.tree_masks.size());
    std::memcpy(tree_words.data(), batch.tree_masks.data(), batch.tree_masks.size() * sizeof(uint64_t));
    arrays.push_back(&batch.tree_lens);
    arrays.push_back(&tree_pad);
    arrays.push_back(&tree_words);
  }
  return arrays;
}

std::vector<int64_t> array_sizes(const std::vector<const std::vector<int32_t>*>& arrays) {
  std::vector<int64_t> sizes;
  for (const auto* a : arrays) sizes.push_back(static_cast<int64_t>(a->size()));
  return sizes;
}

}  // namespace

std::vector<const int32_t*> CudaBackend::Impl::stage(const std::vector<const std::vector<int32_t>*>& arrays,
                                                     int64_t* total) {
  *total = 0;
  for (const auto* a : arrays) *total += static_cast<int64_t>(a->size());
  // The previous pass's copy must be done reading the staging array before it is rewritten.
  // Every pass ends in a wait (to_host, greedy_argmax, or a throwing op's drain), so it is:
  // no event to wait on inside a step. A caller that skipped the wait costs one sync here.
  if (!stream_idle) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    stream_idle = true;
    ++upload_syncs;
  }
  grow(batch_h, *total);
  grow(batch_d, *total);
  std::vector<const int32_t*> device(arrays.size());
  int64_t offset = 0;
  for (size_t i = 0; i < arrays.size(); ++i) {
    const auto n = static_cast<int64_t>(arrays[i]->size());
    if (n > 0) std::memcpy(batch_h.data() + offset, arrays[i]->data(), static_cast<size_t>(n) * sizeof(int32_t));
    device[i] = batch_d.data() + offset;
    offset += n;
  }
  return device;
}

BatchView CudaBackend::upload(const ForwardBatch& batch) {
  Impl& m = *impl_;
  const int64_t n_tokens = batch.n_tokens(), n_seqs = batch.n_seqs();
  const auto size = [](const std::vector<int32_t>& v) { return static_cast<int64_t>(v.size()); };
  if (size(batch.positions) != n_tokens || size(batch.slot_mapping) != n_tokens ||
      size(batch.query_start_loc) != n_seqs + 1 ||
      size(batch.block_tables) != n_seqs * batch.max_blocks_per_seq) {
    throw InvalidArgument("CudaBackend::upload: inconsistent batch: " + std::to_string(n_tokens) +
                          " tokens, " + std::to_string(size(batch.positions)) + " positions, " +
                          std::to_string(size(batch.slot_mapping)) + " slots, " +
                          std::to_string(size(batch.query_start_loc)) + " query_start_loc for " +
                          std::to_string(n_seqs) + " sequences, " +
                          std::to_string(size(batch.block_tables)) + " block table entries for " +
                          std::to_string(batch.max_blocks_per_seq) + " per sequence");
  }
  // MLA's naive path gathers every sequence's cached latents into consecutive rows: their
  // offsets, computed here once for all layers.
  std::vector<int32_t> ctx_first;
  if (m.config.is_mla()) {
    ctx_first.assign(1, 0);
    for (const int32_t len : batch.seq_lens) ctx_first.push_back(ctx_first.back() + len);
  }
  return m.guarded([&] {
    std::vector<int32_t> tree_pad, tree_words;
    const std::vector<const std::vector<int32_t>*> arrays = batch_arrays(batch, ctx_first, tree_pad, tree_words);
    if (m.capturing) m.captured_layout = array_sizes(arrays);
    int64_t total = 0;
    const std::vector<const int32_t*> device = m.stage(arrays, &total);
    m.op("upload (batch indices)", [&] {
      if (total > 0) {
        CUDA_CHECK(cudaMemcpyAsync(m.batch_d.data(), m.batch_h.data(),
                                   static_cast<size_t>(total) * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, m.stream));
      }
    });
    m.stream_idle = false;
    m.n_logits = batch.n_logits();
    m.mla_ctx_first = device[7];
    m.mla_ctx_total = ctx_first.empty() ? 0 : ctx_first.back();
    BatchView view{&batch,    device[0], device[1], device[2], device[3],
                   device[4], device[5], device[6], {},        {}};
    const size_t groups_end = 8 + 2 * batch.group_slot_mapping.size();
    for (size_t i = 8; i < groups_end; i += 2) {
      view.group_slot_mapping.push_back(device[i]);
      view.group_block_tables.push_back(device[i + 1]);
    }
    if (!batch.tree_lens.empty()) {  // staged 8-byte aligned (batch_d is cudaMalloc'd: 256-byte aligned)
      view.tree_lens = device[groups_end];
      view.tree_masks = reinterpret_cast<const uint64_t*>(device[groups_end + 2]);
    }
    return view;
  });
}

float* CudaBackend::scratch(Scratch id, int64_t n_floats) {
  Impl& m = *impl_;
  const auto index = static_cast<size_t>(id);
  if (index >= m.scratch.size() || n_floats < 0) {
    throw InvalidArgument("CudaBackend::scratch: bad id " + std::to_string(index) + " or size " +
                          std::to_string(n_floats));
  }
  return m.guarded([&] {
    m.grow(m.scratch[index], n_floats);
    return m.scratch[index].data();
  });
}
void CudaBackend::to_host(const float* src, int64_t n_floats, float* host) {
  Impl& m = *impl_;
  if (n_floats < 0 || (n_floats > 0 && (src == nullptr || host == nullptr))) {
    throw InvalidArgument("CudaBackend::to_host: need n_floats >= 0 and non-null pointers, got " +
                          std::to_string(n_floats));
  }
  m.guarded([&] {
    m.grow_outside_graphs(m.to_host_h, n_floats);  // the last wait finished every copy from the old array
    m.op("to_host", [&] {
      if (n_floats > 0) {
        CUDA_CHECK(cudaMemcpyAsync(m.to_host_h.data(), src,
                                   static_cast<size_t>(n_floats) * sizeof(float),
                                   cudaMemcpyDeviceToHost, m.stream));
      }
    });
    m.wait();
    if (n_floats > 0)
      std::memcpy(host, m.to_host_h.data(), static_cast<size_t>(n_floats) * sizeof(float));
  });
}

void CudaBackend::from_host(const float* host, int64_t n_floats, float* dst) {
  Impl& m = *impl_;
  if (n_floats < 0 || (n_floats > 0 && (host == nullptr || dst == nullptr))) {
    throw InvalidArgument("CudaBackend::from_host: need n_floats >= 0 and non-null pointers, got " +
                          std::to_string(n_floats));
  }
  if (n_floats == 0) return;
  m.guarded([&] {
    m.op("from_host", [&] {
      CUDA_CHECK(cudaMemcpyAsync(dst, host, static_cast<size_t>(n_floats) * sizeof(float), cudaMemcpyHostToDevice,
                                 m.stream));
    });
    m.wait();  // the caller may reuse `host` on return
  });
}

// ---- profiling --------------------------------------------------------------------------------

void CudaBackend::set_profiling(bool on) { impl_->profiling = on; }

std::vector<OpTime> CudaBackend::op_times() const {
  std::vector<OpTime> out;
  for (const auto& [name, t] : impl_->op_times) out.push_back(t);
  std::sort(out.begin(), out.end(),
            [](const OpTime& a, const OpTime& b) { return a.total_ms > b.total_ms; });
  return out;
}

void CudaBackend::clear_op_times() { impl_->op_times.clear(); }

int64_t CudaBackend::buffer_grows() const { return impl_->buffer_grows + impl_->flash_workspace.grows; }

int64_t CudaBackend::graph_buffer_grows() const { return impl_->graph_buffer_grows(); }

int64_t CudaBackend::upload_syncs() const { return impl_->upload_syncs; }

// ---- graph capture (what a CUDA graph of a step would hold) ------------------------------------

bool CudaBackend::supports_graphs() const {
  return !impl_->config.is_mla() && impl_->attention_backend != AttentionBackend::Naive;
}

CudaBackend::Impl::GraphPtr CudaBackend::Impl::capture(const char* op, const std::function<void()>& body,
                                                        cudaStreamCaptureMode mode) {
  if (profiling) throw InvalidArgument(std::string("CudaBackend::") + op + ": turn profiling off first");
  CUDA_CHECK(cudaSetDevice(device));
  wait();  // the pass starts as every pass does: after the last one's wait
  CUDA_CHECK(cudaStreamBeginCapture(stream, mode));
  std::exception_ptr failure;
  try {
    body();
  } catch (...) {
    failure = std::current_exception();
  }
  cudaGraph_t raw = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &raw);
  GraphPtr graph(raw, &cudaGraphDestroy);
  stream_idle = true;  // a capture queues nothing for execution
  (void)cudaGetLastError();
  if (failure) std::rethrow_exception(failure);
  CUDA_CHECK(ended);  // e.g. cudaErrorStreamCaptureInvalidated: the body allocated or synchronized
  return graph;
}

void CudaBackend::capture_graph(int64_t key, const std::function<float*()>& forward) {
  Impl& m = *impl_;
  if (!supports_graphs()) {
    throw UnsupportedError("CudaBackend::capture_graph: no CUDA graphs for " +
                           std::string(m.config.is_mla() ? "an MLA model" : "the naive attention kernel"));
  }
  const int64_t grows_before = m.graph_buffer_grows();
  m.captured_layout.clear();
  float* logits = nullptr;
  Impl::GraphPtr graph(nullptr, &cudaGraphDestroy);
  m.capturing = true;
  try {
    // Thread-local mode: another thread's CUDA calls (the server's) cannot invalidate the capture.
    graph = m.capture("capture_graph", [&] { logits = forward(); }, cudaStreamCaptureModeThreadLocal);
  } catch (...) {
    m.capturing = false;
    throw;
  }
  m.capturing = false;
  if (m.graph_buffer_grows() != grows_before || m.captured_layout.empty()) {
    throw InvalidArgument(m.captured_layout.empty()
                              ? "CudaBackend::capture_graph: the pass uploaded no batch"
                              : "CudaBackend::capture_graph: a per-step buffer grew during the capture (call reserve() "
                                "with limits that hold the batch first)");
  }
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph.get(), 0));
  auto it = m.graphs.find(key);
  if (it != m.graphs.end()) {
    cudaGraphExecDestroy(it->second.exec);
    m.graphs.erase(it);
  }
  m.graphs[key] = Impl::Graph{exec, logits, m.captured_layout, m.graph_buffer_grows()};
}

float* CudaBackend::replay_graph(int64_t key, const ForwardBatch& batch) {
  Impl& m = *impl_;
  const auto it = m.graphs.find(key);
  if (it == m.graphs.end() || m.profiling) return nullptr;
  const Impl::Graph& g = it->second;
  if (g.buffer_grows != m.graph_buffer_grows()) return nullptr;  // a buffer the graph uses may have moved
  const std::vector<int32_t> no_ctx;  // MLA's offsets: MLA models have no graphs
  std::vector<int32_t> tree_pad, tree_words;  // a tree batch's extra arrays: never a captured layout
  const std::vector<const std::vector<int32_t>*> arrays = batch_arrays(batch, no_ctx, tree_pad, tree_words);
  if (array_sizes(arrays) != g.layout) return nullptr;
  return m.guarded([&] {
    int64_t total = 0;
    m.stage(arrays, &total);  // the staging array the graph's memcpy node reads
    CUDA_CHECK(cudaGraphLaunch(g.exec, m.stream));
    m.stream_idle = false;
    m.n_logits = batch.n_logits();
    ++m.graph_replays;
    return g.logits;
  });
}

void CudaBackend::clear_graphs() {
  Impl& m = *impl_;
  cudaSetDevice(m.device);
  m.wait();
  m.destroy_graphs();
}

void CudaBackend::drop_graph(int64_t key) {
  Impl& m = *impl_;
  const auto it = m.graphs.find(key);
  if (it == m.graphs.end()) return;
  cudaSetDevice(m.device);
  m.wait();
  cudaGraphExecDestroy(it->second.exec);
  m.graphs.erase(it);
}

int64_t CudaBackend::graph_replays() const { return impl_->graph_replays; }

CapturedStep CudaBackend::capture_step(const std::function<void()>& body) {
  Impl& m = *impl_;
  const Impl::GraphPtr graph = m.capture("capture_step", body, cudaStreamCaptureModeGlobal);
  CapturedStep out;
  if (graph == nullptr) return out;
  size_t n_nodes = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph.get(), nullptr, &n_nodes));
  std::vector<cudaGraphNode_t> nodes(n_nodes);
  if (n_nodes > 0) CUDA_CHECK(cudaGraphGetNodes(graph.get(), nodes.data(), &n_nodes));
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type == cudaGraphNodeTypeKernel) {
      ++out.kernels;
    } else if (type == cudaGraphNodeTypeMemcpy) {
      ++out.copies;
    } else {
      ++out.other;
    }
  }
  return out;
}

}  // namespace lio::cuda
