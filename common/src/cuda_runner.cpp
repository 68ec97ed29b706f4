#include "lio/cuda_runner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "cuda_check.h"
#include "cuda_ops.h"
#include "lio/error.h"

namespace lio::cuda {

namespace {

/// Owning page-locked host array (cudaMallocHost): async copies from/to it overlap nothing on
/// the host and run at full PCIe/NVLink speed. Grows on demand; contents are not kept.
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  /// Makes room for n elements (reallocating when larger than before).
  void reserve(int64_t n) {
    if (n <= capacity_) return;
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = nullptr;
    capacity_ = 0;
    CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), static_cast<size_t>(n) * sizeof(T)));
    capacity_ = n;
  }
  T* data() { return data_; }

 private:
  T* data_ = nullptr;
  int64_t capacity_ = 0;
};

/// Device copies of one decoder block's weights.
struct DeviceLayer {
  const float* attn_norm = nullptr;  // (d_model)
  DeviceMatrix wq, wk, wv, wo;
  const float* ffn_norm = nullptr;   // (d_model)
  DeviceMatrix w_gate, w_up, w_down;
};

/// Grows a device buffer to at least n elements (contents are not kept).
template <typename T>
void ensure(DeviceBuffer<T>& buf, int64_t n) {
  if (buf.n_elems() < n) {
    buf = DeviceBuffer<T>();  // free first: peak memory stays one buffer
    buf = DeviceBuffer<T>(n);
  }
}

}  // namespace

struct CudaRunner::Impl {
  const ModelConfig& config;
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
  int64_t max_dequant_floats = 0;  // largest non-F32 matmul weight, for the prefill scratch
  int64_t max_attention_keys = 0;  // beyond this context the fast attention kernel cannot run

  // ---- KV cache: (n_layers, capacity, kv_dim) f32 for K and for V
  DeviceBuffer<float> k_cache, v_cache;
  int64_t capacity = 0;
  int64_t n_tokens = 0;

  // ---- scratch, sized for the largest chunk seen
  DeviceBuffer<float> x, xn, q, attn, gate, up, logits, dequant_scratch;
  DeviceBuffer<int32_t> tokens_d, positions_d;
  PinnedBuffer<int32_t> tokens_h, positions_h;
  PinnedBuffer<float> logits_h;
  // ---- greedy sampling on the device (forward_sample)
  DeviceBuffer<int32_t> penalty_tokens_d;  // (repeat_last_n) distinct ids to penalize
  PinnedBuffer<int32_t> penalty_tokens_h;
  DeviceBuffer<ArgmaxResult> argmax_d;      // (1)
  PinnedBuffer<ArgmaxResult> argmax_h;

  // ---- profiling
  bool profiling = false;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events;  // pool, reused every forward
  std::vector<const char*> event_ops;                       // op of events[i] this forward
  std::map<std::string, OpTime> op_times;

  explicit Impl(const ModelConfig& c) : config(c) {}

  /// Throws InvalidArgument unless `tokens` can run next: non-empty, ids in the vocabulary,
  /// room in the cache.
  void check_forward(std::span<const int32_t> tokens) const;

  /// Queues the whole pass for `tokens` (checked) on `stream`, up to the logits: returns them in
  /// device memory, (n, vocab_size) when all_logits, else (1, vocab_size). Nothing is waited on.
  float* enqueue_forward(std::span<const int32_t> tokens, bool all_logits);

  /// Waits for the queued work, collects the profiled op times, and counts the `n_new` positions
  /// the pass filled as part of the sequence.
  void finish_forward(int64_t n_new);

  /// Copies `n_floats` device logits to the pinned host buffer and waits (finishing the pass).
  std::span<const float> logits_to_host(const float* logits, int64_t n_floats, int64_t n_new);

  /// Runs `body` (which queues work and waits); if it throws, drains the stream first: work
  /// queued before the failure may still read buffers the next call could reallocate.
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
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  /// Uploads a matrix once (tied matrices share one copy). `in_matmul`: it goes through
  /// matmul() and so may need the prefill dequantization scratch (the embedding table is only
  /// gathered from).
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

  /// Runs `launch` (which queues work on `stream`), timing it under `op` when profiling.
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

