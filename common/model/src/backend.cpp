// backend.cpp — the Backend interface's default bodies (lio/backend.h): the fused operators as
// their unfused parts, the collectives through host memory when the communicator wants it, and
// the kernels a backend may lack as clear errors. Also the --device names (lio/model_runner.h).
#include "lio/backend.h"

#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "lio/error.h"
#include "lio/model_runner.h"

namespace lio {

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

std::string_view weight_kind_name(WeightKind kind) {
  static constexpr std::string_view kNames[] = {
      "TokenEmbd", "AttnNorm", "Wq",           "Wk",         "Wv",         "Wo",
      "FfnNorm",   "Gate",     "Up",           "Down",       "OutputNorm", "Output",
      "WkvA",      "WkB",      "WvB",          "BiasQ",      "BiasK",      "BiasV",
      "QNorm",     "KNorm",    "PostAttnNorm", "PostFfnNorm"};
  static_assert(std::size(kNames) == kWeightKindCount, "one name per WeightKind");
  return index_of(kind) < kWeightKindCount ? kNames[index_of(kind)] : std::string_view("?");
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

void Backend::scale(float*, float, int64_t) {
  throw UnsupportedError("this backend has no scale kernel (granite's residual and logit scales): run it with --device cpu");
}

void Backend::softcap(float*, float, int64_t) {
  throw UnsupportedError("this backend has no soft-cap kernel (gemma2's final logits): run it with --device cpu");
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

}  // namespace lio
