// sampler.cpp — repetition, presence and frequency penalties, greedy, top-k, temperature,
// softmax, top-p, min-p, draw; optionally the row's log-probabilities.
//
// The chain follows sampler.h. Two implementation choices worth knowing:
//  * Everything after the penalty works on `candidates_`, the ids of the finite logits. Top-k
//    and top-p only need to know which tokens form the head of the distribution, not its
//    order, so they use nth_element (O(n)) rather than sorting the vocabulary (49k for SmolLM).
//    The final draw walks the survivors in token-id order.
//  * Temperature is applied inside the softmax as exp((l - l_max) / T) rather than by dividing
//    the logits first: (l - l_max) <= 0, so a tiny T gives -inf (probability 0), never
//    inf - inf = NaN. T = +inf is allowed and gives the uniform distribution over candidates.
//    The caller's logits therefore carry the repetition penalty but not the temperature.
// Determinism: every ordering breaks ties by lower token id, the draw walks the survivors in
// token-id order (not in whatever order nth_element left them), and it builds its own uniform
// double from the raw 64 RNG bits (std::uniform_real_distribution is implementation-defined),
// so the same seed gives the same tokens with any standard library. (One caveat: top-p sums
// partial masses in nth_element's order, so a nucleus boundary within ~1e-16 relative of
// top_p could round differently.)
#include "lio/sampler.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>

#include "lio/error.h"

