// model_runner.h — one model on one device plus one sequence's KV cache: what generate()
// drives, whichever device runs the forward pass.
//
// vLLM's ModelRunner owns the model on its device and executes forward passes for the
// scheduler; ours does the same for a single sequence (chapter 05 batches it). The CPU runner
// wraps Model + KvCache (chapter 01); the CUDA runner (lio/cuda_runner.h) keeps the weights
// and the cache in device memory and copies only token ids in and logits out.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lio/kv_cache.h"
#include "lio/model.h"
#include "lio/model_config.h"
#include "lio/model_loader.h"
#include "lio/sampler.h"

namespace lio {

/// Where the forward pass runs.
enum class Device { Cpu, Cuda };

/// Parses "cpu" or "cuda" (the --device flag). Throws InvalidArgument otherwise.
Device parse_device(const std::string& text);
/// "cpu" or "cuda".
const char* device_name(Device device);

/// What the KV cache holds and costs right now.
struct KvUsage {
  int64_t n_tokens = 0;         ///< positions filled (tokens)
  int64_t used_bytes = 0;       ///< bytes holding those positions (K and V, all layers)
  int64_t allocated_bytes = 0;  ///< bytes the cache allocated
};

/// A model on a device with the KV cache of one sequence. Not thread-safe; one sequence at a
/// time. Implementations: CpuRunner (below), cuda::CudaRunner (lio/cuda_runner.h).
class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  /// The model's hyper-parameters.
  virtual const ModelConfig& config() const = 0;
  /// The device in words, e.g. "cpu" or "cuda:0 (NVIDIA H100 80GB HBM3)".
  virtual std::string device_description() const = 0;

  /// Starts a new sequence with room for `capacity_tokens` positions: the cache is emptied,
  /// and reallocated when its capacity differs. Throws InvalidArgument if capacity_tokens is
  /// outside [1, context_length]; CudaError / std::bad_alloc if memory runs out.
  virtual void reset(int64_t capacity_tokens) = 0;

  /// Runs `tokens` at the next positions of the sequence (n_tokens() .. + n - 1), appends their
  /// K/V to the cache and returns the logits on the host: (n, vocab_size) row-major when
  /// all_logits, else (1, vocab_size) for the last token. The span stays valid until the next
  /// forward() or reset(). Throws InvalidArgument if tokens is empty, an id is outside
  /// [0, vocab_size), or the chunk does not fit the cache (reset() first).
  virtual std::span<const float> forward(std::span<const int32_t> tokens, bool all_logits = false) = 0;

  /// Runs `tokens` like forward() (last-token logits only) and draws the next token from those
  /// logits with `sampler`, whose repetition penalty looks at `history` (the sequence so far:
  /// prompt, generated tokens, `tokens` included). The result is always
  /// sampler.sample(copy of forward(tokens), history): this default does exactly that on the
  /// host. A device runner may do part of the sampling where the logits are (CudaRunner: the
  /// greedy chain, penalty + argmax, on the GPU, copying 12 bytes back instead of the
  /// vocab_size floats). Throws as forward() and as Sampler::sample.
  virtual int32_t forward_sample(std::span<const int32_t> tokens, Sampler& sampler,
                                 std::span<const int32_t> history);

  /// Positions filled so far in the current sequence.
  virtual KvUsage kv_usage() const = 0;

 private:
  std::vector<float> sample_row_;  ///< (vocab_size) the logits forward_sample() hands the sampler
};

/// The CPU runner: Model (kernels/cpu) over a contiguous f32 KvCache in host memory.
class CpuRunner final : public ModelRunner {
 public:
  /// Keeps references to `config` and `weights` (they must outlive the runner). No cache is
  /// allocated until reset().
  CpuRunner(const ModelConfig& config, const Weights& weights);

  const ModelConfig& config() const override { return model_.config(); }
  std::string device_description() const override { return "cpu"; }
  void reset(int64_t capacity_tokens) override;
  std::span<const float> forward(std::span<const int32_t> tokens, bool all_logits = false) override;
  KvUsage kv_usage() const override;

 private:
  Model model_;
  std::unique_ptr<KvCache> cache_;
};

/// Creates the runner for `device` over `model` (which must outlive it). Device::Cuda uploads
/// the weights to GPU 0. Throws UnsupportedError when CUDA is asked for and this build has no
/// CUDA support or no usable GPU is present (the message says which), CudaError on a device
/// failure (e.g. out of memory).
std::unique_ptr<ModelRunner> make_runner(const LoadedModel& model, Device device);

}  // namespace lio