  /// After the stream has synchronized: adds this forward's event times to op_times.
  void collect_op_times() {
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

  /// y (n, w.rows) = x (n, w.cols) W^T (+ y).
  void matmul_op(const DeviceMatrix& w, const float* in, float* out, int64_t n, bool accumulate) {
    if (n > 1 && w.dtype != DType::F32 && dequant_scratch.n_elems() < max_dequant_floats) {
      ensure(dequant_scratch, max_dequant_floats);
    }
    op(n == 1 ? "gemv" : "gemm (dequantize + cuBLAS)", [&] {
      cuda::matmul(*cublas, w, in, out, n, accumulate, dequant_scratch.data(),
                   dequant_scratch.n_elems(), stream);
    });
  }
};

CudaRunner::CudaRunner(const ModelConfig& config, const Weights& weights)
    : impl_(std::make_unique<Impl>(config)) {
  if (cuda_device_count() == 0) {
    throw UnsupportedError("--device cuda: no CUDA device is available (no NVIDIA GPU or driver is "
                           "visible to this process); run with --device cpu");
  }
  CUDA_CHECK(cudaSetDevice(0));
  if (!cuda_available()) {
    throw UnsupportedError("--device cuda: GPU 0 cannot run this build's kernels (built for "
                           "sm_80/sm_90; reconfigure with -DCMAKE_CUDA_ARCHITECTURES=<yours>)");
  }
  Impl& m = *impl_;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  char mem[32];
  std::snprintf(mem, sizeof mem, "%.1f GiB", static_cast<double>(prop.totalGlobalMem) / (1u << 30));
  m.description = std::string("cuda:0 (") + prop.name + ", sm_" + std::to_string(prop.major) +
                  std::to_string(prop.minor) + ", " + mem + ")";
  CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  m.cublas = std::make_unique<CublasHandle>();

  m.token_embd = m.upload(weights.token_embd, /*in_matmul=*/false);
  m.layers.reserve(weights.layers.size());
  for (const LayerWeights& L : weights.layers) {
    DeviceLayer d;
    d.attn_norm = m.upload(L.attn_norm);
    d.wq = m.upload(L.wq);
    d.wk = m.upload(L.wk);
    d.wv = m.upload(L.wv);
    d.wo = m.upload(L.wo);
    d.ffn_norm = m.upload(L.ffn_norm);
    d.w_gate = m.upload(L.w_gate);
    d.w_up = m.upload(L.w_up);
    d.w_down = m.upload(L.w_down);
    m.layers.push_back(d);
  }
  m.output_norm = m.upload(weights.output_norm);
  m.output = m.upload(weights.output);
  m.max_attention_keys = attention_max_keys(config.head_dim);
}

CudaRunner::~CudaRunner() = default;

const ModelConfig& CudaRunner::config() const { return impl_->config; }

std::string CudaRunner::device_description() const { return impl_->description; }

int64_t CudaRunner::weight_bytes() const { return impl_->weight_bytes; }

void CudaRunner::reset(int64_t capacity_tokens) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  CUDA_CHECK(cudaSetDevice(0));  // the calling thread may have another current device
  if (capacity_tokens <= 0 || capacity_tokens > c.context_length) {
    throw InvalidArgument("KV cache capacity must be in [1, " + std::to_string(c.context_length) +
                          "] tokens, got " + std::to_string(capacity_tokens));
  }
  if (capacity_tokens != m.capacity) {
    m.k_cache = DeviceBuffer<float>();
    m.v_cache = DeviceBuffer<float>();
    m.capacity = 0;
    const int64_t n_floats = c.n_layers * capacity_tokens * c.kv_dim();
    m.k_cache = DeviceBuffer<float>(n_floats);
    m.v_cache = DeviceBuffer<float>(n_floats);
    m.capacity = capacity_tokens;
  }
  m.n_tokens = 0;
}

void CudaRunner::Impl::check_forward(std::span<const int32_t> tokens) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw InvalidArgument("forward: no tokens");
  if (capacity == 0) throw InvalidArgument("CudaRunner::forward: call reset() to start a sequence first");
  if (n_tokens + n > capacity) {
    throw InvalidArgument("forward: " + std::to_string(n_tokens + n) + " tokens do not fit in a KV cache of " +
                          std::to_string(capacity) + " tokens");
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= config.vocab_size) {
      throw InvalidArgument("forward: token id " + std::to_string(tokens[i]) + " at index " +
                            std::to_string(i) + " is outside [0, " + std::to_string(config.vocab_size) + ")");
    }
  }
}