namespace lio {

namespace {

// Formats a float the way a user typed it ("-1", "1.5", "nan", "inf").
std::string format_value(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Strict weak order "more likely first": higher logit, then lower token id.
// Callers guarantee the logits compared are not NaN.
struct MoreLikely {
  std::span<const float> logits;
  bool operator()(int32_t a, int32_t b) const {
    const float la = logits[static_cast<size_t>(a)];
    const float lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  }
};

// Uniform double in [0, 1) from the top 53 bits of one 64-bit draw: every value is a
// multiple of 2^-53, the spacing of doubles in [0.5, 1).
double uniform_01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Rejects NaN and +inf logits and the all -inf row. -inf is a legal "masked" logit.
// The first pass only counts (branch-free, so it vectorizes); the second finds the culprit.
void check_logits(std::span<const float> logits) {
  size_t n_bad = 0;     // NaN or +inf: `l < inf` is false for both
  size_t n_masked = 0;  // -inf
  for (const float l : logits) {
    n_bad += !(l < INFINITY);
    n_masked += l == -INFINITY;
  }
  if (n_bad > 0) {
    for (size_t i = 0; i < logits.size(); ++i) {
      if (std::isnan(logits[i])) {
        throw InvalidArgument("sampler: logit of token " + std::to_string(i) + " is NaN (vocab " +
                              std::to_string(logits.size()) + ")");
      }
      if (logits[i] == INFINITY) {
        throw InvalidArgument("sampler: logit of token " + std::to_string(i) +
                              " is +inf (an overflow upstream or in the repetition penalty?); only -inf may mask a token");
      }
    }
  }
  if (n_masked == logits.size()) {
    throw InvalidArgument("sampler: all " + std::to_string(logits.size()) +
                          " logits are -inf, nothing to sample");
  }
}

// Step (1) of the chain: the penalty over the window (see repeat_penalty_tokens).
void apply_repeat_penalty(std::span<float> logits, std::span<const int32_t> history, int32_t last_n,
                          float penalty) {
  if (penalty == 1.0f) return;
  for (const int32_t token : repeat_penalty_tokens(history, last_n, static_cast<int64_t>(logits.size()))) {
    float& l = logits[static_cast<size_t>(token)];
    l = repeat_penalty_logit(l, penalty);
  }
}

// Step (1b): OpenAI's presence and frequency penalties over the generated tokens:
// l[t] -= count(t) * frequency + (count(t) > 0) * presence (OpenAI API reference, "Parameter
// details"; vLLM applies them after the repetition penalty, as here).
void apply_presence_frequency(std::span<float> logits, std::span<const int32_t> output, float presence,
                              float frequency) {
  if ((presence == 0.0f && frequency == 0.0f) || output.empty()) return;
  std::vector<int32_t> sorted(output.begin(), output.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size();) {
    const int32_t token = sorted[i];
    size_t j = i;
    while (j < sorted.size() && sorted[j] == token) ++j;
    if (token < 0 || static_cast<size_t>(token) >= logits.size()) {
      throw InvalidArgument("sampler: output token " + std::to_string(token) + " is outside the vocabulary [0, " +
                            std::to_string(logits.size()) + ")");
    }
    logits[static_cast<size_t>(token)] -= static_cast<float>(j - i) * frequency + presence;
    i = j;
  }
}

}  // namespace

// ==== config ==================================================================================

void SamplerConfig::validate() const {
  // Each test is written so that NaN fails it (every comparison with NaN is false).
  if (!(temperature >= 0.0f)) {
    throw InvalidArgument("--temperature must be >= 0, got " + format_value(temperature));
  }
  if (top_k < 0) {
    throw InvalidArgument("--top-k must be >= 0 (0 = off), got " + std::to_string(top_k));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    throw InvalidArgument("--top-p must be in (0, 1], got " + format_value(top_p));
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    throw InvalidArgument("--min-p must be in [0, 1], got " + format_value(min_p));
  }
  // +inf is rejected too: 0 * inf would turn a zero logit into NaN.
  if (!(repeat_penalty > 0.0f && std::isfinite(repeat_penalty))) {
    throw InvalidArgument("--repeat-penalty must be > 0 and finite, got " +
                          format_value(repeat_penalty));
  }
  if (repeat_last_n < 0) {
    throw InvalidArgument("--repeat-last-n must be >= 0 (0 = off), got " +
                          std::to_string(repeat_last_n));
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    throw InvalidArgument("presence_penalty must be in [-2, 2], got " + format_value(presence_penalty));
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    throw InvalidArgument("frequency_penalty must be in [-2, 2], got " + format_value(frequency_penalty));
  }
  if (logprobs < -1 || logprobs > 20) {
    throw InvalidArgument("logprobs must be in [0, 20] (-1 = off), got " + std::to_string(logprobs));
  }
}

// ==== sampler =================================================================================

Sampler::Sampler(const SamplerConfig& config) : config_(config), rng_(config.seed) {
  config_.validate();
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history,
                        std::span<const int32_t> output) {
  if (logits.empty()) throw InvalidArgument("sampler: empty logits row (vocab size 0)");
  if (config_.logprobs >= 0) raw_.assign(logits.begin(), logits.end());
  apply_token_mask(logits);  // structured outputs: what the grammar cannot continue with
  // (1) penalties, in place; then the row is checked. Checking after the penalties also
  // catches a finite logit they overflowed (|l| near FLT_MAX), which would otherwise give
  // exp(inf - inf) = NaN below; NaN and +-inf pass through them as they are. The CUDA greedy
  // path applies the repetition penalty on the device, then checks the same row (rows with
  // presence / frequency penalties or logprobs come here).
  apply_repeat_penalty(logits, history, config_.repeat_last_n, config_.repeat_penalty);
  apply_presence_frequency(logits, output, config_.presence_penalty, config_.frequency_penalty);
  check_logits(logits);
  const int32_t token = draw(logits);
  if (config_.logprobs >= 0) record_logprobs(token);
  return token;
}

void Sampler::record_logprobs(int32_t token) {
  // raw_ holds no NaN or +inf and is not all -inf: the penalties keep NaN and +inf as they
  // are and -inf as -inf, so check_logits() on the penalized row vouched for it.
  // log p(t) = l_t - (l_max + log sum exp(l - l_max)).
  const float l_max = *std::max_element(raw_.begin(), raw_.end());
  double sum = 0.0;
  for (const float l : raw_) sum += std::exp(static_cast<double>(l - l_max));
  const double log_z = static_cast<double>(l_max) + std::log(sum);
  const auto logprob_of = [&](int32_t t) {
    return static_cast<float>(static_cast<double>(raw_[static_cast<size_t>(t)]) - log_z);
  };
  last_logprobs_.sampled = {token, logprob_of(token)};
  last_logprobs_.top.clear();
  const size_t k = std::min(static_cast<size_t>(config_.logprobs), raw_.size());
  if (k == 0) return;
  std::vector<int32_t> ids(raw_.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  const auto k_end = ids.begin() + static_cast<std::ptrdiff_t>(k);
  std::partial_sort(ids.begin(), k_end, ids.end(), MoreLikely{raw_});
  for (auto it = ids.begin(); it != k_end; ++it) last_logprobs_.top.push_back({*it, logprob_of(*it)});
}

int32_t Sampler::draw(std::span<const float> logits) {
  // (2) greedy shortcut. The row has a finite maximum now, so argmax is well defined.
  if (config_.temperature == 0.0f) return argmax(logits);
  const double kept_mass = filter(logits);

  // (8) renormalize and draw: scale u by the kept mass instead of dividing every probability.
  const double threshold = uniform_01(rng_) * kept_mass;
  double cumulative = 0.0;
  for (const int32_t id : candidates_) {
    cumulative += probs_[static_cast<size_t>(id)];
    if (threshold < cumulative) return id;
  }
  // Only reachable through rounding at the very top of the range: take the last token that
  // has any mass (the most likely one has mass 1, so one exists).
  for (auto it = candidates_.rbegin(); it != candidates_.rend(); ++it) {
    if (probs_[static_cast<size_t>(*it)] > 0.0f) return *it;
  }
  check_failed("a candidate has mass", "no candidate left after filtering");
}

void Sampler::probabilities(std::span<float> logits, std::span<const int32_t> history,
                            std::span<const int32_t> output, std::span<float> probs) {
  if (logits.empty()) throw InvalidArgument("sampler: empty logits row (vocab size 0)");
  if (probs.size() != logits.size()) {
    throw InvalidArgument("sampler: probabilities row holds " + std::to_string(probs.size()) + " floats, vocab is " +
                          std::to_string(logits.size()));
  }
  apply_token_mask(logits);
  apply_repeat_penalty(logits, history, config_.repeat_last_n, config_.repeat_penalty);
  apply_presence_frequency(logits, output, config_.presence_penalty, config_.frequency_penalty);
  check_logits(logits);
  std::fill(probs.begin(), probs.end(), 0.0f);
  if (config_.temperature == 0.0f) {  // greedy: all the mass on the argmax
    probs[static_cast<size_t>(argmax(logits))] = 1.0f;
    return;
  }
  const double kept_mass = filter(logits);
  for (const int32_t id : candidates_) {
    const auto i = static_cast<size_t>(id);
    probs[i] = static_cast<float>(static_cast<double>(probs_[i]) / kept_mass);
  }
}

double Sampler::uniform() { return uniform_01(rng_); }

std::span<uint32_t> Sampler::token_mask(int64_t vocab_size) {
  if (vocab_size < 1) throw InvalidArgument("sampler: token mask over " + std::to_string(vocab_size) + " tokens");
  mask_.assign(static_cast<size_t>((vocab_size + 31) / 32), 0u);
  return mask_;
}

void Sampler::apply_token_mask(std::span<float> logits) const {
  if (mask_.empty()) return;
  if (mask_.size() != (logits.size() + 31) / 32) {
    throw InvalidArgument("sampler: the token mask covers " + std::to_string(mask_.size()) + " words, the row " +
                          std::to_string(logits.size()) + " tokens");
  }
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (size_t w = 0; w < mask_.size(); ++w) {
    const uint32_t word = mask_[w];
    if (word == 0xffffffffu) continue;
    const size_t end = std::min(logits.size(), (w + 1) * 32);
    for (size_t t = w * 32; t < end; ++t)
      if (((word >> (t % 32)) & 1u) == 0) logits[t] = kMasked;
  }
}

double Sampler::filter(std::span<const float> logits) {
  // Candidates: every token with a finite logit; -inf ones have probability 0.
  candidates_.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] != -INFINITY) candidates_.push_back(static_cast<int32_t>(i));
  }
  const MoreLikely more_likely{logits};
  const auto at = [&](size_t i) { return candidates_.begin() + static_cast<std::ptrdiff_t>(i); };

