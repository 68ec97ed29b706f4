// sse.h — server-sent events: how a streamed response is framed on the wire.
//
// A stream is a text/event-stream body: events separated by a blank line, each made of
// `field: value` lines. OpenAI's streaming API sends every chunk as one event whose only field
// is `data` (the chunk's compact JSON), and ends the stream with the event `data: [DONE]`.
// Source: WHATWG HTML Living Standard, sec. 9.2 "Server-sent events" (9.2.5 "Parsing an event
// stream", 9.2.6 "Interpreting an event stream"); OpenAI API reference, "Streaming".
#pragma once

#include <string>
#include <string_view>

namespace lio::server {

// ---- Chapter 09, Task 1 (solutions/09_server/sse.cpp) ---------------------------------------
// Lesson: docs/09_server.md, "Task 1".

/// One server-sent event that carries `payload` as its data: one line `data: <line>` per line
/// of the payload, then a blank line ("\n"). Lines of the payload end at "\r\n", "\n" or "\r"
/// (WHATWG 9.2.5: all three end a line), so a payload with k line breaks becomes k + 1 data
/// lines; an empty payload is the one line "data: ". A client that parses the stream as
/// WHATWG 9.2.6 says (strip one space after the colon, join the data lines with "\n") gets back
/// `payload` with every line break as "\n". Example: "a\nb" -> "data: a\ndata: b\n\n".
/// Never throws (any bytes are framed; UTF-8 is the caller's business).
std::string sse_data_event(std::string_view payload);

/// The event that ends an OpenAI stream: "data: [DONE]\n\n".
std::string sse_done_event();

}  // namespace lio::server
