// error.h — the exception types LIO raises, and the always-on internal check.
//
// User-facing errors (bad file, bad flag, bad request) are exceptions carrying
// context: the file, the tensor or key, what was expected and what was found.
// `main` and the HTTP layer catch `lio::Error` and print one line. Internal
// invariants use LIO_CHECK, which stays on in release builds and reports the
// source location; `assert` is never used for input.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

/// LIO: model files, tokenizer, sampler, forward pass and generation.
namespace lio {

/// Base of every error LIO raises on purpose. `what()` is one line, ready to print.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A model or tokenizer file is malformed: bad magic, truncated, offset past the end,
/// unknown tensor type, missing key. The message names the file and the offending item.
class FormatError : public Error {
 public:
  using Error::Error;
};

/// The file is well formed but describes something LIO cannot run
/// (an unknown architecture, an unsupported tensor type for an op).
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

/// A caller or user passed a bad value: temperature < 0, top_p outside (0, 1],
/// a prompt longer than the context window, a missing file path.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// Thrown by exercise stubs (`exercises/NN_topic/*.cpp`) until the learner fills them in.
/// The message says which task and gives a hint.
class NotImplemented : public Error {
 public:
  using Error::Error;
};

/// Communication between ranks failed (chapter 08): an MPI or NCCL call returned an error, or
/// the ranks of a job disagree (world size, model, step). The message names the call and ranks.
class CommError : public Error {
 public:
  using Error::Error;
};

/// An internal invariant failed: a bug in LIO, not in the input. Carries file:line.
class InternalError : public Error {
 public:
  using Error::Error;
};

/// `s` wrapped in single quotes, for naming a key, tensor or path inside an error message.
std::string single_quoted(std::string_view s);

/// Throws InternalError("file:line: check `expr` failed: msg"). Used by LIO_CHECK.
/// file and line default to the caller's (GCC's and Clang's __builtin_FILE / __builtin_LINE:
/// std::source_location needs Clang 15 with libstdc++, and the fuzz build uses Debian's Clang 14).
[[noreturn]] void check_failed(const char* expr, const std::string& msg, const char* file = __builtin_FILE(),
                               int line = __builtin_LINE());

}  // namespace lio

/// Always-on invariant check (kept in release builds). For internal invariants only;
/// bad input gets a typed exception with context instead.
#define LIO_CHECK(cond, msg)                                   \
  do {                                                         \
    if (!(cond)) ::lio::check_failed(#cond, (msg));            \
  } while (0)
