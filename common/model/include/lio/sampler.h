// sampler.h — turns one row of logits into the next token id.
//
// Order of operations (as llama.cpp's default chain and HF generate apply them):
// repetition penalty -> presence / frequency penalties -> greedy shortcut (temperature == 0)
// -> top-k -> temperature -> softmax -> top-p -> min-p -> renormalize -> draw with the seeded
// RNG. Optionally the log-probabilities of the row as given (before any of that) are recorded.
// Sources: repetition penalty, Keskar et al. 2019 (CTRL) sec. 4.1; presence and frequency
// penalties, the OpenAI API reference (applied after the repetition penalty, as vLLM does);
// top-k, Fan et al. 2018; top-p (nucleus), Holtzman et al. 2020; min-p, Nguyen et al. 2024.
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
  /// OpenAI's presence penalty: subtracted once from the logit of every token that occurs in
  /// the generated output so far; in [-2, 2]; 0 = off.
  float presence_penalty = 0.0f;
  /// OpenAI's frequency penalty: subtracted from a token's logit once per occurrence in the
  /// generated output so far; in [-2, 2]; 0 = off.
  float frequency_penalty = 0.0f;
  /// Log-probabilities to record per sample (Sampler::last_logprobs): -1 = off; k in [0, 20] =
  /// the sampled token's and the k most likely tokens'.
  int32_t logprobs = -1;

  /// Throws InvalidArgument with the flag name and the allowed range on a bad value
  /// (e.g. "--temperature must be >= 0, got -1").
  void validate() const;
};

/// A token and its log-probability (natural log).
struct TokenLogprob {
  int32_t token = 0;     ///< token id
  float logprob = 0.0f;  ///< log p(token), <= 0
};

/// Log-probabilities at one sampled position, from log_softmax of the logits row as the model
/// gave it (before penalties, temperature and truncation: vLLM's default "raw" logprobs).
struct SampleLogprobs {
  TokenLogprob sampled;            ///< the token sample() returned
  std::vector<TokenLogprob> top;   ///< the config().logprobs most likely, most likely first
};

/// Stateful sampler: owns the RNG (seeded once), so a run is reproducible.
class Sampler {
 public:
  /// Validates `config` (throws InvalidArgument).
  explicit Sampler(const SamplerConfig& config);

  /// Picks the next token. logits: (vocab) — modified in place by the repetition penalty
  /// (temperature is applied inside the softmax and not written back).
  /// history: tokens so far (prompt + generated) for the repetition penalty.
  /// output: the generated tokens so far (a suffix of history; empty = none), for the
  /// presence and frequency penalties, which are subtracted in place after the repetition
  /// penalty. With config().logprobs >= 0 the row's log-probabilities are recorded
  /// (last_logprobs()).
  /// -inf logits are allowed (masked, never drawn). Throws InvalidArgument if logits is empty,
  /// or, after the penalties (so a finite logit they overflow counts), holds a NaN or +inf or
  /// is all -inf; or if a history token in the penalty window or an output token is outside
  /// [0, vocab).
  int32_t sample(std::span<float> logits, std::span<const int32_t> history,
                 std::span<const int32_t> output = {});

  /// The distribution sample() draws from, without drawing: the same penalties (applied to
  /// `logits` in place), then one-hot at the argmax when greedy, else top-k, temperature,
  /// softmax, top-p and min-p, renormalized. probs: (vocab) written, sums to 1. The RNG is not
  /// touched. Speculative decoding's p and q rows (chapter 06, lio/spec_decode.h). Throws as
  /// sample(), and InvalidArgument if probs.size() != logits.size().
  void probabilities(std::span<float> logits, std::span<const int32_t> history,
                     std::span<const int32_t> output, std::span<float> probs);
  /// One U[0, 1) draw from the sampler's seeded RNG (53 random bits): speculative decoding's
  /// acceptance tests and residual draws use the sequence's own stream, so a seeded request
  /// is reproducible.
  double uniform();
  /// The validated settings.
  const SamplerConfig& config() const { return config_; }

  /// Structured outputs (lio/grammar.h): the mask the next sample() / probabilities() calls
  /// obey, to be filled by the caller: bitmask_words(vocab_size) = ceil(vocab_size / 32) words,
  /// bit t % 32 of word t / 32 set when token t is allowed. Every other token's logit becomes
  /// -inf before the penalties; logprobs stay those of the unmasked row (vLLM's default). The
  /// mask stays in force until clear_token_mask(). Returns the words (zeroed).
  std::span<uint32_t> token_mask(int64_t vocab_size);
  /// Lifts the mask: every token may be drawn again.
  void clear_token_mask() { mask_.clear(); }
  /// True while a mask is in force (the GPU's greedy path, which knows no mask, skips the row).
  bool has_token_mask() const { return !mask_.empty(); }
  /// What the last sample() call recorded when config().logprobs >= 0 (empty `top` and token 0
  /// before the first call or when off).
  const SampleLogprobs& last_logprobs() const { return last_logprobs_; }

 private:
  int32_t draw(std::span<const float> logits);
  /// Steps (3)-(7) for a sampled (temperature > 0) row: leaves the survivors in candidates_
  /// (token-id order) with their relative mass in probs_, and returns the kept mass.
  double filter(std::span<const float> logits);
  void record_logprobs(int32_t token);
  SamplerConfig config_;
  std::mt19937_64 rng_;
  std::vector<int32_t> candidates_;  ///< scratch: token ids
  std::vector<float> probs_;         ///< scratch: (vocab) exp((l - l_max) / T), by token id
  std::vector<float> raw_;           ///< scratch: (vocab) the row before penalties (logprobs on)
  SampleLogprobs last_logprobs_;     ///< see last_logprobs()
  std::vector<uint32_t> mask_;       ///< see token_mask(); empty = no mask
  /// Sets the logits of tokens mask_ does not allow to -inf. Throws InvalidArgument if mask_
  /// covers another vocabulary size.
  void apply_token_mask(std::span<float> logits) const;
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