std::span<const float> CudaRunner::forward(std::span<const int32_t> tokens, bool all_logits) {
  Impl& m = *impl_;
  m.check_forward(tokens);
  return m.guarded([&] {
    const int64_t n = static_cast<int64_t>(tokens.size());
    const float* logits = m.enqueue_forward(tokens, all_logits);
    return m.logits_to_host(logits, (all_logits ? n : 1) * m.config.vocab_size, n);
  });
}

int32_t CudaRunner::forward_sample(std::span<const int32_t> tokens, Sampler& sampler,
                                   std::span<const int32_t> history) {
  const SamplerConfig& sc = sampler.config();
  // Random sampling needs the whole distribution: the CPU sampler gets the row.
  if (sc.temperature != 0.0f) return ModelRunner::forward_sample(tokens, sampler, history);
  Impl& m = *impl_;
  const int64_t vocab = m.config.vocab_size;
  m.check_forward(tokens);
  // Checked on the host before anything runs: an id outside the vocabulary would index past
  // the logits on the device.
  const std::vector<int32_t> penalized = sc.repeat_penalty == 1.0f
                                             ? std::vector<int32_t>{}
                                             : repeat_penalty_tokens(history, sc.repeat_last_n, vocab);
  return m.guarded([&]() -> int32_t {
    const int64_t n = static_cast<int64_t>(tokens.size());
    cudaStream_t s = m.stream;
    float* logits = m.enqueue_forward(tokens, /*all_logits=*/false);
    const auto n_penalized = static_cast<int64_t>(penalized.size());
    if (n_penalized > 0) {
      ensure(m.penalty_tokens_d, n_penalized);
      m.penalty_tokens_h.reserve(n_penalized);
      std::copy(penalized.begin(), penalized.end(), m.penalty_tokens_h.data());
      CUDA_CHECK(cudaMemcpyAsync(m.penalty_tokens_d.data(), m.penalty_tokens_h.data(),
                                 static_cast<size_t>(n_penalized) * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    }
    ensure(m.argmax_d, 1);
    m.argmax_h.reserve(1);
    m.op("sampling (penalty + argmax)", [&] {
      repeat_penalty(logits, m.penalty_tokens_d.data(), n_penalized, sc.repeat_penalty, s);
      argmax(logits, m.argmax_d.data(), 1, vocab, s);
    });
    m.op("argmax to host", [&] {
      CUDA_CHECK(cudaMemcpyAsync(m.argmax_h.data(), m.argmax_d.data(), sizeof(ArgmaxResult),
                                 cudaMemcpyDeviceToHost, s));
    });
    m.finish_forward(n);
    const ArgmaxResult r = *m.argmax_h.data();
    if (r.n_invalid == 0 && r.n_masked < vocab) return r.index;
    // A row the sampler rejects (NaN, +inf, all -inf): copy it back, penalty applied, and let
    // the sampler check it, so the error names the token exactly as on the CPU path.
    CUDA_CHECK(cudaMemcpyAsync(m.logits_h.data(), logits, static_cast<size_t>(vocab) * sizeof(float),
                               cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<float> row(m.logits_h.data(), m.logits_h.data() + vocab);
    return sampler.sample(row, {});  // empty history: the penalty is already in the row
  });
}

float* CudaRunner::Impl::enqueue_forward(std::span<const int32_t> tokens, bool all_logits) {
  Impl& m = *this;
  const ModelConfig& c = m.config;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t start = m.n_tokens;
  const int64_t d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim();
  const int64_t n_out = all_logits ? n : 1;
  ensure(m.x, n * d);
  ensure(m.xn, n * d);
  ensure(m.q, n * qd);
  ensure(m.attn, n * qd);
  ensure(m.gate, n * c.d_ff);
  ensure(m.up, n * c.d_ff);
  ensure(m.logits, n_out * c.vocab_size);
  ensure(m.tokens_d, n);
  ensure(m.positions_d, n);
  m.tokens_h.reserve(n);
  m.positions_h.reserve(n);
  m.logits_h.reserve(n_out * c.vocab_size);
  for (int64_t i = 0; i < n; ++i) {
    m.tokens_h.data()[i] = tokens[static_cast<size_t>(i)];
    m.positions_h.data()[i] = static_cast<int32_t>(start + i);
  }
  cudaStream_t s = m.stream;
  CUDA_CHECK(cudaMemcpyAsync(m.tokens_d.data(), m.tokens_h.data(), n * sizeof(int32_t),
                             cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(m.positions_d.data(), m.positions_h.data(), n * sizeof(int32_t),
                             cudaMemcpyHostToDevice, s));
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const float eps = c.rms_norm_eps;
  float* x = m.x.data();
  float* xn = m.xn.data();
  float* q = m.q.data();
  float* attn = m.attn.data();
  float* gate = m.gate.data();
  float* up = m.up.data();
  const int32_t* pos = m.positions_d.data();

  m.op("embedding", [&] { embedding(m.token_embd, m.tokens_d.data(), x, n, s); });
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const DeviceLayer& L = m.layers[static_cast<size_t>(l)];
    float* k_layer = m.k_cache.data() + l * m.capacity * kvd;  // (capacity, kv_dim)
    float* v_layer = m.v_cache.data() + l * m.capacity * kvd;
    float* k_new = k_layer + start * kvd;  // rows start .. start + n - 1: written in place
    float* v_new = v_layer + start * kvd;
    // ---- attention
    m.op("rmsnorm", [&] { rmsnorm(x, L.attn_norm, xn, n, d, eps, s); });
    m.matmul_op(L.wq, xn, q, n, false);
    m.matmul_op(L.wk, xn, k_new, n, false);
    m.matmul_op(L.wv, xn, v_new, n, false);
    m.op("rope", [&] {
      rope(q, pos, n, c.n_heads, c.head_dim, c.rope_theta, c.rope_style, s);
      rope(k_new, pos, n, c.n_kv_heads, c.head_dim, c.rope_theta, c.rope_style, s);
    });
    if (start + n <= m.max_attention_keys) {
      m.op("attention", [&] {
        attention(q, k_layer, v_layer, attn, n, start, c.n_heads, c.n_kv_heads, c.head_dim, scale, s);
      });
    } else {  // scores no longer fit shared memory: the one-thread-per-head kernel has no limit
      m.op("attention (naive, long context)", [&] {
        attention_naive(q, k_layer, v_layer, attn, n, start, c.n_heads, c.n_kv_heads, c.head_dim,
                        scale, s);
      });
    }
    m.matmul_op(L.wo, attn, x, n, /*accumulate=*/true);  // x += W_o attn
    // ---- SwiGLU MLP
    m.op("rmsnorm", [&] { rmsnorm(x, L.ffn_norm, xn, n, d, eps, s); });
    m.matmul_op(L.w_gate, xn, gate, n, false);
    m.matmul_op(L.w_up, xn, up, n, false);
    m.op("swiglu", [&] { swiglu(gate, up, gate, n * c.d_ff, s); });
    m.matmul_op(L.w_down, gate, x, n, /*accumulate=*/true);  // x += W_down h
  }
  // Only the rows whose logits are wanted go through the (vocab x d_model) head.
  const float* rows = x + (n - n_out) * d;
  m.op("rmsnorm", [&] { rmsnorm(rows, m.output_norm, xn, n_out, d, eps, s); });
  m.matmul_op(m.output, xn, m.logits.data(), n_out, false);
  return m.logits.data();
}

void CudaRunner::Impl::finish_forward(int64_t n_new) {
  CUDA_CHECK(cudaStreamSynchronize(stream));
  if (profiling) collect_op_times();
  n_tokens += n_new;
}

std::span<const float> CudaRunner::Impl::logits_to_host(const float* logits, int64_t n_floats,
                                                        int64_t n_new) {
  op("logits to host", [&] {
    CUDA_CHECK(cudaMemcpyAsync(logits_h.data(), logits, static_cast<size_t>(n_floats) * sizeof(float),
                               cudaMemcpyDeviceToHost, stream));
  });
  finish_forward(n_new);
  return {logits_h.data(), static_cast<size_t>(n_floats)};
}

KvUsage CudaRunner::kv_usage() const {
  const Impl& m = *impl_;
  const int64_t per_token = 2 * m.config.n_layers * m.config.kv_dim() * static_cast<int64_t>(sizeof(float));
  return {m.n_tokens, per_token * m.n_tokens, per_token * m.capacity};
}

void CudaRunner::set_profiling(bool on) { impl_->profiling = on; }

std::vector<OpTime> CudaRunner::op_times() const {
  std::vector<OpTime> out;
  for (const auto& [name, t] : impl_->op_times) out.push_back(t);
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.total_ms > b.total_ms; });
  return out;
}

void CudaRunner::clear_op_times() { impl_->op_times.clear(); }

}  // namespace lio::cuda
