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