  // (3) top-k: keep the k largest logits. nth_element is O(n) and leaves the k in an
  // unspecified order; the draw below puts the survivors back in token-id order.
  const size_t top_k = static_cast<size_t>(config_.top_k);
  const bool reordered = (top_k > 0 && top_k < candidates_.size()) || config_.top_p < 1.0f;
  if (top_k > 0 && top_k < candidates_.size()) {
    std::nth_element(at(0), at(top_k - 1), candidates_.end(), more_likely);
    candidates_.resize(top_k);
  }

  // (4) + (5) temperature and stable softmax. probs_[id] = exp((l_id - l_max) / T) is the
  // probability of token `id` relative to the most likely candidate (which gets exactly 1),
  // and `total` is the softmax denominator in those units; dividing by it is deferred to the
  // draw. probs_ is indexed by token id (only candidates' entries are written or read), so
  // the exps are computed once and survive the reordering of candidates_ below.
  // Sums are in double: 49k float terms would lose ~1e-4 of relative accuracy.
  float l_max = -INFINITY;
  for (const int32_t id : candidates_) l_max = std::max(l_max, logits[static_cast<size_t>(id)]);
  probs_.resize(logits.size());
  double total = 0.0;
  for (const int32_t id : candidates_) {
    const size_t i = static_cast<size_t>(id);
    probs_[i] = std::exp((logits[i] - l_max) / config_.temperature);
    total += probs_[i];
  }
  const auto prob_of = [&](int32_t id) { return probs_[static_cast<size_t>(id)]; };
  const auto mass_of = [&](size_t from, size_t to) {
    double mass = 0.0;
    for (size_t i = from; i < to; ++i) mass += prob_of(candidates_[i]);
    return mass;
  };

