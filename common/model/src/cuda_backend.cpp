// cuda_backend.cpp — lio::cuda::CudaBackend: the Backend operators on kernels/cuda.
//
// The layer loop is Model's (model.cpp); this file only maps each operator onto its kernel
// launch, owns the device memory those launches use, and moves data across PCIe through pinned
// buffers. See lio/cuda_backend.h for the contract, docs/cuda_backend.md for the walkthrough.
#include "lio/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <string>
#include <utility>

#include "cublas_handle.h"
#include "cuda_check.h"
#include "cuda_device_memory.h"
#include "cuda_ops.h"
#include "cuda_runtime_info.h"
#include "device_buffer.h"
#include "lio/error.h"

namespace lio::cuda {

namespace {

/// Device copies of one decoder block's weights.
struct DeviceLayer {
  const float* attn_norm = nullptr;  // (d_model)
  DeviceMatrix wq, wk, wv, wo;
  DeviceMatrix wkv_a, wk_b, wv_b;  // MLA (chapter 02): latent down-projection, W_UK, W_UV
  const float* ffn_norm = nullptr;  // (d_model)
  DeviceMatrix w_gate, w_up, w_down;
};

/// The op name profiling files a matmul of n rows under (the kernel cuda::matmul picks).
const char* matmul_op_name(int64_t n) {
  if (n == 1) return "gemv";
  if (n <= kGemvBatchedMaxRows) return "gemv_batched";
  return "gemm (dequantize + cuBLAS)";
}

}  // namespace

// ---- state ------------------------------------------------------------------------------------

struct CudaBackend::Impl {
  ModelConfig config;
  std::string description;
  cudaStream_t stream = nullptr;
  std::unique_ptr<CublasHandle> cublas;

  // ---- weights
  std::vector<DeviceBuffer<std::byte>> matrix_buffers;
  std::map<const std::byte*, const std::byte*> uploaded;  // host data -> device data (tied head)
  std::vector<DeviceBuffer<float>> vector_buffers;
  DeviceMatrix token_embd, output;
  const float* output_norm = nullptr;
  std::vector<DeviceLayer> layers;
  int64_t weight_bytes = 0;
  int64_t max_dequant_floats = 0;  // largest non-F32 matmul weight, for the cuBLAS path
  const float* mla_inv_freq = nullptr;  // MLA: (qk_rope_head_dim / 2) RoPE frequencies

  // ---- per pass: the batch's index arrays (one device array, one pinned staging array)
  DeviceBuffer<int32_t> batch_d;
  PinnedBuffer<int32_t> batch_h;
  cudaEvent_t batch_copied = nullptr;  // batch_h may be rewritten once this has fired
  int64_t n_logits = 0;                // logits rows of the last uploaded batch
  // MLA: the last batch's context-row offsets (n_seqs + 1, device; prefix sums of seq_lens)
  // and their total, for the naive path's gather; the naive path's buffers
  const int32_t* mla_ctx_first = nullptr;
  int64_t mla_ctx_total = 0;
  DeviceBuffer<float> mla_c, mla_k_pe, mla_k, mla_v;
  std::array<DeviceBuffer<float>, static_cast<size_t>(Scratch::kCount)> scratch;
  DeviceBuffer<float> dequant_scratch;  // f32 copy of a quantized W for cuBLAS
  // ---- int8 activations (chapter 03): x's codes (n, cols) and scales (n, cols / 32)
  ActivationPrecision activations = ActivationPrecision::F32;
  DeviceBuffer<int8_t> act_codes;
  DeviceBuffer<float> act_scales;
  PinnedBuffer<float> to_host_h;
  // ---- greedy sampling on the device
  DeviceBuffer<int32_t> penalty_tokens_d;  // every row's distinct ids, concatenated
  PinnedBuffer<int32_t> penalty_tokens_h;
  DeviceBuffer<ArgmaxResult> argmax_d;  // (rows)
  PinnedBuffer<ArgmaxResult> argmax_h;

  // ---- profiling
  bool profiling = false;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events;  // pool, reused every pass
  std::vector<const char*> event_ops;                       // op of events[i] since the last wait
  std::map<std::string, OpTime> op_times;

  explicit Impl(const ModelConfig& c) : config(c) {}

