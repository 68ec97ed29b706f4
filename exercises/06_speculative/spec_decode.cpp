// Chapter 06, Tasks 1-4 and 6 — YOUR implementation: the arithmetic and the algorithms of
// speculative decoding, for a chain of drafts and for a tree. Declarations and contracts:
// common/engine/include/lio/spec_decode.h. Lesson: docs/06_speculative.md.
// Grade: ctest -R ch06_task_K (K = 1..4, 6), or scripts/grade.sh 06
#include "lio/spec_decode.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "lio/error.h"

namespace lio {

// ---- Task 1 -----------------------------------------------------------------------------------

double expected_tokens_per_pass(double a, int64_t k) {
  // TODO(Task 1): the mean number of tokens one target pass appends when each of the k drafts
  //   passes its test with probability a, only an unbroken prefix of drafts is kept, and the
  //   pass always adds one token of its own. Units: tokens per target pass.
  //   Must hold: the result lies in [1, k + 1]; it is 1 when a = 0 or k = 0 and k + 1 when
  //   a = 1; it grows with a and with k, and stays below 1 / (1 - a) for a < 1.
  //   Throw InvalidArgument, naming the argument and its value, if a is outside [0, 1] (or NaN)
  //   or k < 0. Lesson: docs/06_speculative.md, "Task 1" (Leviathan et al. 2023, eq. 1).
  (void)a, (void)k;
  throw NotImplemented(
      "Task 1 (exercises/06_speculative/spec_decode.cpp): expected_tokens_per_pass — "
      "see docs/06_speculative.md, Task 1");
}

// ---- Task 2 -----------------------------------------------------------------------------------

double speculative_speedup(double a, int64_t k, double c) {
  // TODO(Task 2): tokens per unit of time with speculation over tokens per unit of time
  //   without, time counted in target decode steps: one round runs k draft steps of c target
  //   steps each and one target pass over k + 1 rows (about one decode step), and yields what
  //   Task 1 counts. c = draft step time / target step time.
  //   Must hold: 1 when k = 0 (plain decoding); Task 1's count when c = 0; falls as c rises.
  //   Throw InvalidArgument as Task 1 does, or if c is negative or not finite.
  //   Lesson: docs/06_speculative.md, "Task 2" (Leviathan et al. 2023, Theorem 3.8).
  (void)a, (void)k, (void)c;
  throw NotImplemented(
      "Task 2 (exercises/06_speculative/spec_decode.cpp): speculative_speedup — "
      "see docs/06_speculative.md, Task 2");
}

int64_t best_num_speculative_tokens(double a, double c, int64_t k_max) {
  // TODO(Task 2): the k in [0, k_max] whose speculative_speedup(a, k, c) is largest; on ties
  //   the smallest such k. 0 means no number of drafts beats plain decoding at this (a, c).
  //   Must hold: the result never exceeds k_max; it does not decrease as a rises or c falls.
  //   Throw InvalidArgument as speculative_speedup does, or if k_max < 0.
  //   Lesson: docs/06_speculative.md, "Task 2".
  (void)a, (void)c, (void)k_max;
  throw NotImplemented(
      "Task 2 (exercises/06_speculative/spec_decode.cpp): best_num_speculative_tokens — "
      "see docs/06_speculative.md, Task 2");
}

// ---- Task 3 -----------------------------------------------------------------------------------

std::vector<int32_t> ngram_propose(std::span<const int32_t> tokens, int64_t n_min, int64_t n_max,
                                   int64_t k) {
  // TODO(Task 3): prompt-lookup drafts. tokens: (n_tokens) prompt + generated ids, the last
  //   one just generated. Returns the drafts: (n_drafts) ids, n_drafts in [0, k].
  //   Must hold: the drafts are the tokens that followed an earlier occurrence of the
  //   sequence's last n tokens, for the largest n in [n_min, n_max] that has one; of that n's
  //   occurrences, the most recent wins. An occurrence must end before the last token (the
  //   suffix is not an occurrence of itself; overlapping it is fine). Fewer than k drafts when
  //   the sequence ends first; empty when no n matches.
  //   Throw InvalidArgument, naming the argument and its value, if n_min < 1, n_max < n_min or
  //   k < 1. Lesson: docs/06_speculative.md, "Task 3".
  (void)tokens, (void)n_min, (void)n_max, (void)k;
  throw NotImplemented(
      "Task 3 (exercises/06_speculative/spec_decode.cpp): ngram_propose — "
      "see docs/06_speculative.md, Task 3");
}

// ---- Task 4 -----------------------------------------------------------------------------------

SpecVerifyResult verify_drafts(std::span<const float> target_probs,
                               std::span<const float> draft_probs, std::span<const int32_t> drafts,
                               int64_t vocab, const std::function<double()>& uniform) {
  // TODO(Task 4): speculative sampling's acceptance rule. k = drafts.size().
  //   target_probs: (k + 1, vocab) row-major p_0 .. p_k; draft_probs: (k, vocab) row-major
  //   q_0 .. q_{k-1}, or empty for a deterministic drafter (q_i one-hot at drafts[i]).
  //   Returns tokens = an accepted prefix of drafts followed by exactly one token drawn by the
  //   rule, and n_accepted = tokens.size() - 1, in [0, k].
  //   Must hold: the token emitted at position i is distributed exactly as p_i, whatever q_i
  //   was (the lesson's proof); with one-hot p rows (greedy) drafts are kept while they equal
  //   the target's argmax. Draw every token from a distribution with sample_from_probs; spend
  //   uniform() exactly as spec_decode.h says (one per test that is not certain, u below the
  //   acceptance probability accepts; one per token drawn; never otherwise).
  //   Throw InvalidArgument, before any draw, on the shape and draft errors spec_decode.h
  //   lists. Lesson: docs/06_speculative.md, "Task 4" (Leviathan et al. 2023, Algorithm 1).
  (void)target_probs, (void)draft_probs, (void)drafts, (void)vocab, (void)uniform;
  throw NotImplemented(
      "Task 4 (exercises/06_speculative/spec_decode.cpp): verify_drafts — "
      "see docs/06_speculative.md, Task 4");
}

// ---- Task 6 -----------------------------------------------------------------------------------

std::vector<uint64_t> tree_attention_masks(std::span<const int32_t> parents) {
  // TODO(Task 6): part a, the tree attention mask. parents: (n) the parent of each node; node 0
  //   is the root (the sequence's last token, parents[0] = -1) and a parent comes before its
  //   children. The n nodes run as n rows of one pass after the cached prefix. Returns (n)
  //   masks: bit j of mask[i] set iff row i may read node j's K/V.
  //   Must hold: a row reads itself and its ancestors, never a sibling's branch; mask[0] = 1;
  //   popcount(mask[i]) - 1 = node i's depth; a chain (parents[i] = i - 1) gives the causal
  //   mask. Steps: check the tree first (the errors spec_decode.h lists: n outside [1, 64],
  //   a root that is not -1, a parent not before its child); then ask what a node's row has
  //   in common with its parent's row, and in which order the rows can be built so that the
  //   parent's is always ready. Lesson: docs/06_speculative.md, section 7 and "Task 6".
  (void)parents;
  throw NotImplemented(
      "Task 6 (exercises/06_speculative/spec_decode.cpp): tree_attention_masks — "
      "see docs/06_speculative.md, Task 6");
}

TreeVerifyResult verify_tree(std::span<const float> target_probs, std::span<const int32_t> parents,
                             std::span<const int32_t> tokens, int64_t vocab,
                             const std::function<double()>& uniform) {
  // TODO(Task 6): part b, verification of the draft tree. target_probs: (n, vocab) row-major,
  //   row i the target's distribution after node i's path; parents: (n) as in part a; tokens:
  //   (n) each node's token (the root's is not tested). Returns path (the accepted nodes, one
  //   per depth, each a child of the one before) and tokens (their tokens, then exactly one
  //   token the rule draws): tokens.size() = path.size() + 1.
  //   Must hold: the token emitted at each depth is distributed exactly as the target row it
  //   was drawn against (the lesson derives why); greedy rows (one-hot) keep the child that
  //   holds the argmax, end with an argmax, and spend no uniform. Spend uniform() exactly as
  //   spec_decode.h says (one per test whose outcome is not certain, u below the acceptance
  //   probability accepts; one per token drawn from more than one candidate; never otherwise).
  //   Steps: every check spec_decode.h lists, before any draw; then walk down from the root:
  //   at each node, test its children in index order, each against the distribution that the
  //   rejections of its earlier siblings leave (Task 4's rule, with q one-hot at the child's
  //   token); stop at the first child accepted and repeat there, or draw the last token when
  //   none is. Draw with sample_from_probs. Lesson: docs/06_speculative.md, section 7 and "Task 6"
  //   (Miao et al. 2024, SpecInfer, Algorithm 2).
  (void)target_probs, (void)parents, (void)tokens, (void)vocab, (void)uniform;
  throw NotImplemented(
      "Task 6 (exercises/06_speculative/spec_decode.cpp): verify_tree — "
      "see docs/06_speculative.md, Task 6");
}

}  // namespace lio
