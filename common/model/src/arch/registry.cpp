// registry.cpp — the families LIO runs (lio/architecture.h); a new family adds one line here.
#include <string>

#include "families.h"
#include "lio/error.h"
#include "lio/model_config.h"

namespace lio {

namespace {

constexpr const Architecture* kFamilies[] = {&arch::kLlama,  &arch::kQwen2,  &arch::kQwen3,
                                             &arch::kGemma2, &arch::kGemma3, &arch::kGranite};

}  // namespace

std::span<const Architecture* const> architectures() { return kFamilies; }

int64_t dim_size(Dim dim, const ModelConfig& c) {
  switch (dim) {
    case Dim::None: return 0;
    case Dim::DModel: return c.d_model;
    case Dim::HeadDim: return c.head_dim;
    case Dim::Heads: return c.n_heads * c.head_dim;
    case Dim::KvHeads: return c.n_kv_heads * c.head_dim;
    case Dim::DFf: return c.d_ff;
    case Dim::MlaQ: return c.n_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim);
    case Dim::MlaKvA: return c.kv_lora_rank + c.qk_rope_head_dim;
    case Dim::MlaKB: return c.n_heads * c.qk_nope_head_dim;
    case Dim::MlaVB: return c.n_heads * c.v_head_dim;
    case Dim::KvLoraRank: return c.kv_lora_rank;
  }
  throw InternalError("dim_size: unknown Dim " + std::to_string(static_cast<int>(dim)));
}

std::string architecture_names() {
  std::string out;
  for (const Architecture* a : kFamilies) out += (out.empty() ? "" : ", ") + std::string(a->name);
  return out;
}

const Architecture& find_architecture(std::string_view name, const std::string& source) {
  for (const Architecture* a : kFamilies)
    if (a->name == name) return *a;
  throw UnsupportedError(source + ": architecture '" + std::string(name) + "' is not supported (supported: " +
                         architecture_names() + ")");
}

const Architecture& layer_architecture(const ModelConfig& config) {
  const Architecture& family = find_architecture(config.architecture, config.name);
  if (!config.is_mla()) return family;
  if (family.name != arch::kLlama.name) {
    throw UnsupportedError(config.name + ": an MLA model of the '" + std::string(family.name) +
                           "' family; chapter 02 converts llama-family models only");
  }
  return arch::kLlamaMla;
}

const Architecture& find_hf_architecture(std::string_view model_type, const std::string& source) {
  for (const Architecture* a : kFamilies)
    if (a->hf_model_type == model_type) return *a;
  return find_architecture(model_type, source);
}

}  // namespace lio