  ~Impl() {
    // Let queued work finish before anything it uses goes away; errors are dropped (a
    // destructor must not throw; a broken context reports itself at the next checked call).
    cudaSetDevice(0);  // the destroying thread may have another current device
    if (stream != nullptr) cudaStreamSynchronize(stream);
    cublas.reset();  // bound to `stream`: destroy it first
    for (auto& [start, stop] : events) {
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
    }
    if (batch_copied != nullptr) cudaEventDestroy(batch_copied);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  /// Runs `body` (which queues work); if it throws, drains the stream first, so no work the
  /// failed op queued is left in flight, and forgets the op's unmatched profiling events.
  template <typename F>
  auto guarded(F&& body) {
    CUDA_CHECK(cudaSetDevice(0));  // the calling thread may have another current device
    try {
      return body();
    } catch (...) {
      cudaStreamSynchronize(stream);  // its own error, if any, is already being thrown
      (void)cudaGetLastError();
      event_ops.clear();
      throw;
    }
  }

  /// Runs `launch` (which queues work on `stream`), timed under `name` when profiling.
  template <typename F>
  void op(const char* name, F&& launch) {
    if (!profiling) {
      launch();
      return;
    }
    const size_t i = event_ops.size();
    if (i == events.size()) {
      cudaEvent_t start = nullptr, stop = nullptr;
      CUDA_CHECK(cudaEventCreate(&start));
      CUDA_CHECK(cudaEventCreate(&stop));
      events.emplace_back(start, stop);
    }
    CUDA_CHECK(cudaEventRecord(events[i].first, stream));
    launch();
    CUDA_CHECK(cudaEventRecord(events[i].second, stream));
    event_ops.push_back(name);
  }

  /// Waits for the stream, then adds the timed ops' event times to op_times.
  void wait() {
    CUDA_CHECK(cudaStreamSynchronize(stream));
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

  /// Uploads a matrix once (tied matrices share one copy). `in_matmul`: it goes through
  /// matmul() and so may need the cuBLAS path's dequantization scratch.
  DeviceMatrix upload(const WeightMatrix& w, bool in_matmul = true) {
    auto it = uploaded.find(w.data);
    const std::byte* device_data = nullptr;
    if (it != uploaded.end()) {
      device_data = it->second;
    } else {
      DeviceBuffer<std::byte> buf(w.size_bytes());
      buf.copy_from_host(w.data, w.size_bytes());
      device_data = buf.data();
      weight_bytes += w.size_bytes();
      matrix_buffers.push_back(std::move(buf));
      uploaded.emplace(w.data, device_data);
    }
    if (in_matmul && w.dtype != DType::F32) {
      max_dequant_floats = std::max(max_dequant_floats, w.rows * w.cols);
    }
    return DeviceMatrix{w.dtype, w.rows, w.cols, w.row_bytes, device_data};
  }

  const float* upload(const std::vector<float>& v) {
    vector_buffers.push_back(DeviceBuffer<float>::from_host(v));
    weight_bytes += static_cast<int64_t>(v.size() * sizeof(float));
    return vector_buffers.back().data();
  }

  /// The layer `ref` names, checked.
  const DeviceLayer& layer(WeightRef ref) const {
    if (ref.layer < 0 || ref.layer >= static_cast<int64_t>(layers.size())) {
      throw InvalidArgument("CudaBackend: weight layer " + std::to_string(ref.layer) +
                            " outside [0, " + std::to_string(layers.size()) + ")");
    }
    return layers[static_cast<size_t>(ref.layer)];
  }

  /// The device matrix `ref` names. Throws InvalidArgument for a norm or a bad layer.
  const DeviceMatrix& matrix(WeightRef ref) const {
    switch (ref.kind) {
      case WeightKind::TokenEmbd: return token_embd;
      case WeightKind::Output: return output;
      case WeightKind::Wq: return layer(ref).wq;
      case WeightKind::Wk: return layer(ref).wk;
      case WeightKind::Wv: return layer(ref).wv;
      case WeightKind::Wo: return layer(ref).wo;
      case WeightKind::Gate: return layer(ref).w_gate;
      case WeightKind::Up: return layer(ref).w_up;
      case WeightKind::Down: return layer(ref).w_down;
      case WeightKind::WkvA: return layer(ref).wkv_a;
      case WeightKind::WkB: return layer(ref).wk_b;
      case WeightKind::WvB: return layer(ref).wv_b;
      default: break;
    }
    throw InvalidArgument("CudaBackend::matmul: weight kind " +
                          std::to_string(static_cast<int>(ref.kind)) + " is not a matrix");
  }

  /// The device norm weight `ref` names. Throws InvalidArgument for a matrix or a bad layer.
  const float* norm(WeightRef ref) const {
    switch (ref.kind) {
      case WeightKind::AttnNorm: return layer(ref).attn_norm;
      case WeightKind::FfnNorm: return layer(ref).ffn_norm;
      case WeightKind::OutputNorm: return output_norm;
      default: break;
    }
    throw InvalidArgument("CudaBackend::rmsnorm: weight kind " +
                          std::to_string(static_cast<int>(ref.kind)) + " is not a norm");
  }

  /// `pool` as this backend's device pool with `layer` in range and the batch present.
  void check_pool(const char* op, KvPool& pool, int64_t layer, const BatchView& batch) const {
    const std::string where = std::string("CudaBackend::") + op + ": ";
    if (dynamic_cast<DeviceKvPool*>(&pool) == nullptr) {
      throw InvalidArgument(where +
                            "the KV pool is not in device memory (make it with "
                            "CudaBackend::make_kv_pool)");
    }
    if (pool.kv_dim() != config.kv_dim() || pool.n_layers() != config.n_layers) {
      throw InvalidArgument(where + "the KV pool was made for another model shape");
    }
    if (layer < 0 || layer >= pool.n_layers()) {
      throw InvalidArgument(where + "layer " + std::to_string(layer) + " outside [0, " +
                            std::to_string(pool.n_layers()) + ")");
    }
    if (batch.host == nullptr) throw InvalidArgument(where + "no batch (call upload first)");
  }
};

// ---- construction ---------------------------------------------------------------------------

CudaBackend::CudaBackend(const ModelConfig& config, const Weights& weights, ActivationPrecision activations)
    : impl_(std::make_unique<Impl>(config)) {
  impl_->activations = activations;
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
      if (L.wk_b.dtype != DType::F32 || L.wv_b.dtype != DType::F32) {
        throw UnsupportedError("--device cuda: MLA up-projections (W_UK, W_UV) must be f32");
      }
    }
  }
  if (cuda_device_count() == 0) {
    throw UnsupportedError(
        "--device cuda: no CUDA device is available (no NVIDIA GPU or driver is "
        "visible to this process); run with --device cpu");
  }
  CUDA_CHECK(cudaSetDevice(0));
  if (!cuda_available()) {
    throw UnsupportedError(
        "--device cuda: GPU 0 cannot run this build's kernels (built for "
        "sm_80/sm_90; reconfigure with -DCMAKE_CUDA_ARCHITECTURES=<yours>)");
  }
  Impl& m = *impl_;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  char mem[32];
  std::snprintf(mem, sizeof mem, "%.1f GiB", static_cast<double>(prop.totalGlobalMem) / (1u << 30));
  const char* act = activations == ActivationPrecision::Int8           ? ", int8 activations per 32 block"
                    : activations == ActivationPrecision::Int8PerToken ? ", int8 activations per token"
                                                                       : "";
  m.description = std::string("cuda:0 (") + prop.name + ", sm_" + std::to_string(prop.major) +
                  std::to_string(prop.minor) + ", " + mem + act + ")";
  CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&m.batch_copied, cudaEventDisableTiming));
  m.cublas = std::make_unique<CublasHandle>();

  m.token_embd = m.upload(weights.token_embd, /*in_matmul=*/false);
  m.layers.reserve(weights.layers.size());
  for (const LayerWeights& L : weights.layers) {
    DeviceLayer d;
    d.attn_norm = m.upload(L.attn_norm);
    d.wq = m.upload(L.wq);
    if (config.is_mla()) {
      d.wkv_a = m.upload(L.wkv_a);
      d.wk_b = m.upload(L.wk_b);
      d.wv_b = m.upload(L.wv_b);
    } else {
      d.wk = m.upload(L.wk);
      d.wv = m.upload(L.wv);
    }
    d.wo = m.upload(L.wo);
    d.ffn_norm = m.upload(L.ffn_norm);
    d.w_gate = m.upload(L.w_gate);
    d.w_up = m.upload(L.w_up);
    d.w_down = m.upload(L.w_down);
    m.layers.push_back(d);
  }
  m.output_norm = m.upload(weights.output_norm);
  m.output = m.upload(weights.output);
  if (config.is_mla() && config.qk_rope_head_dim > 0) {
    if (static_cast<int64_t>(weights.mla_rope_inv_freq.size()) != config.qk_rope_head_dim / 2) {
      throw InvalidArgument("CudaBackend: MLA model without its " + std::to_string(config.qk_rope_head_dim / 2) +
                            " RoPE frequencies");
    }
    m.mla_inv_freq = m.upload(weights.mla_rope_inv_freq);
  }
}

