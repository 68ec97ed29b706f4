// request_trace.h — the request trace file the chapter 04 and 05 executables replay (--trace):
// one reader, one format.
//
// Format: JSON Lines, one object per non-blank line, one request per object, in arrival order
// (every request arrives at t = 0; the replays differ in how they schedule them):
//   {"prompt_tokens": 120, "output_tokens": 40}
//   {"prompt_tokens": 80, "output_tokens": 12, "shared_prefix": true}
//   prompt_tokens  integer >= 1: the prompt's length in tokens, a shared prefix included.
//                  A program may give a default for lines without it (ch05's --prompt-tokens);
//                  otherwise it is required.
//   output_tokens  integer >= 1, required: tokens to generate. The replays ignore EOS, so this
//                  is the exact output length.
//   shared_prefix  optional bool, default false: the prompt starts with the program's shared
//                  system prefix (ch04's --shared-prefix tokens) and must be longer than it.
//                  Programs without a shared prefix ignore it.
// Other keys are ignored. A trace holds lengths only: the programs draw the token ids from
// their --seed, so the same file replays the same requests everywhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lio {

/// One request of a trace file.
struct TraceRequestLine {
  int64_t prompt_tokens = 0;   ///< prompt length in tokens, the shared prefix included
  int64_t output_tokens = 0;   ///< tokens to generate
  bool shared_prefix = false;  ///< the prompt begins with the program's shared prefix
};

/// What the reading program supplies: a default and the shared prefix's length.
struct TraceReadOptions {
  int64_t default_prompt_tokens = 0;  ///< for lines without prompt_tokens; 0 = the key is required
  int64_t shared_prefix_tokens = 0;   ///< a shared_prefix line's prompt must be longer than this
};

/// Reads the trace at `path` (format above), in file order. Throws InvalidArgument, naming the
/// file (and file:line for a bad line), when the file cannot be opened, a line is not a JSON
/// object, a length is missing (without a default), not an integer or < 1, shared_prefix is
/// not a bool or its prompt is not longer than options.shared_prefix_tokens, or the file holds
/// no request.
std::vector<TraceRequestLine> read_request_trace(const std::string& path,
                                                 const TraceReadOptions& options = {});

}  // namespace lio
