// The draw every speculative-decoding path shares (declared in lio/spec_decode.h): one token
// from a probability row by inverse CDF. Not an exercise: chapter 06's acceptance rule (Task 4,
// solutions|exercises/06_speculative/spec_decode.cpp) draws its correction and bonus tokens
// with it, so a learner's rule and the reference consume the same uniforms the same way.
#include <cmath>
#include <sstream>
#include <string>

#include "lio/error.h"
#include "lio/spec_decode.h"

namespace lio {

int32_t sample_from_probs(std::span<const float> probs, double u) {
  if (probs.empty())
    throw InvalidArgument("sample_from_probs: probs is empty (vocab must be >= 1)");
  if (!(u >= 0.0 && u < 1.0)) {  // also rejects NaN
    std::ostringstream msg;
    msg << "sample_from_probs: u must be in [0, 1), got " << u;
    throw InvalidArgument(msg.str());
  }
  // The mass in double: a 128k-entry float row summed in float loses ~1e-3 of it.
  double total = 0.0;
  for (size_t t = 0; t < probs.size(); ++t) {
    if (!(probs[t] >= 0.0f) || !std::isfinite(probs[t])) {  // negative, NaN or +inf
      std::ostringstream msg;
      msg << "sample_from_probs: probs[" << t << "] must be finite and >= 0, got " << probs[t];
      throw InvalidArgument(msg.str());
    }
    total += probs[t];
  }
  if (total == 0.0)
    throw InvalidArgument("sample_from_probs: probs sums to 0 (no token can be drawn)");

  // Scale u by the row's mass instead of dividing every probability by it: the row need not be
  // normalized (the acceptance rule passes max(0, p - q) as it is).
  const double threshold = u * total;
  double cumulative = 0.0;
  for (size_t t = 0; t < probs.size(); ++t) {
    cumulative += probs[t];
    if (threshold < cumulative) return static_cast<int32_t>(t);
  }
  // Reachable only through rounding at the very top of the range (u * total rounded up to
  // total): the last token with any mass, which exists because total > 0.
  for (size_t t = probs.size(); t-- > 0;) {
    if (probs[t] > 0.0f) return static_cast<int32_t>(t);
  }
  check_failed("total > 0", "a row with positive mass has no positive entry");
}

}  // namespace lio