CudaBackend::~CudaBackend() = default;

const ModelConfig& CudaBackend::config() const { return impl_->config; }

std::string CudaBackend::device_description() const { return impl_->description; }

int64_t CudaBackend::weight_bytes() const { return impl_->weight_bytes; }

int64_t CudaBackend::free_memory_bytes() const {
  CUDA_CHECK(cudaSetDevice(0));
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
    return std::make_unique<DeviceKvPool>(impl_->config, config);
  });
}

// ---- one forward pass -----------------------------------------------------------------------

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
    const std::vector<int32_t>* arrays[] = {
        &batch.token_ids, &batch.positions,    &batch.slot_mapping, &batch.query_start_loc,
        &batch.seq_lens,  &batch.block_tables, &batch.logits_rows,  &ctx_first};
    int64_t total = 0;
    for (const auto* a : arrays) total += size(*a);
    // The previous upload's copy must be done reading the staging array before it is rewritten.
    CUDA_CHECK(cudaEventSynchronize(m.batch_copied));
    m.batch_h.reserve(total);
    ensure(m.batch_d, total, m.stream);
    const int32_t* device[std::size(arrays)];
    int64_t offset = 0;
    for (size_t i = 0; i < std::size(arrays); ++i) {
      const int64_t n = size(*arrays[i]);
      if (n > 0) {
        std::memcpy(m.batch_h.data() + offset, arrays[i]->data(),
                    static_cast<size_t>(n) * sizeof(int32_t));
      }
      device[i] = m.batch_d.data() + offset;
      offset += n;
    }
    m.op("upload (batch indices)", [&] {
      if (total > 0) {
        CUDA_CHECK(cudaMemcpyAsync(m.batch_d.data(), m.batch_h.data(),
                                   static_cast<size_t>(total) * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, m.stream));
      }
    });
    CUDA_CHECK(cudaEventRecord(m.batch_copied, m.stream));
    m.n_logits = batch.n_logits();
    m.mla_ctx_first = device[7];
    m.mla_ctx_total = ctx_first.empty() ? 0 : ctx_first.back();
    return BatchView{&batch,    device[0], device[1], device[2],
                     device[3], device[4], device[5], device[6]};
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
    ensure(m.scratch[index], n_floats, m.stream);
    return m.scratch[index].data();
  });
}

