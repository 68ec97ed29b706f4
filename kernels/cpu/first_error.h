// first_error.h — carrying an exception out of an OpenMP loop. An exception must not leave a
// parallel region (the program would terminate), and a learner's exercise stub throws
// NotImplemented from inside the CPU kernels' loops (chapters 02, 04 and 07).
#pragma once

#include <exception>
#include <mutex>

namespace lio::cpu {

/// The first exception thrown by the iterations of an OpenMP loop, kept to rethrow after it.
/// Thread-safe: run() may be called from every iteration at once.
class FirstError {
 public:
  /// Runs f(); an exception it throws is kept if it is the first one.
  template <class F>
  void run(F&& f) noexcept {
    try {
      f();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
  /// Rethrows the kept exception, if any (after the loop).
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::mutex mutex_;
  std::exception_ptr error_;
};

}  // namespace lio::cpu
