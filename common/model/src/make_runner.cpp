// make_runner.cpp — the one place that knows which backends this build has.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "lio/cpu_backend.h"
#include "lio/error.h"
#include "lio/model_runner.h"
#ifdef LIO_HAVE_CUDA
#include "cuda_runtime_info.h"
#include "lio/cuda_backend.h"
#endif

namespace lio {

const char* attention_backend_name(AttentionBackend backend) {
  switch (backend) {
    case AttentionBackend::Flash:
      return "flash";
    case AttentionBackend::Naive:
      return "naive";
    case AttentionBackend::Paged:
      return "paged";
  }
  return "?";
}

std::unique_ptr<Backend> make_backend(const LoadedModel& model, Device device, ActivationPrecision activations,
                                      AttentionBackend attention, int cuda_device) {
  if (device == Device::Cpu) {
    const cpu::MatmulActivations a = activations == ActivationPrecision::Int8           ? cpu::MatmulActivations::Int8
                                      : activations == ActivationPrecision::Int8PerToken ? cpu::MatmulActivations::Int8PerToken
                                                                                    : cpu::MatmulActivations::F32;
    return std::make_unique<CpuBackend>(model.config, model.weights, a, attention);
  }
#ifdef LIO_HAVE_CUDA
  return std::make_unique<cuda::CudaBackend>(model.config, model.weights, activations, attention, cuda_device);
#else
  (void)activations, (void)attention, (void)cuda_device;
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
  const int64_t n_blocks = kv_blocks_for_budget(config, pool.block_size, mib << 20, pool.dtype, pool.hybrid);
  if (n_blocks < 1) {
    throw InvalidArgument("--kv-cache-mib " + std::to_string(mib) + " holds no KV block of " +
                          std::to_string(pool.block_size) + " tokens (" +
                          std::to_string(kv_block_bytes(config, pool.block_size, pool.dtype, pool.hybrid)) +
                          " bytes)");
  }
  return std::make_unique<ModelRunner>(std::move(backend),
                                       KvPoolConfig{pool.block_size, n_blocks, pool.dtype, pool.hybrid});
}

std::unique_ptr<ModelRunner> make_parallel_runner(
    const LoadedModel& model, const ParallelConfig& parallel, AllReduceAlgorithm algorithm, Device device,
    const KvPoolOptions& pool, ActivationPrecision activations, AttentionBackend attention,
    const std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)>& wrap) {
  if (parallel.tensor_parallel_size < 1 || parallel.pipeline_parallel_size < 1) {
    throw InvalidArgument("--tensor-parallel-size " + std::to_string(parallel.tensor_parallel_size) +
                          " and --pipeline-parallel-size " + std::to_string(parallel.pipeline_parallel_size) +
                          " must be >= 1");
  }
  if (algorithm == AllReduceAlgorithm::Nccl && device != Device::Cuda) {
    throw InvalidArgument("--all-reduce nccl runs on GPUs: add --device cuda (one rank per GPU)");
  }
  return make_parallel_runner(model, parallel, world_communicator(algorithm), device, pool, activations, attention,
                              wrap);
}