void CudaBackend::embedding(const int32_t* token_ids, int64_t n, float* out) {
  Impl& m = *impl_;
  m.guarded([&] {
    m.op("embedding", [&] { cuda::embedding(m.token_embd, token_ids, out, n, m.stream); });
  });
}

void CudaBackend::rmsnorm(const float* x, WeightRef norm, float* out, int64_t n_rows) {
  Impl& m = *impl_;
  const float* weight = m.norm(norm);
  m.guarded([&] {
    m.op("rmsnorm", [&] {
      cuda::rmsnorm(x, weight, out, n_rows, m.config.d_model, m.config.rms_norm_eps, m.stream);
    });
  });
}

void CudaBackend::matmul(WeightRef w, const float* x, float* y, int64_t n_rows, bool accumulate) {
  Impl& m = *impl_;
  const DeviceMatrix& matrix = m.matrix(w);
  // Chapter 03's int8 activations: block-quantized weights only, and (W8A8 per token) not the
  // LM head — the CPU backend's rules (CpuBackend::matmul).
  const bool int8 = m.activations != ActivationPrecision::F32 && has_int8_kernel(matrix.dtype) &&
                    !(m.activations == ActivationPrecision::Int8PerToken && w.kind == WeightKind::Output);
  if (int8 && n_rows > 0) {
    m.guarded([&] {
      ensure(m.act_codes, n_rows * matrix.cols, m.stream);
      ensure(m.act_scales, n_rows * (matrix.cols / 32), m.stream);
      m.op("gemv_int8 (int8 activations)", [&] {
        quantize_activations_int8(x, n_rows, matrix.cols,
                                  m.activations == ActivationPrecision::Int8 ? ActivationGroup::Block32
                                                                             : ActivationGroup::Token,
                                  m.act_codes.data(), m.act_scales.data(), m.stream);
        gemv_int8(matrix, m.act_codes.data(), m.act_scales.data(), y, n_rows, accumulate, m.stream);
      });
    });
    return;
  }
  m.guarded([&] {
    if (n_rows > kGemvBatchedMaxRows && matrix.dtype != DType::F32) {
      ensure(m.dequant_scratch, std::max(m.max_dequant_floats, matrix.rows * matrix.cols),
             m.stream);
    }
    m.op(matmul_op_name(n_rows), [&] {
      cuda::matmul(*m.cublas, matrix, x, y, n_rows, accumulate, m.dequant_scratch.data(),
                   m.dequant_scratch.n_elems(), m.stream);
    });
  });
}

