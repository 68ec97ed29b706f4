// sequence.h — one request's state as it moves through the engine.
//
// vLLM v1 `Request` / nano-vllm `Sequence`: the tokens (prompt + generated), how many of them
// have their K/V in the pool (`num_computed_tokens`), the block table, sampling parameters with
// the sequence's own seeded Sampler, stop conditions, the streaming detokenizer, and status.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lio/detokenizer.h"
#include "lio/grammar.h"
#include "lio/sampler.h"
#include "lio/tokenizer.h"

namespace lio {

/// Why a sequence ended (OpenAI's `finish_reason` names).
enum class FinishReason {
  Stop,    ///< EOS or a stop string
  Length,  ///< max_tokens, the context length, or a KV pool too small to grow it
  Abort,   ///< abort_request()
};
/// "stop", "length" or "abort".
const char* finish_reason_name(FinishReason r);

/// Per-request generation settings.
struct SamplingParams {
  int64_t max_tokens = 128;       ///< generated tokens at most (>= 1)
  std::vector<std::string> stop;  ///< stop strings (not included in the output text)
  bool ignore_eos = false;        ///< keep generating past EOS (benchmarks need fixed lengths)
  SamplerConfig sampler;          ///< token selection (validated by Sampler)
  /// Samples of the prompt (parallel sampling, OpenAI's `n`): the prompt is prefilled once and
  /// its blocks are shared by the n sequences (BlockManager::fork); sample i draws with seed
  /// sampler.seed + i.
  int64_t n = 1;
  /// Structured outputs (lio/grammar.h): the output must follow this compiled JSON schema or
  /// grammar (GrammarCompiler::compile); each sample runs its own GrammarMatcher over it, and
  /// the engine masks its logits every step. Null: unconstrained.
  std::shared_ptr<const CompiledGrammar> grammar;

  /// Throws InvalidArgument for max_tokens < 1, n < 1, bad sampler settings, or a grammar with
  /// ignore_eos (a completed grammar allows only a stop token).
  void validate() const;
};

/// Where a sequence is in its life.
enum class SequenceStatus { Waiting, Running, Swapped, Finished };

/// One request. Created by the Engine; the Scheduler moves it between queues.
class Sequence {
 public:
  /// The clock of the timings (monotonic).
  using Clock = std::chrono::steady_clock;

  /// `prompt` must be non-empty; `tokenizer` must outlive the sequence. Throws
  /// InvalidArgument if the prompt is empty or `params` are invalid.
  Sequence(int64_t id, std::vector<int32_t> prompt, const SamplingParams& params,
           const Tokenizer& tokenizer);

  /// The engine's sequence id (a request's first sample has the request's id).
  int64_t id() const { return id_; }
  /// Prompt followed by generated tokens.
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  /// Prompt + generated tokens.
  int64_t n_tokens() const { return static_cast<int64_t>(token_ids_.size()); }
  /// Tokens of the prompt.
  int64_t n_prompt_tokens() const { return n_prompt_; }
  /// Tokens generated so far (EOS excluded).
  int64_t n_generated() const { return n_tokens() - n_prompt_; }
  /// Tokens whose K/V are in the pool (positions 0 .. num_computed_tokens - 1).
  int64_t num_computed_tokens = 0;
  /// Physical KV block ids, one table per KV cache group (lio/kv_cache_coordinator.h,
  /// GroupTables; vLLM v1's req_to_blocks per group): logical block i of group g ->
  /// block_tables[g][i]. One table for a model without a hybrid pool; a sliding-window group's
  /// entries before its window name the null block. Empty until the scheduler first allocates
  /// (KvCacheCoordinator::append_slots) and after the sequence's blocks are freed.
  std::vector<std::vector<int32_t>> block_tables;
  /// While swapped out (status Swapped): per group, the host swap-space blocks holding its K/V
  /// in order (-1 where the device table named the null block; KvCacheCoordinator::swap_out).
  std::vector<std::vector<int32_t>> host_block_tables;
  /// True if one of its tables holds an entry (blocks allocated, a cache hit, a fork).
  bool holds_blocks() const {
    for (const std::vector<int32_t>& t : block_tables)
      if (!t.empty()) return true;
    return false;
  }
  SequenceStatus status = SequenceStatus::Waiting;  ///< the scheduler's queue, or finished
  std::optional<FinishReason> finish_reason;        ///< set once the sequence is done
  /// Times the scheduler preempted this sequence.
  int64_t n_preemptions = 0;
  /// The request it belongs to (its own id, or the first sample's for a forked sample).
  int64_t request_id = 0;
  /// Which of the request's params().n samples it is (0 for the first).
  int64_t sample_index = 0;
  /// Samples still to fork off once this sequence's prompt is computed (n - 1, then 0).
  int64_t forks_pending = 0;
  /// Chapter 06: rows the scheduler may add after this sequence's next token for drafts (vLLM's
  /// lookahead slots), set by the engine before each schedule(); 0 = no speculation this step.
  int64_t num_lookahead_slots = 0;
  /// Chapter 06: the drafts verified this step, after the sequence's last token (empty = none).
  std::vector<int32_t> spec_token_ids;
  /// Chapter 06: the drafts' tree (DraftProposal::parents: spec_token_ids.size() + 1 parent
  /// indices, node 0 the sequence's last token), or empty when the drafts are a chain.
  std::vector<int32_t> spec_tree_parents;
  /// Structured outputs with drafts: (spec_token_ids.size() + 1, bitmask_words(vocab)) token
  /// masks, row i the tokens grammar() allows after the sequence's tokens and drafts 0 .. i - 1
  /// (the mask of verified row i); filled by the engine beside the step's pass, empty when the
  /// sequence is unconstrained or has no drafts this step (its one mask is in sampler()).
  std::vector<uint32_t> spec_token_masks;
  int64_t n_spec_drafts = 0;           ///< verification rounds with at least one draft
  int64_t n_spec_draft_tokens = 0;     ///< drafts verified, all rounds
  int64_t n_spec_accepted_tokens = 0;  ///< of those, accepted
  /// Rounds that ended at a rejected draft (the others accepted all k). Per-draft acceptance
  /// probability a = accepted / (accepted + rejections), the estimate E(a, k) assumes.
  int64_t n_spec_rejections = 0;

