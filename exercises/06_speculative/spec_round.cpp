// Chapter 06, Task 5 — YOUR implementation: the speculative round's verification and rollback for
// one sequence, after the target's one pass over its last token and k drafts. Declaration and
// contract: common/engine/include/lio/spec_round.h. Lesson: docs/06_speculative.md, section 6 and
// "Task 5". Grade: ctest -R ch06_task_5, or scripts/grade.sh 06
#include "lio/spec_round.h"

#include <string>
#include <vector>

#include "lio/error.h"

namespace lio {

// ---- Task 5 -----------------------------------------------------------------------------------

SpecVerifyResult finish_speculative_round(const SpecRoundPass& pass, SpecRoundSequence& seq) {
  // TODO(Task 5): what one speculating sequence gets from the pass, and what its KV cache keeps.
  //   pass.logits: (k + 1, vocab) the pass's rows for this sequence; pass.drafts: (k) ids;
  //   pass.draft_probs: (k, vocab) q rows, or empty (deterministic drafter).
  //   Returns Task 4's decision (accepted drafts + one drawn token, and n_accepted) for the
  //   target's sampling distributions of those rows, built with seq.target_probs.
  //   Must hold afterwards: seq's cache counts, and its block tables hold blocks for, exactly the
  //   positions whose K/V are valid for the tokens the sequence keeps once the returned tokens
  //   are appended; greedy output equals plain greedy decoding, with penalties too; uniform()
  //   is spent only by verify_drafts.
  //   Throw InvalidArgument, before any call on seq, on the shape errors spec_round.h lists.
  //   Lesson: docs/06_speculative.md, section 6 and "Task 5".
  (void)pass, (void)seq;
  throw NotImplemented(
      "Task 5 (exercises/06_speculative/spec_round.cpp): finish_speculative_round — "
      "see docs/06_speculative.md, Task 5");
}

}  // namespace lio
