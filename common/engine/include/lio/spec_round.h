// spec_round.h — one speculating sequence's round after the target's forward pass.
//
// Chapter 06's exercise point (solutions|exercises/06_speculative/spec_decode.cpp, Task 5): the
// engine drafts k tokens for a decoding sequence, runs its last token and the k drafts as k + 1
// rows of one target forward pass (which writes their K/V into the sequence's blocks), and then
// calls finish_speculative_round for the sequence. The round decides which tokens the sequence
// gets (with Task 4's verify_drafts) and leaves the sequence's KV cache consistent with them.
// The engine keeps what surrounds it: appending the tokens (stop checks), the statistics, the
// prefix cache and the drafter's own rollback. Sources: Leviathan et al. 2023 (Algorithm 1),
// vLLM v1 `vllm/v1/core/sched/scheduler.py` (`update_from_output`), Kwon et al. 2023 (the
// paged pool the blocks return to).
#pragma once

#include <cstdint>
#include <span>

#include "lio/spec_decode.h"

namespace lio {

/// What the target's one forward pass gave a speculating sequence.
struct SpecRoundPass {
  /// (k + 1, vocab) row-major: the pass's logits rows for this sequence, in row order; row 0 at
  /// the position of the sequence's last token, row i (i >= 1) at the position of drafts[i - 1].
  std::span<const float> logits;
  std::span<const int32_t> drafts;     ///< (k) the drafted token ids, k >= 1
  /// (k, vocab) row-major: the distribution q_i each draft was drawn from, or empty when the
  /// drafter is deterministic (Task 4's draft_probs).
  std::span<const float> draft_probs;
  int64_t vocab = 0;  ///< tokens in the vocabulary, >= 1
};

/// The sequence as the round sees it: its tokens, its sampler, and its KV bookkeeping. The
/// Engine implements it over a Sequence, its Sampler, the BlockManager and the KV cache groups;
/// a test may fake it. Units: tokens; a position's K/V live in block position / block_size of
/// each of the sequence's block tables.
class SpecRoundSequence {
 public:
  virtual ~SpecRoundSequence() = default;

  /// The sequence's tokens, prompt + generated, as they stand during the round: the drafts are
  /// not among them, and the tokens the round returns are appended by the engine after it.
  virtual std::span<const int32_t> token_ids() const = 0;
  /// The target's sampling distribution for one logits row, built as the sequence's own
  /// sampling would build it (repetition, presence and frequency penalties over `history`,
  /// then temperature, top-k, top-p, min-p; one-hot at the argmax when greedy).
  /// logits: (vocab) one row; history: the tokens that precede the row's position, beginning
  /// with token_ids(); probs: (vocab) written, sums to 1. Does not draw. Throws InvalidArgument
  /// if the sizes disagree or history does not begin with token_ids().
  virtual void target_probs(std::span<const float> logits, std::span<const int32_t> history,
                            std::span<float> probs) = 0;
  /// One U[0, 1) draw from the sequence's own seeded stream (Task 4's `uniform`).
  virtual double uniform() = 0;

  /// Positions 0 .. n-1 whose K/V the sequence's cache counts as valid. When the round starts
  /// it is the count before the pass: the last token's position and the drafts' come after it.
  virtual int64_t num_computed_tokens() const = 0;
  /// Sets the count num_computed_tokens() reports (the scheduler writes the next rows from it).
  virtual void set_num_computed_tokens(int64_t n) = 0;
  /// Cuts every block table of the sequence to the blocks that positions 0 .. n_tokens - 1
  /// occupy; the blocks past them go back to the pool (a shared block keeps its other
  /// holders). No-op for a table that is not longer. Throws InvalidArgument if n_tokens < 0.
  virtual void truncate_blocks(int64_t n_tokens) = 0;
};

/// Task 5. The speculative round's verification and rollback for one sequence
/// (docs/06_speculative.md, section 6, "The round: one pass, then the rollback", and "Task 5").
/// Called by the Engine once per speculating sequence per step, after the forward pass that ran
/// its last token and its k drafts, before the returned tokens are appended to it.
/// Returns what Task 4's verify_drafts decides for the sequence's drafts when p_i is the
/// target's sampling distribution (seq.target_probs) of the pass's row i: the accepted drafts
/// followed by one token drawn by the rule (size n_accepted + 1), and n_accepted in [0, k].
/// uniform() is spent only as verify_drafts spends it, so a seeded request replays exactly.
/// Afterwards the sequence's cache holds K/V for exactly the positions it held before the pass
/// plus those the pass computed for tokens that stay in the sequence once the returned tokens
/// are appended: seq.num_computed_tokens() counts them, and its block tables hold no block
/// beyond what they occupy (the others are back in the pool). Sampling settings, penalties
/// included, behave exactly as without speculation: greedy output equals plain greedy decoding.
/// Throws InvalidArgument if pass.vocab < 1, pass.drafts is empty, or pass.logits is not
/// (k + 1) * vocab floats, before any call on `seq`; and what verify_drafts and seq throw.
SpecVerifyResult finish_speculative_round(const SpecRoundPass& pass, SpecRoundSequence& seq);

}  // namespace lio