void CudaBackend::rope(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  m.guarded([&] {
    m.op("rope", [&] {
      cuda::rope(x, positions, n_tokens, n_heads, c.head_dim, c.rope_theta, c.rope_style, m.stream);
    });
  });
}

void CudaBackend::kv_append(KvPool& pool, int64_t layer, const float* k, const float* v,
                            const BatchView& batch) {
  Impl& m = *impl_;
  m.check_pool("kv_append", pool, layer, batch);
  m.guarded([&] {
    m.op("kv_append", [&] {
      if (pool.dtype() == KvCacheDType::F32) {
        cuda::kv_append(k, v, batch.slot_mapping, batch.host->n_tokens(), pool.kv_dim(), pool.keys(layer),
                        pool.values(layer), m.stream);
      } else {  // chapter 03: rounded to f16 or int8 as it is written
        cuda::kv_append_quantized(k, v, batch.slot_mapping, batch.host->n_tokens(), m.config.n_kv_heads,
                                  m.config.head_dim, static_cast<DeviceKvPool&>(pool).quantized_layer(layer),
                                  m.stream);
      }
    });
  });
}

void CudaBackend::attention(KvPool& pool, int64_t layer, const float* q, float* out,
                            const BatchView& batch) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  m.check_pool("attention", pool, layer, batch);
  const ForwardBatch& b = *batch.host;
  if (b.block_size != pool.block_size()) {
    throw InvalidArgument("CudaBackend::attention: the batch's block_size " +
                          std::to_string(b.block_size) + " is not the pool's " +
                          std::to_string(pool.block_size()));
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  m.guarded([&] {
    m.op("attention (paged)", [&] {
      if (pool.dtype() == KvCacheDType::F32) {
        paged_attention(q, pool.keys(layer), pool.values(layer), out, batch.query_start_loc,
                        batch.seq_lens, batch.block_tables, b.n_tokens(), b.n_seqs(),
                        b.max_blocks_per_seq, b.block_size, c.n_heads, c.n_kv_heads, c.head_dim,
                        scale, m.stream);
      } else {  // chapter 03: K and V dequantized as they are read
        paged_attention_quantized(q, static_cast<DeviceKvPool&>(pool).quantized_layer(layer), out,
                                  batch.query_start_loc, batch.seq_lens, batch.block_tables, b.n_tokens(),
                                  b.n_seqs(), b.max_blocks_per_seq, b.block_size, c.n_heads, c.n_kv_heads,
                                  c.head_dim, scale, m.stream);
      }
    });
  });
}

void CudaBackend::mla_rope(float* q, float* latent, const int32_t* positions, int64_t n_tokens) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  if (!c.is_mla()) throw InvalidArgument("CudaBackend::mla_rope: not an MLA model");
  const MlaShape shape{c.n_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.kv_lora_rank, c.v_head_dim};
  m.guarded([&] {
    m.op("mla_rope", [&] { cuda::mla_rope(q, latent, positions, m.mla_inv_freq, n_tokens, shape, m.stream); });
  });
}

