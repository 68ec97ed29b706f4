// fuzz_support.h — what every libFuzzer target here shares: the bytes as a file for the readers
// that open paths, and the rule that decides a finding.
//
// The rule (README.md's "bad input gets a clear error"): a reader given any bytes either
// accepts them or throws one of LIO's typed errors (lio::Error and its subclasses; the server's
// ApiError). Anything else is a finding: a crash, a sanitizer report (ASan, UBSan), a leak, an
// allocation past libFuzzer's -malloc_limit_mb, a hang past -timeout, or any other exception
// (std::out_of_range, nlohmann::json::exception, std::bad_alloc...), which escapes the target
// and ends the run as "uncaught exception".
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace lio::fuzz {

/// The fuzzer's bytes as a file the readers can open by path: one memfd per process (no disk),
/// rewritten for each input, named /proc/self/fd/N.
class InputFile {
 public:
  InputFile() {
    fd_ = memfd_create("lio_fuzz_input", 0);
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  /// Replaces the file's contents with data[0, size) and returns its path.
  const std::string& write(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0 || pwrite(fd_, data, size, 0) != static_cast<ssize_t>(size)) {
      std::perror("memfd write");
      std::abort();
    }
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

/// The bytes as a string_view.
inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// True when s is well-formed UTF-8 (RFC 3629), as a library no one here wrote decides:
/// nlohmann::json's dump() refuses ill-formed UTF-8 (type_error 316).
inline bool valid_utf8(std::string_view s) {
  try {
    (void)nlohmann::json(std::string(s)).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

/// Ends the run with `what` (a property broken: libFuzzer saves the input as a crash).
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "FUZZ PROPERTY FAILED: %s\n", what.c_str());
  std::abort();
}

}  // namespace lio::fuzz