  // (6) top-p (Holtzman et al. 2020, sec. 3.1): keep the smallest most-likely-first prefix
  // whose mass reaches top_p. Equivalent to sorting all candidates and scanning, but found by
  // bisection on the prefix length with nth_element (O(n) expected in total, where a full
  // indirect sort of 49k ids costs milliseconds). Invariant: candidates_[0, lo) are the lo
  // most likely, with mass mass_lo < target, and the answer `kept` lies in (lo, hi].
  if (config_.top_p < 1.0f) {
    const double target = static_cast<double>(config_.top_p) * total;
    // Exact pre-filter, one linear pass: the tokens with p < eps = (1 - top_p) * total / n
    // hold less than (1 - top_p) * total between them, so the more likely tokens alone reach
    // the target and the nucleus (a most-likely-first prefix) contains none of them. For a
    // peaked distribution this leaves a handful of candidates for the bisection.
    const double eps = (1.0 - static_cast<double>(config_.top_p)) * total /
                       static_cast<double>(candidates_.size());
    std::erase_if(candidates_, [&](int32_t id) { return prob_of(id) < eps; });
    size_t lo = 0;
    size_t hi = candidates_.size();
    double mass_lo = 0.0;
    while (hi - lo > 64) {
      const size_t mid = lo + (hi - lo) / 2;
      std::nth_element(at(lo), at(mid), at(hi), more_likely);
      const double mass_mid = mass_lo + mass_of(lo, mid);
      if (mass_mid >= target) {
        hi = mid;
      } else {
        lo = mid;
        mass_lo = mass_mid;
      }
    }
    std::sort(at(lo), at(hi), more_likely);
    size_t kept = hi;  // if rounding leaves the scan short of the target, keep the whole range
    double mass = mass_lo;
    for (size_t i = lo; i < hi; ++i) {
      mass += prob_of(candidates_[i]);
      if (mass >= target) {
        kept = i + 1;
        break;
      }
    }
    candidates_.resize(kept);
  }

  // (7) min-p (Nguyen et al. 2024): drop p < min_p * p_max; in relative units p_max = 1.
  // The most likely candidate always survives (its 1 >= min_p because min_p <= 1).
  if (config_.min_p > 0.0f) {
    std::erase_if(candidates_, [&](int32_t id) { return prob_of(id) < config_.min_p; });
  }

  // The draw walks the survivors in token-id order. Any fixed order gives the same
  // distribution; this one does not depend on how a standard library's nth_element permutes.
  if (reordered) std::sort(candidates_.begin(), candidates_.end());

  double kept_mass = 0.0;
  for (const int32_t id : candidates_) kept_mass += prob_of(id);
  return kept_mass;
}

std::vector<int32_t> repeat_penalty_tokens(std::span<const int32_t> history, int32_t last_n,
                                           int64_t vocab_size) {
  if (last_n <= 0 || history.empty()) return {};
  const size_t window_len = std::min(history.size(), static_cast<size_t>(last_n));
  std::vector<int32_t> window(history.end() - static_cast<std::ptrdiff_t>(window_len), history.end());
  std::sort(window.begin(), window.end());
  window.erase(std::unique(window.begin(), window.end()), window.end());
  for (const int32_t token : window) {
    if (token < 0 || token >= vocab_size) {
      throw InvalidArgument("sampler: history token " + std::to_string(token) +
                            " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
    }
  }
  return window;
}

int32_t argmax(std::span<const float> values) {
  if (values.empty()) throw InvalidArgument("argmax: empty input");
  // Equivalent to the scalar loop "best = first i with values[i] > values[best]", skipping
  // NaN. Two passes instead: the maximum with kLanes independent running maxima (GCC
  // vectorizes this; one running maximum is a serial dependency it will not reorder without
  // -ffast-math), then the first index holding it. ~5x faster on a 49k-token row.
  // `v > m ? v : m` never takes a NaN, so NaN is never chosen over a number.
  constexpr size_t kLanes = 16;
  float lane_max[kLanes];
  std::fill(std::begin(lane_max), std::end(lane_max), -INFINITY);
  size_t i = 0;
  for (; i + kLanes <= values.size(); i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) {
      lane_max[j] = values[i + j] > lane_max[j] ? values[i + j] : lane_max[j];
    }
  }
  float max_value = -INFINITY;
  for (; i < values.size(); ++i) max_value = values[i] > max_value ? values[i] : max_value;
  for (const float m : lane_max) max_value = m > max_value ? m : max_value;
  const auto it = std::find(values.begin(), values.end(), max_value);
  return it == values.end() ? 0 : static_cast<int32_t>(it - values.begin());  // end: all NaN
}

}  // namespace lio