void CudaBackend::mla_attention(KvPool& pool, int64_t layer, const float* q, const float* latent, float* out,
                                const BatchView& batch) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  if (!c.is_mla()) throw InvalidArgument("CudaBackend::mla_attention: not an MLA model");
  m.check_pool("mla_attention", pool, layer, batch);
  const ForwardBatch& b = *batch.host;
  if (b.block_size != pool.block_size()) {
    throw InvalidArgument("CudaBackend::mla_attention: the batch's block_size " + std::to_string(b.block_size) +
                          " is not the pool's " + std::to_string(pool.block_size()));
  }
  const MlaShape shape{c.n_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.kv_lora_rank, c.v_head_dim};
  const DeviceLayer& L = m.layer({WeightKind::WkB, layer});
  const float scale = c.softmax_scale();
  m.guarded([&] {
    // 1. Each row's latent [c_kv ; k_pe] into the pool, halves in the K and V arrays.
    m.op("mla_latent_append", [&] {
      cuda::mla_latent_append(latent, batch.slot_mapping, b.n_tokens(), pool.kv_dim(), pool.keys(layer),
                              pool.values(layer), m.stream);
    });
    if (c.mla_absorbed) {
      // 2a. Attention in latent space (W_UK into the query, W_UV after the weighted sum).
      m.op("mla attention (absorbed)", [&] {
        cuda::mla_absorbed_attention(q, pool.keys(layer), pool.values(layer),
                                     reinterpret_cast<const float*>(L.wk_b.data),
                                     reinterpret_cast<const float*>(L.wv_b.data), out, batch.query_start_loc,
                                     batch.seq_lens, batch.block_tables, b.n_tokens(), b.n_seqs(),
                                     b.max_blocks_per_seq, b.block_size, shape, scale, m.stream);
      });
      return;
    }
    // 2b. Naive: every cached latent up-projected to K_nope and V for all heads, every step.
    const int64_t n_ctx = m.mla_ctx_total;
    ensure(m.mla_c, n_ctx * c.kv_lora_rank, m.stream);
    ensure(m.mla_k_pe, std::max<int64_t>(n_ctx * c.qk_rope_head_dim, 1), m.stream);
    ensure(m.mla_k, n_ctx * c.n_heads * c.qk_nope_head_dim, m.stream);
    ensure(m.mla_v, n_ctx * c.n_heads * c.v_head_dim, m.stream);
    m.op("mla gather latents (naive)", [&] {
      cuda::mla_gather_latents(pool.keys(layer), pool.values(layer), m.mla_ctx_first, batch.block_tables, n_ctx,
                               b.n_seqs(), b.max_blocks_per_seq, b.block_size, shape, m.mla_c.data(),
                               m.mla_k_pe.data(), m.stream);
    });
    m.op("mla up-projection (naive)", [&] {
      cuda::matmul(*m.cublas, L.wk_b, m.mla_c.data(), m.mla_k.data(), n_ctx, false, nullptr, 0, m.stream);
      cuda::matmul(*m.cublas, L.wv_b, m.mla_c.data(), m.mla_v.data(), n_ctx, false, nullptr, 0, m.stream);
    });
    m.op("mla attention (naive)", [&] {
      cuda::mla_naive_attention(q, m.mla_k.data(), m.mla_k_pe.data(), m.mla_v.data(), out, batch.query_start_loc,
                                batch.seq_lens, m.mla_ctx_first, b.n_tokens(), b.n_seqs(), shape, scale, m.stream);
    });
  });
}

void CudaBackend::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  Impl& m = *impl_;
  m.guarded([&] { m.op("swiglu", [&] { cuda::swiglu(gate, up, out, n, m.stream); }); });
}

void CudaBackend::gather_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t dim,
                              float* out) {
  Impl& m = *impl_;
  m.guarded([&] {
    m.op("gather_rows", [&] { cuda::gather_rows(x, rows, n_rows, dim, out, m.stream); });
  });
}

