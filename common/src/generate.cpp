#include "lio/generate.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include "lio/error.h"

namespace lio {
namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
}  // namespace

const char* finish_reason_name(FinishReason r) { return r == FinishReason::Stop ? "stop" : "length"; }

size_t find_stop(std::string_view text, std::span<const std::string> stops, size_t* holdback) {
  size_t first = std::string_view::npos;
  size_t hold = 0;
  for (const std::string& s : stops) {
    if (s.empty()) continue;
    const size_t at = text.find(s);
    if (at != std::string_view::npos) first = std::min(first, at);
    // Longest suffix of text that is a proper prefix of s.
    for (size_t k = std::min(s.size() - 1, text.size()); k > 0; --k) {
      if (text.substr(text.size() - k) == std::string_view(s).substr(0, k)) {
        hold = std::max(hold, k);
        break;
      }
    }
  }
  if (holdback) *holdback = hold;
  return first;
}

GenerateResult generate(ModelRunner& runner, const Tokenizer& tokenizer, std::span<const int32_t> prompt_ids,
                        const GenerateOptions& options, const TextCallback& on_text) {
  const ModelConfig& c = runner.config();
  const int64_t n_prompt = static_cast<int64_t>(prompt_ids.size());
  if (n_prompt == 0) throw InvalidArgument("the prompt is empty (0 tokens)");
  if (n_prompt >= c.context_length) {
    throw InvalidArgument("prompt has " + std::to_string(n_prompt) + " tokens; the context holds " +
                          std::to_string(c.context_length) + " (leave room for at least one new token)");
  }
  if (options.max_tokens < 1) {
    throw InvalidArgument("--max-tokens must be >= 1, got " + std::to_string(options.max_tokens));
  }
  Sampler sampler(options.sampler);  // validates
  const int64_t capacity = std::min(c.context_length, n_prompt + options.max_tokens);

  GenerateResult result;
  result.n_prompt_tokens = n_prompt;
  std::vector<int32_t> history(prompt_ids.begin(), prompt_ids.end());
  // The cached path keeps one cache for the whole run; recompute rebuilds it every step.
  runner.reset(capacity);
  StreamingDetokenizer detok(tokenizer);
  std::string pending;  // text decoded but not yet emitted (may hold a stop-string prefix)
  const auto t0 = Clock::now();
  Clock::time_point t_first;

  auto emit = [&](bool final_flush) {
    size_t hold = 0;
    const size_t stop_at = find_stop(pending, options.stop, &hold);
    if (stop_at != std::string::npos) {
      pending.resize(stop_at);
      hold = 0;
    }
    const size_t n_emit = final_flush ? pending.size() : pending.size() - hold;
    if (n_emit > 0) {
      if (on_text) on_text(std::string_view(pending).substr(0, n_emit));
      result.text.append(pending, 0, n_emit);
      pending.erase(0, n_emit);
    }
    return stop_at != std::string::npos;
  };

  for (int64_t step = 0; step < options.max_tokens; ++step) {
    if (static_cast<int64_t>(history.size()) >= capacity) break;
    // Step 0 prefills the whole prompt; later steps feed only the newest token, or, without
    // the cache, the whole sequence again into an emptied one.
    std::span<const int32_t> feed = step == 0 || !options.use_kv_cache
                                        ? std::span<const int32_t>(history)
                                        : std::span<const int32_t>(&history.back(), 1);
    if (!options.use_kv_cache) runner.reset(capacity);
    const int32_t next = runner.forward_sample(feed, sampler, history);
    if (step == 0) {
      t_first = Clock::now();
      result.ttft_ms = ms_since(t0);
    }
    if (!options.ignore_eos && tokenizer.is_eog(next)) {
      result.finish_reason = FinishReason::Stop;
      break;
    }
    history.push_back(next);
    result.token_ids.push_back(next);
    pending += detok.push(next);
    if (emit(false)) {
      result.finish_reason = FinishReason::Stop;
      break;
    }
  }
  if (result.finish_reason != FinishReason::Stop) {
    pending += detok.flush();
    if (emit(true)) result.finish_reason = FinishReason::Stop;
  } else {
    emit(true);
  }
  result.total_ms = ms_since(t0);
  const int64_t n_gen = static_cast<int64_t>(result.token_ids.size());
  const double decode_ms = result.total_ms - result.ttft_ms;
  if (n_gen > 1 && decode_ms > 0) {
    result.tpot_ms = decode_ms / static_cast<double>(n_gen - 1);
    result.tokens_per_s = 1000.0 * static_cast<double>(n_gen - 1) / decode_ms;
  }
  if (options.use_kv_cache) {
    const KvUsage kv = runner.kv_usage();
    result.kv_bytes = kv.used_bytes;
    result.kv_bytes_allocated = kv.allocated_bytes;
    result.kv_tokens = kv.n_tokens;
  }
  return result;
}

}  // namespace lio
