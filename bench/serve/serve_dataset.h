// serve_dataset.h — the serving benchmark's requests: real English prompts of chosen token
// lengths, output lengths, and Poisson gaps, all drawn from one seed.
//
// The text is a corpus file (default: the GNU GPL v3 that Debian's base-files package ships at
// /usr/share/common-licenses/GPL-3, on every Debian system; any UTF-8 text works). A prompt is
// a window of the corpus's tokens, starting at a word, decoded back to text; its length is
// then re-counted by the model's tokenizer (both servers load the same GGUF, so both see the
// same count). Lengths are uniform in [len * (1 - range_ratio), len * (1 + range_ratio)], as
// vLLM's random dataset draws them (`vllm bench serve --random-range-ratio`); gaps are
// exponential at 1 request/s, divided by the rate of the run (trace.h's arrival_times_s).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../05_continuous_batching/trace.h"
#include "lio/error.h"
#include "lio/tokenizer.h"

namespace lio::bench {

/// Length ranges of the serving dataset (tokens).
struct ServeShape {
  int64_t input_len = 256;   ///< mean prompt tokens
  int64_t output_len = 128;  ///< mean max_tokens (generated exactly: ignore_eos)
  double range_ratio = 0.5;  ///< lengths uniform in [len * (1 - r), len * (1 + r)], r in [0, 1)
};

/// The requests: trace[i].prompt holds prompt i's token ids (as the tokenizer encodes
/// texts[i]), trace[i].output_tokens its max_tokens, trace[i].unit_gap its arrival gap at 1 req/s.
struct ServeDataset {
  std::vector<TraceRequest> trace;  ///< (n_requests)
  std::vector<std::string> texts;   ///< (n_requests) prompt text sent to the servers
};

/// Draws `n_requests` requests from `corpus` with `seed`. Throws InvalidArgument if the corpus
/// has fewer than 64 tokens or a length range is empty.
inline ServeDataset make_serve_dataset(const Tokenizer& tok, const std::string& corpus,
                                       int64_t n_requests, const ServeShape& shape, uint64_t seed) {
  if (shape.input_len < 1 || shape.output_len < 1 || shape.range_ratio < 0 ||
      shape.range_ratio >= 1)
    throw InvalidArgument("dataset: lengths must be >= 1 and range_ratio in [0, 1)");
  const std::vector<int32_t> ids = tok.encode(corpus, /*parse_special=*/false, /*add_bos=*/false);
  if (ids.size() < 64)
    throw InvalidArgument("dataset: the corpus has only " + std::to_string(ids.size()) + " tokens");
  std::mt19937_64 rng(seed);
  auto length = [&](int64_t mean) {
    const auto lo =
        std::max<int64_t>(1, std::llround(static_cast<double>(mean) * (1 - shape.range_ratio)));
    const auto hi =
        std::max<int64_t>(lo, std::llround(static_cast<double>(mean) * (1 + shape.range_ratio)));
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::uniform_int_distribution<size_t> start(0, ids.size() - 1);
  std::exponential_distribution<double> gap(1.0);

  ServeDataset d;
  for (int64_t i = 0; i < n_requests; ++i) {
    const int64_t n_prompt = length(shape.input_len);
    const int64_t n_output = length(shape.output_len);
    // Start at a word (a token whose text begins with a space), within the next 32 tokens.
    size_t s = start(rng);
    for (int k = 0; k < 32 && tok.decode(std::span<const int32_t>(&ids[s], 1)).rfind(' ', 0) != 0;
         ++k)
      s = (s + 1) % ids.size();
    std::vector<int32_t> window(static_cast<size_t>(n_prompt));
    for (int64_t k = 0; k < n_prompt; ++k)
      window[static_cast<size_t>(k)] = ids[(s + static_cast<size_t>(k)) % ids.size()];
    std::string text = tok.decode(window);
    text.erase(0, std::min(text.find_first_not_of(" \n\t"), text.size()));
    TraceRequest r;
    r.prompt = tok.encode(text, /*parse_special=*/false, tok.add_bos_default());
    r.output_tokens = n_output;
    r.unit_gap = gap(rng);
    d.trace.push_back(std::move(r));
    d.texts.push_back(std::move(text));
  }
  return d;
}

}  // namespace lio::bench