void CudaBackend::to_host(const float* src, int64_t n_floats, float* host) {
  Impl& m = *impl_;
  if (n_floats < 0 || (n_floats > 0 && (src == nullptr || host == nullptr))) {
    throw InvalidArgument("CudaBackend::to_host: need n_floats >= 0 and non-null pointers, got " +
                          std::to_string(n_floats));
  }
  m.guarded([&] {
    m.to_host_h.reserve(n_floats);  // the last wait finished every copy from the old array
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

// ---- greedy sampling ------------------------------------------------------------------------

std::vector<ArgmaxRow> CudaBackend::greedy_argmax(
    float* logits, std::span<const int32_t> rows,
    const std::vector<std::vector<int32_t>>& penalty_tokens, std::span<const float> penalties) {
  Impl& m = *impl_;
  const int64_t vocab = m.config.vocab_size;
  const auto n_rows = static_cast<int64_t>(rows.size());
  if (penalty_tokens.size() != rows.size() || penalties.size() != rows.size()) {
    throw InvalidArgument("CudaBackend::greedy_argmax: " + std::to_string(rows.size()) + " rows, " +
                          std::to_string(penalty_tokens.size()) + " penalty token lists, " +
                          std::to_string(penalties.size()) + " penalties");
  }
  if (n_rows > 0 && logits == nullptr)
    throw InvalidArgument("CudaBackend::greedy_argmax: null logits");
  // Checked on the host before anything runs: a bad row or id would index past the logits.
  int64_t n_penalized = 0;
  for (int64_t i = 0; i < n_rows; ++i) {
    const int32_t row = rows[static_cast<size_t>(i)];
    if (row < 0 || row >= m.n_logits) {
      throw InvalidArgument("CudaBackend::greedy_argmax: row " + std::to_string(row) +
                            " outside the last batch's " + std::to_string(m.n_logits) +
                            " logits rows");
    }
    for (const int32_t id : penalty_tokens[static_cast<size_t>(i)]) {
      if (id < 0 || id >= vocab) {
        throw InvalidArgument("CudaBackend::greedy_argmax: penalized token id " +
                              std::to_string(id) + " outside [0, " + std::to_string(vocab) + ")");
      }
    }
    n_penalized += static_cast<int64_t>(penalty_tokens[static_cast<size_t>(i)].size());
  }
  return m.guarded([&] {
    std::vector<ArgmaxRow> out(static_cast<size_t>(n_rows));
    if (n_rows == 0) return out;
    cudaStream_t s = m.stream;
    // The last wait (to_host / greedy_argmax) or the guard's drain finished every copy from
    // these staging arrays, so they may be rewritten and grown now.
    m.penalty_tokens_h.reserve(n_penalized);
    m.argmax_h.reserve(n_rows);
    ensure(m.penalty_tokens_d, n_penalized, s);
    ensure(m.argmax_d, n_rows, s);
    int64_t offset = 0;
    for (const auto& ids : penalty_tokens) {
      std::copy(ids.begin(), ids.end(), m.penalty_tokens_h.data() + offset);
      offset += static_cast<int64_t>(ids.size());
    }
    // One argmax launch covers consecutive rows (the common case: one logits row per sequence).
    bool consecutive = true;
    for (int64_t i = 1; i < n_rows; ++i) consecutive &= rows[static_cast<size_t>(i)] == rows[0] + i;
    m.op("sampling (penalty + argmax)", [&] {
      if (n_penalized > 0) {
        CUDA_CHECK(cudaMemcpyAsync(m.penalty_tokens_d.data(), m.penalty_tokens_h.data(),
                                   static_cast<size_t>(n_penalized) * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, s));
      }
      int64_t at = 0;
      for (int64_t i = 0; i < n_rows; ++i) {
        const auto& ids = penalty_tokens[static_cast<size_t>(i)];
        const float penalty = penalties[static_cast<size_t>(i)];
        float* row = logits + static_cast<int64_t>(rows[static_cast<size_t>(i)]) * vocab;
        if (penalty != 1.0f && !ids.empty()) {  // a penalty of 1 leaves every logit as it is
          repeat_penalty(row, m.penalty_tokens_d.data() + at, static_cast<int64_t>(ids.size()),
                         penalty, s);
        }
        at += static_cast<int64_t>(ids.size());
        if (!consecutive) argmax(row, m.argmax_d.data() + i, 1, vocab, s);
      }
      if (consecutive)
        argmax(logits + static_cast<int64_t>(rows[0]) * vocab, m.argmax_d.data(), n_rows, vocab, s);
    });
    m.op("argmax to host", [&] {
      CUDA_CHECK(cudaMemcpyAsync(m.argmax_h.data(), m.argmax_d.data(),
                                 static_cast<size_t>(n_rows) * sizeof(ArgmaxResult),
                                 cudaMemcpyDeviceToHost, s));
    });
    m.wait();
    for (int64_t i = 0; i < n_rows; ++i) {
      const ArgmaxResult& r = m.argmax_h.data()[i];
      out[static_cast<size_t>(i)] = ArgmaxRow{r.index, r.n_invalid, r.n_masked};
    }
    return out;
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

}  // namespace lio::cuda