  /// The request's generation settings.
  const SamplingParams& params() const { return params_; }
  /// The sequence's own seeded sampler.
  Sampler& sampler() { return sampler_; }
  /// Structured outputs: where the output stands in params().grammar, advanced by
  /// append_token; null when unconstrained.
  GrammarMatcher* grammar() { return grammar_.get(); }

  /// Appends a sampled token: updates the text (stop strings held back until they can no
  /// longer match), checks EOS / stop strings / max_tokens / `context_length`, and returns the
  /// text that became final (UTF-8 complete, stop string excluded). Sets finish_reason when the
  /// sequence is done; an EOS token is not appended to the output. With a grammar the token
  /// also advances grammar(); throws InternalError if the grammar does not allow it (the mask
  /// should have made that impossible).
  std::string append_token(int32_t token, int64_t context_length);
  /// Ends the sequence now with `reason`; returns text still held back (flushed).
  std::string finish(FinishReason reason);
  /// Drops tokens past the first `n` (speculative rollback, chapter 06): token_ids and
  /// num_computed_tokens shrink to at most n, and grammar() rolls back as many tokens. Throws
  /// InvalidArgument if n < n_prompt_tokens.
  void truncate(int64_t n);

  /// Generated ids (EOS excluded).
  std::span<const int32_t> output_ids() const {
    return std::span<const int32_t>(token_ids_).subspan(static_cast<size_t>(n_prompt_));
  }
  /// Text emitted so far.
  const std::string& text() const { return text_; }

  Clock::time_point arrival_time;               ///< when add_request took it
  std::optional<Clock::time_point> first_token_time;  ///< first generated token
  Clock::time_point last_token_time;            ///< latest generated token
  std::optional<Clock::time_point> first_scheduled_time;  ///< first step that ran it (queue time ends)
  std::vector<Clock::time_point> token_times;   ///< when each generated token was appended

 private:
  std::string emit(bool final_flush);
  int64_t id_;
  std::vector<int32_t> token_ids_;
  int64_t n_prompt_;
  SamplingParams params_;
  Sampler sampler_;
  std::unique_ptr<GrammarMatcher> grammar_;  ///< see grammar()
  StreamingDetokenizer detok_;
  const Tokenizer* tokenizer_;
  std::string pending_;  ///< decoded, not yet emitted (may hold a stop-string prefix)
  std::string text_;     ///< emitted
};

/// Finds the earliest occurrence of any stop string in `text`; returns npos if none.
/// Also reports, via `holdback`, how many trailing bytes could still begin a stop string
/// (so a streamer must not emit them yet).
size_t find_stop(std::string_view text, std::span<const std::string> stops, size_t* holdback);

}  // namespace lio
