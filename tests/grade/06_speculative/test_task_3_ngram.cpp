// Chapter 06, Task 3: prompt-lookup (n-gram) drafting
// (exercises/06_speculative/spec_decode.cpp, ngram_propose).
#include <gtest/gtest.h>

#include <vector>

#include "lio/error.h"
#include "lio/spec_decode.h"

namespace {
using namespace lio;
using Ids = std::vector<int32_t>;

Ids propose(const Ids& tokens, int64_t n_min, int64_t n_max, int64_t k) {
  return ngram_propose(tokens, n_min, n_max, k);
}

TEST(Ch06Task3, TheLongestMatchingNWins) {
  // Last 3 tokens [1 2 3] occurred at the start, followed by 40 41. The last token alone, [3],
  // occurred more recently (position 6), followed by 50: a shorter, worse context.
  const Ids t = {1, 2, 3, 40, 41, 9, 3, 50, 1, 2, 3};
  EXPECT_EQ(propose(t, 1, 3, 2), (Ids{40, 41}));
  EXPECT_EQ(propose(t, 1, 1, 2), (Ids{50, 1}));  // only 1-grams allowed
  EXPECT_EQ(propose(t, 2, 5, 1), (Ids{40}));     // n = 4, 5 do not match; n = 3 does
}

TEST(Ch06Task3, TheMostRecentOccurrenceWins) {
  // [7 8] occurred at 0 (then 1) and at 3 (then 2): the later one is the better guess.
  const Ids t = {7, 8, 1, 7, 8, 2, 7, 8};
  EXPECT_EQ(propose(t, 2, 2, 1), (Ids{2}));
  EXPECT_EQ(propose(t, 2, 2, 3), (Ids{2, 7, 8}));
}

TEST(Ch06Task3, FewerThanKDraftsWhenTheSequenceEnds) {
  // [1 2] at 0 is followed by 9 1 2 and then the sequence ends.
  const Ids t = {1, 2, 9, 1, 2};
  EXPECT_EQ(propose(t, 2, 2, 5), (Ids{9, 1, 2}));
  EXPECT_EQ(propose(t, 1, 3, 8), (Ids{9, 1, 2}));
}

TEST(Ch06Task3, NoMatchGivesNoDrafts) {
  EXPECT_EQ(propose({1, 2, 3, 4, 5}, 1, 4, 3), Ids{});
  EXPECT_EQ(propose({5, 6, 5, 7}, 2, 3, 3), Ids{});  // [5 7] and [6 5 7] are new
  EXPECT_EQ(propose({}, 1, 3, 3), Ids{});
  EXPECT_EQ(propose({4}, 1, 3, 3), Ids{});
}

TEST(Ch06Task3, TheSuffixIsNotAnOccurrenceOfItself) {
  // Every suffix occurs once, as itself: nothing to propose (not an empty span past the end,
  // and not the suffix's own tokens).
  EXPECT_EQ(propose({10, 11, 12}, 1, 3, 4), Ids{});
  // An occurrence may overlap the suffix as long as it ends before the last token: in
  // [3 3 3], the 2-gram [3 3] also starts at 0 and is followed by 3.
  EXPECT_EQ(propose({3, 3, 3}, 2, 2, 4), (Ids{3}));
  // [6 6] occurs at 0 and 1 before the suffix at 2; the most recent, at 1, is followed by 6.
  EXPECT_EQ(propose({6, 6, 6, 6}, 2, 2, 4), (Ids{6}));
  EXPECT_EQ(propose({6, 6, 6, 6}, 1, 1, 4), (Ids{6}));
}

TEST(Ch06Task3, BadArgumentsThrow) {
  const Ids t = {1, 2, 1, 2};
  EXPECT_THROW(ngram_propose(t, 0, 3, 4), InvalidArgument);
  EXPECT_THROW(ngram_propose(t, 3, 2, 4), InvalidArgument);
  EXPECT_THROW(ngram_propose(t, 1, 3, 0), InvalidArgument);
  EXPECT_THROW(ngram_propose(Ids{}, 1, 3, -1),
               InvalidArgument);  // checked even with nothing to match
}

}  // namespace
