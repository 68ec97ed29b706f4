// cli_parse.cpp — the --device, --kv-cache-dtype and --all-reduce words (lio/cli_parse.h).
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

}  // namespace lio
