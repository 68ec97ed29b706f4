// make_runner.cpp — the one place that knows which backends this build has.
#include <memory>
#include <string>

#include "lio/cpu_backend.h"
#include "lio/error.h"
#include "lio/model_runner.h"
#ifdef LIO_HAVE_CUDA
#include "lio/cuda_backend.h"
#endif

namespace lio {

ActivationPrecision parse_activation_precision(const std::string& text) {
  if (text == "f32") return ActivationPrecision::F32;
  if (text == "int8") return ActivationPrecision::Int8;
  if (text == "int8-token") return ActivationPrecision::Int8PerToken;
  throw InvalidArgument("--activations must be 'f32', 'int8' or 'int8-token', got '" + text + "'");
}

AttentionBackend parse_attention_backend(const std::string& text) {
  if (text == "flash") return AttentionBackend::Flash;
  if (text == "naive") return AttentionBackend::Naive;
  throw InvalidArgument("--attention-backend must be 'flash' or 'naive', got '" + text + "'");
}

const char* attention_backend_name(AttentionBackend backend) {
  return backend == AttentionBackend::Flash ? "flash" : "naive";
}

std::unique_ptr<Backend> make_backend(const LoadedModel& model, Device device, ActivationPrecision activations,
                                      AttentionBackend attention) {
  if (device == Device::Cpu) {
    const cpu::MatmulActivations a = activations == ActivationPrecision::Int8           ? cpu::MatmulActivations::Int8
                                      : activations == ActivationPrecision::Int8PerToken ? cpu::MatmulActivations::Int8PerToken
                                                                                    : cpu::MatmulActivations::F32;
    return std::make_unique<CpuBackend>(model.config, model.weights, a, attention);
  }
#ifdef LIO_HAVE_CUDA
  return std::make_unique<cuda::CudaBackend>(model.config, model.weights, activations, attention);
#else
  (void)activations, (void)attention;
  throw UnsupportedError("--device cuda: this build of LIO has no CUDA support (nvcc was not found "
                         "when it was configured); install the CUDA toolkit and reconfigure with "
                         "-DLIO_CUDA=ON, or run with --device cpu");
#endif
}

void check_kv_pool_options(const KvPoolOptions& pool) {
  if (pool.block_size < 1) throw InvalidArgument("--block-size must be >= 1, got " + std::to_string(pool.block_size));
  if (pool.kv_cache_mib < 0) throw InvalidArgument("--kv-cache-mib must be >= 0, got " + std::to_string(pool.kv_cache_mib));
}

std::unique_ptr<ModelRunner> make_runner(const LoadedModel& model, Device device,
                                         const KvPoolOptions& pool,
                                         ActivationPrecision activations) {
  check_kv_pool_options(pool);  // before the backend: a GPU backend uploads the weights
  return make_runner(make_backend(model, device, activations), pool);
}

std::unique_ptr<ModelRunner> make_runner(std::unique_ptr<Backend> backend,
                                         const KvPoolOptions& pool) {
  check_kv_pool_options(pool);
  const ModelConfig& config = backend->config();
  const int64_t mib = pool.kv_cache_mib > 0 ? pool.kv_cache_mib : default_kv_cache_mib(*backend);
  const int64_t n_blocks = kv_blocks_for_budget(config, pool.block_size, mib << 20, pool.dtype);
  if (n_blocks < 1) {
    throw InvalidArgument("--kv-cache-mib " + std::to_string(mib) + " holds no KV block of " +
                          std::to_string(pool.block_size) + " tokens (" +
                          std::to_string(kv_block_bytes(config, pool.block_size, pool.dtype)) +
                          " bytes)");
  }
  return std::make_unique<ModelRunner>(std::move(backend), KvPoolConfig{pool.block_size, n_blocks, pool.dtype});
}

}  // namespace lio
