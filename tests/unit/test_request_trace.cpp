// test_request_trace.cpp — the one reader of the chapter executables' --trace files
// (lio/request_trace.h): values, defaults, and one-line errors naming file:line.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "lio/error.h"
#include "lio/request_trace.h"

namespace {

/// Writes `text` to a fresh file under the test's temp dir and returns its path.
std::string write_trace(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/lio_trace_" + name + ".jsonl";
  std::ofstream(path) << text;
  return path;
}

/// The message read_request_trace throws for `text`, or "" if it reads.
std::string error_of(const std::string& name, const std::string& text,
                     lio::TraceReadOptions o = {}) {
  try {
    lio::read_request_trace(write_trace(name, text), o);
  } catch (const lio::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(RequestTrace, ReadsLinesInOrderWithDefaultsAndSharedPrefix) {
  const std::string path =
      write_trace("ok",
                  "{\"prompt_tokens\": 40, \"output_tokens\": 5, \"shared_prefix\": true}\n"
                  "\n"
                  "{\"output_tokens\": 7, \"note\": \"ignored\"}\n");
  const auto t = lio::read_request_trace(path, {12, 16});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].prompt_tokens, 40);
  EXPECT_EQ(t[0].output_tokens, 5);
  EXPECT_TRUE(t[0].shared_prefix);
  EXPECT_EQ(t[1].prompt_tokens, 12);  // the program's default
  EXPECT_EQ(t[1].output_tokens, 7);
  EXPECT_FALSE(t[1].shared_prefix);
}

TEST(RequestTrace, BadLinesNameFileAndLine) {
  EXPECT_NE(
      error_of("no_prompt", "{\"output_tokens\": 3}\n").find("no_prompt.jsonl:1: 'prompt_tokens'"),
      std::string::npos);
  EXPECT_NE(error_of("zero",
                     "{\"prompt_tokens\": 4, \"output_tokens\": 3}\n{\"prompt_tokens\": 4, "
                     "\"output_tokens\": 0}\n")
                .find("zero.jsonl:2: 'output_tokens' must be >= 1"),
            std::string::npos);
  EXPECT_NE(error_of("json", "{\"prompt_tokens\": 4,\n").find("json.jsonl:1: not JSON"),
            std::string::npos);
  EXPECT_NE(error_of("array", "[1, 2]\n").find("expected a JSON object"), std::string::npos);
  EXPECT_NE(error_of("flag", "{\"prompt_tokens\": 4, \"output_tokens\": 3, \"shared_prefix\": 1}\n")
                .find("true or false"),
            std::string::npos);
  EXPECT_NE(
      error_of("short", "{\"prompt_tokens\": 16, \"output_tokens\": 3, \"shared_prefix\": true}\n",
               {0, 16})
          .find("needs more than --shared-prefix (16) tokens"),
      std::string::npos);
  EXPECT_NE(error_of("empty", "\n  \n").find("holds no request"), std::string::npos);
  EXPECT_THROW(lio::read_request_trace(::testing::TempDir() + "/lio_trace_missing/none.jsonl"),
               lio::InvalidArgument);
}

}  // namespace
