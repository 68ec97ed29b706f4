// test_poll_until.cpp — the wait every NCCL collective goes through (lio/poll_until.h): it
// returns when the work is done, passes a failure through, and turns work that never finishes into
// a CommError after the timeout, aborting the work first — what makes a dead peer an error, not a
// hang. No NCCL or GPU needed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "lio/error.h"
#include "lio/poll_until.h"

namespace lio {
namespace {

TEST(PollUntil, ReturnsOnceTheWorkIsDone) {
  int polls = 0;
  bool aborted = false;
  poll_until([&] { return ++polls == 3 ? PollState::Done : PollState::Pending; }, 5.0, "test op",
             [&] { aborted = true; });
  EXPECT_EQ(polls, 3);
  EXPECT_FALSE(aborted);
}

TEST(PollUntil, PendingPastTheTimeoutAbortsThenThrows) {
  bool aborted = false;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    poll_until([] { return PollState::Pending; }, 0.05, "ncclAllReduce", [&] { aborted = true; });
    FAIL() << "a wait that never finishes returned";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("ncclAllReduce did not finish"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(aborted) << "the work was not aborted before the error";
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
}

TEST(PollUntil, AFailureReportedByThePollPropagates) {
  EXPECT_THROW(poll_until([]() -> PollState { throw CommError("peer failed"); }, 5.0, "x", [] {}),
               CommError);
}

TEST(CommTimeout, EnvironmentOverridesOnlyWithAPositiveNumber) {
  unsetenv("LIO_COMM_TIMEOUT_S");
  EXPECT_EQ(comm_timeout_seconds(60.0), 60.0);
  setenv("LIO_COMM_TIMEOUT_S", "2.5", 1);
  EXPECT_EQ(comm_timeout_seconds(60.0), 2.5);
  setenv("LIO_COMM_TIMEOUT_S", "-1", 1);
  EXPECT_EQ(comm_timeout_seconds(60.0), 60.0);
  setenv("LIO_COMM_TIMEOUT_S", "soon", 1);
  EXPECT_EQ(comm_timeout_seconds(60.0), 60.0);
  unsetenv("LIO_COMM_TIMEOUT_S");
}

}  // namespace
}  // namespace lio
