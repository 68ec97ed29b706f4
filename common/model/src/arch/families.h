// families.h — the Architecture each arch/<family>.cpp defines, for the registry.
#pragma once

#include "lio/architecture.h"

namespace lio::arch {

extern const Architecture kLlama;  ///< arch/llama.cpp
extern const Architecture kQwen2;  ///< arch/qwen2.cpp
extern const Architecture kQwen3;  ///< arch/qwen3.cpp
extern const Architecture kGemma2;  ///< arch/gemma2.cpp
extern const Architecture kGemma3;  ///< arch/gemma3.cpp
extern const Architecture kGranite;  ///< arch/granite.cpp
/// arch/mla.cpp: a llama model chapter 02 converted to MLA (layer_architecture, not the registry)
extern const Architecture kLlamaMla;

}  // namespace lio::arch
