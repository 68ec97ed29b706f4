#include "lio/model_runner.h"

#include <string>

#include "lio/error.h"

namespace lio {

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::Cpu;
  if (text == "cuda") return Device::Cuda;
  throw InvalidArgument("--device must be 'cpu' or 'cuda', got '" + text + "'");
}

const char* device_name(Device device) { return device == Device::Cpu ? "cpu" : "cuda"; }

int32_t ModelRunner::forward_sample(std::span<const int32_t> tokens, Sampler& sampler,
                                    std::span<const int32_t> history) {
  const std::span<const float> logits = forward(tokens);
  sample_row_.assign(logits.begin(), logits.end());  // the penalty writes into the row
  return sampler.sample(sample_row_, history);
}

CpuRunner::CpuRunner(const ModelConfig& config, const Weights& weights) : model_(config, weights) {}

void CpuRunner::reset(int64_t capacity_tokens) {
  if (cache_ && cache_->capacity_tokens() == capacity_tokens) {
    cache_->clear();
  } else {
    cache_.reset();  // free the old slab before allocating the new one
    cache_ = std::make_unique<KvCache>(model_.config(), capacity_tokens);  // validates
  }
}

std::span<const float> CpuRunner::forward(std::span<const int32_t> tokens, bool all_logits) {
  if (!cache_) throw InvalidArgument("CpuRunner::forward: call reset() to start a sequence first");
  return model_.forward(tokens, *cache_, all_logits);
}

KvUsage CpuRunner::kv_usage() const {
  if (!cache_) return {};
  return {cache_->n_tokens(), cache_->used_bytes(), cache_->allocated_bytes()};
}

}  // namespace lio
