// Chapter 09, Task 1 — reference: framing one payload as a server-sent event (WHATWG HTML,
// sec. 9.2.5-9.2.6). Declarations and contract: chapters/09_server/sse.h.
// Lesson: docs/09_server.md, "Task 1".
#include "sse.h"

namespace lio::server {

std::string sse_data_event(std::string_view payload) {
  std::string out = "data: ";
  out.reserve(payload.size() + 8);
  for (size_t i = 0; i < payload.size(); ++i) {
    const char c = payload[i];
    if (c == '\r' || c == '\n') {
      if (c == '\r' && i + 1 < payload.size() && payload[i + 1] == '\n') ++i;  // CRLF: one break
      out += "\ndata: ";
    } else {
      out += c;
    }
  }
  out += "\n\n";
  return out;
}

std::string sse_done_event() { return sse_data_event("[DONE]"); }

}  // namespace lio::server
