// families.h — the Architecture each arch/<family>.cpp defines, for the registry.
#pragma once

#include "lio/architecture.h"

namespace lio::arch {

extern const Architecture kLlama;  ///< arch/llama.cpp
extern const Architecture kQwen2;  ///< arch/qwen2.cpp
extern const Architecture kQwen3;  ///< arch/qwen3.cpp
extern const Architecture kGemma3;  ///< arch/gemma3.cpp

}  // namespace lio::arch
