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
#include <iterator>
#include <string>
#include <utility>

#include "cublas_handle.h"
#include "cuda_backend_impl.h"
#include "cuda_check.h"
#include "cuda_device_memory.h"
#include "cuda_runtime_info.h"
#include "device_kv_pool.h"
#include "lio/error.h"

namespace lio::cuda {

// ---- state ------------------------------------------------------------------------------------

CudaBackend::Impl::~Impl() {
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

void CudaBackend::Impl::wait() {
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

// ---- construction ---------------------------------------------------------------------------

CudaBackend::CudaBackend(const ModelConfig& config, const Weights& weights, ActivationPrecision activations,
                         AttentionBackend attention)
    : impl_(std::make_unique<Impl>(config)) {
  impl_->activations = activations;
  impl_->attention_backend = attention;
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

  m.upload_weights(weights);
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

}  // namespace lio::cuda
