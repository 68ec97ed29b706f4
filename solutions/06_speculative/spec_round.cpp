// Chapter 06, Task 5 — reference solution: the speculative round's verification and rollback for
// one sequence, after the target's pass over its last token and k drafts. Declaration and
// contract: common/engine/include/lio/spec_round.h. Lesson: docs/06_speculative.md, section 6.
// Sources: Leviathan et al. 2023 (Algorithm 1); vLLM v1 scheduler.py `update_from_output`.
#include "lio/spec_round.h"

#include <string>
#include <vector>

#include "lio/error.h"

namespace lio {

// ---- Task 5 -----------------------------------------------------------------------------------

SpecVerifyResult finish_speculative_round(const SpecRoundPass& pass, SpecRoundSequence& seq) {
  const int64_t vocab = pass.vocab;
  const auto k = static_cast<int64_t>(pass.drafts.size());
  if (vocab < 1) throw InvalidArgument("finish_speculative_round: vocab must be >= 1, got " + std::to_string(vocab));
  if (k < 1) throw InvalidArgument("finish_speculative_round: no drafts to verify (k = 0)");
  if (static_cast<int64_t>(pass.logits.size()) != (k + 1) * vocab) {
    throw InvalidArgument("finish_speculative_round: logits must hold (k + 1) * vocab = " +
                          std::to_string((k + 1) * vocab) + " floats, got " + std::to_string(pass.logits.size()));
  }

  // p_i: the target's sampling distribution at row i, whose position follows the sequence's
  // tokens and drafts 0 .. i-1. Penalties must see those drafts as history, as plain sampling
  // would once they are appended.
  std::vector<float> p(static_cast<size_t>((k + 1) * vocab));
  std::vector<int32_t> history(seq.token_ids().begin(), seq.token_ids().end());
  for (int64_t i = 0; i <= k; ++i) {
    if (i > 0) history.push_back(pass.drafts[static_cast<size_t>(i - 1)]);
    const auto row = static_cast<size_t>(i * vocab);
    seq.target_probs(pass.logits.subspan(row, static_cast<size_t>(vocab)), history,
                     std::span<float>(p).subspan(row, static_cast<size_t>(vocab)));
  }
  SpecVerifyResult result =
      verify_drafts(p, pass.draft_probs, pass.drafts, vocab, [&seq] { return seq.uniform(); });  // Task 4

  // Rollback. The pass wrote K/V at the last token's position and at every draft's. Those of the
  // last token and of the accepted drafts stay valid; the first rejected draft's and all after it
  // belong to tokens the sequence will never hold (the token drawn in their place has no K/V yet:
  // the next pass computes it). Blocks that held only those go back to the pool.
  const int64_t n_valid = seq.num_computed_tokens() + 1 + result.n_accepted;
  seq.set_num_computed_tokens(n_valid);
  seq.truncate_blocks(n_valid);
  return result;
}

}  // namespace lio
