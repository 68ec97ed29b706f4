// poll_until.h — waiting on asynchronous work with a deadline: what turns a collective whose peer
// is gone from a hang into an error. NCCL's non-blocking mode reports progress only when asked
// (ncclCommGetAsyncError; NCCL User Guide, "Fault Tolerance"), so a wait is a loop of polls that
// gives up after a timeout. Header-only and free of NCCL, so its rules are tested on any machine.
#pragma once

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "lio/error.h"

namespace lio {

/// What one poll of asynchronous work found.
enum class PollState {
  Pending,  ///< still running: poll again
  Done,     ///< finished
};

/// Calls `poll` (returning PollState; it throws to report a failure, which propagates) until it
/// returns Done. Between polls it yields the CPU (sleeps `pause`, growing to 1 ms, so a short wait
/// stays short). Throws CommError "<what> did not finish within <timeout_s> s" once `timeout_s`
/// seconds pass with the work still Pending; `on_timeout()` runs first (to abort the work, e.g.
/// ncclCommAbort). timeout_s <= 0 waits forever.
template <typename Poll, typename OnTimeout>
void poll_until(Poll&& poll, double timeout_s, const std::string& what, OnTimeout&& on_timeout,
                std::chrono::microseconds pause = std::chrono::microseconds(1)) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  for (;;) {
    if (poll() == PollState::Done) return;
    if (timeout_s > 0 && std::chrono::duration<double>(Clock::now() - start).count() > timeout_s) {
      on_timeout();
      throw CommError(what + " did not finish within " + std::to_string(timeout_s) +
                      " s (a rank died or the ranks disagree on the collectives; "
                      "LIO_COMM_TIMEOUT_S sets the limit)");
    }
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::milliseconds(1)) pause *= 2;
  }
}

/// The communication timeout in seconds: LIO_COMM_TIMEOUT_S when it is a positive number, else
/// `fallback`. Long enough for a first collective's setup on a busy machine, short enough that
/// a dead peer ends the job in about a minute rather than never.
inline double comm_timeout_seconds(double fallback = 60.0) {
  if (const char* env = std::getenv("LIO_COMM_TIMEOUT_S"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (end != env && *end == '\0' && v > 0) return v;
  }
  return fallback;
}

}  // namespace lio