std::unique_ptr<ModelRunner> make_parallel_runner(
    const LoadedModel& model, const ParallelConfig& parallel, std::unique_ptr<Communicator> world, Device device,
    const KvPoolOptions& pool, ActivationPrecision activations, AttentionBackend attention,
    const std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)>& wrap) {
  check_kv_pool_options(pool);
  if (world->algorithm() == AllReduceAlgorithm::Nccl && device != Device::Cuda) {
    throw InvalidArgument("--all-reduce nccl runs on GPUs: add --device cuda (one rank per GPU)");
  }
  check_world_size(world->size(), parallel);
  if (parallel.world_size() == 1) {
    std::unique_ptr<Backend> backend = make_backend(model, device, activations, attention);
    return make_runner(wrap ? wrap(std::move(backend)) : std::move(backend), pool);
  }
  const RankPlan plan = make_rank_plan(model.config, model.weights, parallel, world->rank());
  auto shard = std::make_unique<LoadedModel>(shard_model(model, plan));
  // Each rank on its host's next GPU (NCCL needs one per rank); local_rank() may be collective.
  [[maybe_unused]] const int host_rank = local_rank();  // unused in a build without CUDA
  [[maybe_unused]] const int host_ranks = local_size();
  int cuda_device = 0;
  if (device == Device::Cuda) {
#ifdef LIO_HAVE_CUDA
    cuda_device = cuda_device_for_rank(host_rank, host_ranks, cuda::cuda_device_count(),
                                       world->algorithm() == AllReduceAlgorithm::Nccl);
#endif
  }
  std::unique_ptr<Backend> backend = make_backend(*shard, device, activations, attention, cuda_device);
  if (wrap) backend = wrap(std::move(backend));
  // Every rank's pool has the same block ids (the driver's BlockManager hands them out): the
  // smallest count any rank's budget allows (pipeline stages may hold different layer counts).
  const int64_t mib = pool.kv_cache_mib > 0 ? pool.kv_cache_mib : default_kv_cache_mib(*backend);
  // KV cache groups (a hybrid pool): every rank's pool has the whole model's groups (the driver's:
  // the engine's coordinator reads rank 0's group count and windows), restricted to the layers it
  // holds: a pipeline stage's layer is in the group and lane one process gives it, and a group
  // with no layer on a stage is never read or written there. Blocks are sized by the whole
  // model's lanes and the rank's own (tensor-parallel) slot bytes. The forward batch carries every
  // group's tables to every rank (runner_rpc.cpp) and through the pipeline's micro-batches
  // (split_micro_batches). vLLM v1 does the same: get_kv_cache_configs
  // (vllm/v1/core/kv_cache_utils.py) merges every worker's layer specs, builds the groups from
  // the whole model's layer ratio, projects them onto each worker's layers and gives every worker
  // the smallest block count (the all_gather below). vLLM sizes a worker's pages by its projected
  // groups' largest layer count; LIO keeps the whole model's lanes on every stage, which is the
  // same for Gemma 3 at 2 and 3 stages (some group fills every lane on each stage) and keeps one
  // layer's lane the same in every layout.
  const ModelConfig& stage = backend->config();
  KvCacheGroups groups = kv_cache_groups(model.config, pool.hybrid, stage.first_layer - model.config.first_layer, stage.n_layers);
  const int64_t mine = kv_blocks_for_budget(stage, pool.block_size, mib << 20, pool.dtype, groups);
  std::vector<float> all(static_cast<size_t>(world->size()));
  const float mine_f = static_cast<float>(std::min<int64_t>(mine, 1 << 24));
  world->all_gather(&mine_f, all.data(), 1);
  const auto n_blocks = static_cast<int64_t>(*std::min_element(all.begin(), all.end()));
  if (n_blocks < 1) {
    throw InvalidArgument("--kv-cache-mib " + std::to_string(mib) + " holds no KV block of " +
                          std::to_string(pool.block_size) + " tokens on some rank");
  }
  auto runner = std::make_unique<ModelRunner>(
      std::move(backend), KvPoolConfig{pool.block_size, n_blocks, pool.dtype, pool.hybrid, std::move(groups)});
  std::unique_ptr<ParallelContext> ctx = make_parallel_context(plan, model.config, std::move(world), cuda_device);
  if (plan.tp_size > 1) {  // per-token int8 (issue 62): a row-parallel input's scale is the whole row's
    Communicator* group = ctx->tp.get();
    runner->backend().set_row_parallel_max([group, gathered = std::vector<float>()](float* row_max, int64_t n) mutable {
      gathered.resize(static_cast<size_t>(n * group->size()));
      group->all_gather(row_max, gathered.data(), n);
      for (int r = 0; r < group->size(); ++r)
        for (int64_t i = 0; i < n; ++i) row_max[i] = std::max(row_max[i], gathered[static_cast<size_t>(r * n + i)]);
    });
  }
  ctx->shard = std::move(shard);
  runner->set_parallel(std::move(ctx));
  return runner;
}

}  // namespace lio
