// cli_parse.cpp — the --device, --kv-cache-dtype, --all-reduce, --dtype, --activations,
// --attention-backend, --scheduling, --preemption, --prefix-cache and --spec-method words
// (lio/cli_parse.h).
#include "lio/cli_parse.h"

#include "lio/error.h"

namespace lio {

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::Cpu;
  if (text == "cuda") return Device::Cuda;
  throw InvalidArgument("--device must be 'cpu' or 'cuda', got '" + text + "'");
}

KvCacheDType parse_kv_cache_dtype(const std::string& text) {
  if (text == "f32") return KvCacheDType::F32;
  if (text == "f16") return KvCacheDType::F16;
  if (text == "int8") return KvCacheDType::Int8;
  throw InvalidArgument("--kv-cache-dtype must be 'f32', 'f16' or 'int8', got '" + text + "'");
}

AllReduceAlgorithm parse_all_reduce_algorithm(const std::string& text) {
  if (text == "library") return AllReduceAlgorithm::Library;
  if (text == "ring") return AllReduceAlgorithm::Ring;
  if (text == "nccl") return AllReduceAlgorithm::Nccl;
  throw InvalidArgument("--all-reduce: unknown algorithm " + single_quoted(text) + " (library|ring|nccl)");
}

WeightMode parse_weight_mode(const std::string& text) {
  if (text == "auto" || text == "stored") return WeightMode::AsStored;
  if (text == "f32") return WeightMode::F32;
  if (text == "f16") return WeightMode::F16;
  if (text == "bf16") return WeightMode::BF16;
  throw InvalidArgument("--dtype must be 'auto' (keep the file's types), 'f32', 'f16' or 'bf16', got '" +
                        text + "'");
}

ActivationPrecision parse_activation_precision(const std::string& text) {
  if (text == "f32") return ActivationPrecision::F32;
  if (text == "int8") return ActivationPrecision::Int8;
  if (text == "int8-token") return ActivationPrecision::Int8PerToken;
  throw InvalidArgument("--activations must be 'f32', 'int8' or 'int8-token', got '" + text + "'");
}

AttentionBackend parse_attention_backend(const std::string& text) {
  if (text == "flash") return AttentionBackend::Flash;
  if (text == "naive") return AttentionBackend::Naive;
  if (text == "paged") return AttentionBackend::Paged;
  throw InvalidArgument("--attention-backend must be 'flash', 'naive' or 'paged', got '" + text + "'");
}

SchedulingPolicy parse_scheduling_policy(const std::string& name) {
  if (name == "continuous") return SchedulingPolicy::Continuous;
  if (name == "static") return SchedulingPolicy::Static;
  throw InvalidArgument("--scheduling must be continuous or static, got '" + name + "'");
}

PreemptionMode parse_preemption_mode(const std::string& name) {
  if (name == "recompute") return PreemptionMode::Recompute;
  if (name == "swap") return PreemptionMode::Swap;
  throw InvalidArgument("--preemption must be recompute or swap, got '" + name + "'");
}

PrefixCacheMode parse_prefix_cache_mode(const std::string& name) {
  if (name == "none") return PrefixCacheMode::None;
  if (name == "hash") return PrefixCacheMode::Hash;
  if (name == "radix") return PrefixCacheMode::Radix;
  throw InvalidArgument("--prefix-cache must be none, hash or radix, got '" + name + "'");
}

SpecMethod parse_spec_method(const std::string& name) {
  if (name == "none") return SpecMethod::None;
  if (name == "draft") return SpecMethod::Draft;
  if (name == "ngram") return SpecMethod::Ngram;
  if (name == "early-exit") return SpecMethod::EarlyExit;
  if (name == "medusa") return SpecMethod::Medusa;
  if (name == "eagle") return SpecMethod::Eagle;
  throw InvalidArgument("--spec-method must be none, draft, ngram, early-exit, medusa or eagle, got '" + name + "'");
}

SpecAcceptance parse_spec_acceptance(const std::string& name) {
  if (name == "rejection") return SpecAcceptance::Rejection;
  if (name == "typical") return SpecAcceptance::Typical;
  throw InvalidArgument("--spec-acceptance must be rejection or typical, got '" + name + "'");
}

}  // namespace lio
