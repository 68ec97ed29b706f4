// cli_parse.h — the shared flags' strings turned into the core's enums. The core (lio_model,
// lio_parallel) takes the enums only; the words a user types, and the errors for a wrong one,
// live here beside the flags that read them (lio/cli_common.h).
#pragma once

#include <string>

#include "lio/communicator.h"
#include "lio/kv_pool.h"
#include "lio/model_runner.h"

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

}  // namespace lio
