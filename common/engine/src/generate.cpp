#include "lio/generate.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "lio/engine.h"
#include "lio/error.h"

namespace lio {

GenerateResult generate(ModelRunner& runner, const Tokenizer& tokenizer, std::span<const int32_t> prompt_ids,
                        const GenerateOptions& options, const TextCallback& on_text) {
  EngineConfig config;
  config.reuse_kv = options.use_kv_cache;
  // One request: the whole prompt in one step (chunking would only split chapter 01's prefill).
  config.scheduler.max_num_seqs = 1;
  config.scheduler.max_num_batched_tokens = runner.config().context_length;
  config.speculative = options.speculative;
  config.enforce_eager = options.enforce_eager;
  Engine engine(runner, tokenizer, config, options.draft);
  SamplingParams params;
  params.max_tokens = options.max_tokens;
  params.stop = options.stop;
  params.ignore_eos = options.ignore_eos;
  params.sampler = options.sampler;
  params.grammar = options.grammar;
  const auto t0 = std::chrono::steady_clock::now();
  engine.add_request(std::vector<int32_t>(prompt_ids.begin(), prompt_ids.end()), params);  // validates

  GenerateResult result;
  result.n_prompt_tokens = static_cast<int64_t>(prompt_ids.size());
  RequestOutput last;
  while (engine.has_unfinished()) {
    for (RequestOutput& o : engine.step()) {
      result.token_ids.insert(result.token_ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (!o.new_text.empty()) {
        if (on_text) on_text(o.new_text);
        result.text += o.new_text;
      }
      last = std::move(o);
    }
  }
  result.total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  result.finish_reason = last.finish_reason.value_or(FinishReason::Length);
  result.spec_method = spec_method_name(options.speculative.method);
  result.spec_num_drafts = last.n_spec_drafts;
  result.spec_num_draft_tokens = last.n_spec_draft_tokens;
  result.spec_num_accepted_tokens = last.n_spec_accepted_tokens;
  result.spec_num_rejections = last.n_spec_rejections;
  result.n_steps = engine.stats().n_steps;
  result.prefix_cache_hits = engine.snapshot().prefix_cache_hits;
  result.n_grammar_masks = engine.stats().n_grammar_masks;
  result.grammar_mask_ms = 1000.0 * engine.stats().grammar_mask_seconds;
  result.ttft_ms = last.ttft_ms;
  const int64_t n_gen = static_cast<int64_t>(result.token_ids.size());
  const double decode_ms = result.total_ms - result.ttft_ms;
  if (n_gen > 1 && decode_ms > 0) {
    result.tpot_ms = decode_ms / static_cast<double>(n_gen - 1);
    result.tokens_per_s = 1000.0 * static_cast<double>(n_gen - 1) / decode_ms;
  }
  if (options.use_kv_cache) {
    const ModelConfig& c = runner.config();
    result.kv_tokens = last.kv_tokens;
    const KvPool& pool = runner.kv_pool();
    result.kv_bytes = pool.dtype() == KvCacheDType::F32 ? c.kv_bytes_per_token(sizeof(float)) * last.kv_tokens
                                                        : 2 * c.n_layers * pool.slot_bytes() * last.kv_tokens;
    // Every KV cache group's blocks: with the hybrid pool a block holds one group's layers and a
    // windowed group keeps only its window's blocks, so the tokens alone do not say it.
    result.kv_bytes_allocated = last.kv_blocks * pool.block_bytes();
  }
  return result;
}

std::vector<int32_t> warmup_prompt(std::span<const int32_t> prompt_ids, int64_t vocab_size) {
  if (prompt_ids.empty()) throw InvalidArgument("warmup_prompt: the prompt is empty");
  if (vocab_size < 2) throw InvalidArgument("warmup_prompt: vocab_size " + std::to_string(vocab_size) + " < 2");
  for (const int32_t id : prompt_ids) {
    if (id < 0 || id >= vocab_size) {
      throw InvalidArgument("warmup_prompt: token " + std::to_string(id) + " outside [0, " +
                            std::to_string(vocab_size) + ")");
    }
  }
  const size_t n = prompt_ids.size();
  const auto differs = std::find_if(prompt_ids.begin(), prompt_ids.end(),
                                    [&](int32_t id) { return id != prompt_ids[0]; });
  if (differs == prompt_ids.end()) {
    return std::vector<int32_t>(n, static_cast<int32_t>((prompt_ids[0] + 1) % vocab_size));
  }
  const size_t shift = static_cast<size_t>(differs - prompt_ids.begin());
  std::vector<int32_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = prompt_ids[(i + shift) % n];
  return out;
}

}  // namespace lio
