#include "lio/sequence.h"

#include <algorithm>
#include <string>

#include "lio/error.h"

namespace lio {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Abort: return "abort";
  }
  return "?";
}

void SamplingParams::validate() const {
  if (max_tokens < 1) throw InvalidArgument("--max-tokens must be >= 1, got " + std::to_string(max_tokens));
  if (n < 1 || n > 1024) throw InvalidArgument("n (samples per prompt) must be in [1, 1024], got " + std::to_string(n));
  sampler.validate();
  if (grammar && ignore_eos) {
    throw InvalidArgument("ignore_eos cannot be combined with a response_format or grammar: a completed grammar "
                          "allows only a stop token");
  }
}

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

Sequence::Sequence(int64_t id, std::vector<int32_t> prompt, const SamplingParams& params, const Tokenizer& tokenizer)
    : arrival_time(Clock::now()),
      id_(id),
      token_ids_(std::move(prompt)),
      n_prompt_(static_cast<int64_t>(token_ids_.size())),
      params_((params.validate(), params)),
      sampler_(params.sampler),
      detok_(tokenizer),
      tokenizer_(&tokenizer) {
  if (token_ids_.empty()) throw InvalidArgument("the prompt is empty (0 tokens)");
  if (params_.grammar) grammar_ = std::make_unique<GrammarMatcher>(params_.grammar);
  request_id = id;
}

std::string Sequence::emit(bool final_flush) {
  size_t hold = 0;
  const size_t stop_at = find_stop(pending_, params_.stop, &hold);
  if (stop_at != std::string::npos) {
    pending_.resize(stop_at);
    hold = 0;
    finish_reason = FinishReason::Stop;
  }
  const size_t n_emit = final_flush || stop_at != std::string::npos ? pending_.size() : pending_.size() - hold;
  std::string out = pending_.substr(0, n_emit);
  pending_.erase(0, n_emit);
  text_ += out;
  return out;
}

std::string Sequence::append_token(int32_t token, int64_t context_length) {
  LIO_CHECK(!finish_reason.has_value(), "append_token on a finished sequence");
  const auto now = Clock::now();
  if (!first_token_time) first_token_time = now;
  last_token_time = now;
  token_times.push_back(now);
  if (grammar_ && !grammar_->accept_token(token)) {
    throw InternalError("sequence " + std::to_string(id_) + ": token " + std::to_string(token) +
                        " was sampled where its grammar does not allow it");
  }
  if (!params_.ignore_eos && tokenizer_->is_eog(token)) return finish(FinishReason::Stop);
  token_ids_.push_back(token);
  pending_ += detok_.push(token);
  std::string out = emit(false);
  if (finish_reason) return out;  // a stop string
  if (n_generated() >= params_.max_tokens || n_tokens() >= context_length) out += finish(FinishReason::Length);
  return out;
}

std::string Sequence::finish(FinishReason reason) {
  status = SequenceStatus::Finished;
  if (finish_reason) return {};  // already ended by a stop string: what follows it is dropped
  finish_reason = reason;
  pending_ += detok_.flush();
  return emit(true);  // may still find a stop string in the flushed bytes (reason becomes Stop)
}

void Sequence::truncate(int64_t n) {
  if (n < n_prompt_) {
    throw InvalidArgument("truncate: " + std::to_string(n) + " tokens would cut into the prompt of " +
                          std::to_string(n_prompt_));
  }
  if (n < n_tokens()) {
    if (grammar_) grammar_->rollback(n_tokens() - n);
    token_ids_.resize(static_cast<size_t>(n));
  }
  num_computed_tokens = std::min(num_computed_tokens, n);
}

}  // namespace lio
