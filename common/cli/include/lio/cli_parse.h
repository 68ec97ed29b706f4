// cli_parse.h — the shared flags' strings turned into the core's enums. The core (lio_model,
// lio_backends, lio_parallel) takes the enums only; the words a user types, and the errors for a wrong one,
// live here beside the flags that read them (lio/cli_common.h).
#pragma once

#include <string>

#include "lio/communicator.h"
#include "lio/kv_pool.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "lio/prefix_cache.h"
#include "lio/scheduler.h"
#include "lio/speculative.h"

namespace lio {

/// Parses "cpu" or "cuda" (--device). Throws InvalidArgument otherwise ("--device must be 'cpu'
/// or 'cuda', got '<text>'").
Device parse_device(const std::string& text);

/// Parses "f32", "f16" or "int8" (--kv-cache-dtype). Throws InvalidArgument otherwise
/// ("--kv-cache-dtype must be 'f32', 'f16' or 'int8', got '<text>'").
KvCacheDType parse_kv_cache_dtype(const std::string& text);

/// Parses "library", "ring" or "nccl" (--all-reduce, chapter 08). Throws InvalidArgument
/// otherwise ("--all-reduce: unknown algorithm '<text>' (library|ring|nccl)").
AllReduceAlgorithm parse_all_reduce_algorithm(const std::string& text);

/// Parses "auto" or "stored" (AsStored), "f32", "f16" or "bf16" (--dtype). Throws
/// InvalidArgument otherwise ("--dtype must be 'auto' (keep the file's types), 'f32', 'f16' or
/// 'bf16', got '<text>'").
WeightMode parse_weight_mode(const std::string& text);

/// Parses "f32", "int8" or "int8-token" (--activations; "auto" is activations_from_options'
/// business). Throws InvalidArgument otherwise ("--activations must be 'f32', 'int8' or
/// 'int8-token', got '<text>'").
ActivationPrecision parse_activation_precision(const std::string& text);

/// Parses "flash", "naive" or "paged" (--attention-backend, chapter 07). Throws InvalidArgument
/// otherwise ("--attention-backend must be 'flash', 'naive' or 'paged', got '<text>'").
AttentionBackend parse_attention_backend(const std::string& text);

/// Parses "continuous" or "static" (--scheduling, chapter 05). Throws InvalidArgument otherwise
/// ("--scheduling must be continuous or static, got '<name>'").
SchedulingPolicy parse_scheduling_policy(const std::string& name);

/// Parses "recompute" or "swap" (--preemption, chapter 05). Throws InvalidArgument otherwise
/// ("--preemption must be recompute or swap, got '<name>'").
PreemptionMode parse_preemption_mode(const std::string& name);

/// Parses "none", "hash" or "radix" (--prefix-cache, chapter 04). Throws InvalidArgument
/// otherwise ("--prefix-cache must be none, hash or radix, got '<name>'").
PrefixCacheMode parse_prefix_cache_mode(const std::string& name);

/// Parses "none", "draft", "ngram", "early-exit", "medusa" or "eagle" (--spec-method, chapter
/// 06). Throws InvalidArgument otherwise ("--spec-method must be none, draft, ngram, early-exit,
/// medusa or eagle, got '<name>'").
SpecMethod parse_spec_method(const std::string& name);

/// Parses "rejection" or "typical" (--spec-acceptance, chapter 06 section 7). Throws
/// InvalidArgument otherwise ("--spec-acceptance must be rejection or typical, got '<name>'").
SpecAcceptance parse_spec_acceptance(const std::string& name);

}  // namespace lio
