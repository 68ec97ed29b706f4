// Chapter 09, Task 1: framing a stream as server-sent events
// (exercises/09_server/sse.cpp, sse_data_event and sse_done_event).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "openai_response.h"
#include "sse.h"

namespace {
using namespace lio::server;

/// The data of every event in `stream`, parsed as a browser's EventSource does (WHATWG HTML
/// 9.2.5-9.2.6): lines end at CRLF, LF or CR; "data:" appends its value (one leading space
/// stripped) and "\n" to the buffer; a blank line dispatches the buffer less its last "\n",
/// unless it is empty. Other fields and comments are ignored.
std::vector<std::string> parse_events(const std::string& stream) {
  std::vector<std::string> events, lines;
  std::string line;
  for (size_t i = 0; i < stream.size(); ++i) {
    const char c = stream[i];
    if (c == '\r' || c == '\n') {
      if (c == '\r' && i + 1 < stream.size() && stream[i + 1] == '\n') ++i;
      lines.push_back(line);
      line.clear();
    } else {
      line += c;
    }
  }
  EXPECT_TRUE(line.empty()) << "the stream ends inside a line: '" << line << "'";
  std::string data;
  for (const std::string& l : lines) {
    if (l.empty()) {
      if (!data.empty()) events.push_back(data.substr(0, data.size() - 1));
      data.clear();
      continue;
    }
    const size_t colon = l.find(':');
    const std::string field = l.substr(0, colon);
    std::string value = colon == std::string::npos ? "" : l.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.erase(0, 1);
    if (field == "data") data += value + "\n";
  }
  EXPECT_TRUE(data.empty()) << "an event was not ended by a blank line";
  return events;
}

/// `s` with every CRLF, CR and LF as "\n" (what a client reads back).
std::string normalized(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
      out += '\n';
    } else {
      out += s[i];
    }
  }
  return out;
}

TEST(Ch09Task1, OneLineChunkIsOneDataLine) {
  // What OpenAI (and lio-server) send for every chunk: compact JSON holds no line break.
  EXPECT_EQ(sse_data_event(R"({"id":"cmpl-1","choices":[{"text":"Hi"}]})"),
            "data: {\"id\":\"cmpl-1\",\"choices\":[{\"text\":\"Hi\"}]}\n\n");
  EXPECT_EQ(sse_data_event("x"), "data: x\n\n");
}

TEST(Ch09Task1, DoneEventEndsTheStream) {
  EXPECT_EQ(sse_done_event(), "data: [DONE]\n\n");
  EXPECT_EQ(parse_events(sse_done_event()), std::vector<std::string>{"[DONE]"});
}

TEST(Ch09Task1, MultiLinePayloadBecomesSeveralDataLines) {
  // A raw line break would end the field, and a blank line the event: each line gets its own
  // `data:` field and the client joins them with "\n".
  EXPECT_EQ(sse_data_event("first\nsecond"), "data: first\ndata: second\n\n");
  EXPECT_EQ(sse_data_event("a\n\nb"), "data: a\ndata: \ndata: b\n\n");
  EXPECT_EQ(parse_events(sse_data_event("a\n\nb")), std::vector<std::string>{"a\n\nb"});
}

TEST(Ch09Task1, CarriageReturnsEndLinesToo) {
  // WHATWG: CRLF, LF and CR each end a line; a CRLF pair is one break, not two.
  const std::string event = sse_data_event("a\r\nb\rc\nd");
  EXPECT_EQ(parse_events(event), std::vector<std::string>{"a\nb\nc\nd"});
  EXPECT_EQ(event.find('\r'), std::string::npos) << "a bare CR would end the line there: " << event;
}

TEST(Ch09Task1, EmptyAndEdgePayloadsSurvive) {
  EXPECT_EQ(parse_events(sse_data_event("")), std::vector<std::string>{""});
  EXPECT_EQ(parse_events(sse_data_event("\n")), std::vector<std::string>{"\n"});
  EXPECT_EQ(parse_events(sse_data_event("tail\n")), std::vector<std::string>{"tail\n"});
  EXPECT_EQ(parse_events(sse_data_event(" leading space")),
            std::vector<std::string>{" leading space"});
  EXPECT_EQ(parse_events(sse_data_event("data: [DONE]")), std::vector<std::string>{"data: [DONE]"});
}

TEST(Ch09Task1, RandomPayloadsRoundTripOnOneStream) {
  std::mt19937 rng(9);
  const std::string alphabet = "ab :\r\n{}\"\\\xc3\xa9";
  std::vector<std::string> payloads;
  std::string stream;
  for (int i = 0; i < 200; ++i) {
    std::string p;
    const int n = static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) p += alphabet[rng() % alphabet.size()];
    payloads.push_back(normalized(p));
    stream += sse_data_event(p);
  }
  stream += sse_done_event();
  const std::vector<std::string> events = parse_events(stream);
  ASSERT_EQ(events.size(), payloads.size() + 1);
  for (size_t i = 0; i < payloads.size(); ++i) EXPECT_EQ(events[i], payloads[i]) << "event " << i;
  EXPECT_EQ(events.back(), "[DONE]");
}

TEST(Ch09Task1, ServerChunksGoThroughIt) {
  // lio-server's chunks (openai_response.cpp, sse_event): a newline in generated text is
  // escaped by JSON, so the chunk stays one data line.
  const nlohmann::ordered_json chunk = {{"text", "line one\nline two"}};
  EXPECT_EQ(sse_event(chunk), "data: {\"text\":\"line one\\nline two\"}\n\n");
}

}  // namespace
