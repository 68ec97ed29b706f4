// sampler.h — turns one row of logits into the next token id.
//
// Order of operations (as llama.cpp's default chain and HF generate apply them):
// repetition penalty -> greedy shortcut (temperature == 0) -> top-k -> temperature ->
// softmax -> top-p -> min-p -> renormalize -> draw with the seeded RNG.
// Sources: repetition penalty, Keskar et al. 2019 (CTRL) sec. 4.1; top-k, Fan et al. 2018;
// top-p (nucleus), Holtzman et al. 2020; min-p, Nguyen et al. 2024.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace lio {

/// Sampling settings. Defaults follow llama.cpp's CLI except where noted.
struct SamplerConfig {
  float temperature = 0.0f;     ///< 0 = greedy (argmax); must be >= 0
  int32_t top_k = 0;            ///< keep the k most likely tokens; 0 = off; must be >= 0
  float top_p = 1.0f;           ///< nucleus mass in (0, 1]; 1 = off
  float min_p = 0.0f;           ///< drop tokens with p < min_p * p_max; in [0, 1]; 0 = off
  float repeat_penalty = 1.0f;  ///< > 0; 1 = off. Positive logits divided, negative multiplied.
  int32_t repeat_last_n = 64;   ///< how many recent tokens the penalty looks at (>= 0)
  uint64_t seed = 42;           ///< same seed + same logits => same tokens

  /// Throws InvalidArgument with the flag name and the allowed range on a bad value
  /// (e.g. "--temperature must be >= 0, got -1").
  void validate() const;
};

/// Stateful sampler: owns the RNG (seeded once), so a run is reproducible.
class Sampler {
 public:
  /// Validates `config` (throws InvalidArgument).
  explicit Sampler(const SamplerConfig& config);

  /// Picks the next token. logits: (vocab) — modified in place by the repetition penalty
  /// (temperature is applied inside the softmax and not written back).
  /// history: tokens so far (prompt + generated) for the repetition penalty.
  /// -inf logits are allowed (masked, never drawn). Throws InvalidArgument if logits is empty,
  /// or, after the penalty (so a finite logit it overflows counts), holds a NaN or +inf or is
  /// all -inf; or if a history token in the penalty window is outside [0, vocab).
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);

  /// The validated settings.
  const SamplerConfig& config() const { return config_; }

 private:
  SamplerConfig config_;
  std::mt19937_64 rng_;
  std::vector<int32_t> candidates_;  ///< scratch: token ids
  std::vector<float> probs_;         ///< scratch: (vocab) exp((l - l_max) / T), by token id
};

/// Index of the largest value (first one on ties; NaN is never chosen over a number).
/// Throws InvalidArgument if empty.
int32_t argmax(std::span<const float> values);

/// The tokens the repetition penalty acts on: the distinct ids among the last `last_n` of
/// `history`, ascending. Empty when last_n <= 0. Each is penalized once however often it
/// repeats. Throws InvalidArgument if one is outside [0, vocab_size) (it would index past
/// the logits row).
std::vector<int32_t> repeat_penalty_tokens(std::span<const int32_t> history, int32_t last_n,
                                           int64_t vocab_size);

/// The CTRL repetition penalty (Keskar et al. 2019, sec. 4.1) on one logit: positive logits are
/// divided by `penalty`, the others multiplied, so with penalty > 1 a repeated token always
/// becomes less likely. Division and multiplication are correctly rounded in IEEE 754, so the
/// CUDA kernel (kernels/cuda, same formula) gets the same bits.
inline float repeat_penalty_logit(float logit, float penalty) {
  return logit > 0.0f ? logit / penalty : logit * penalty;
}

}  // namespace lio
