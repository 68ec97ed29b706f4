// Chapter 09, Task 1 — YOUR implementation: framing one payload as a server-sent event.
// Declarations and contract: chapters/09_server/sse.h. Lesson: docs/09_server.md, "Task 1".
// Grade: ctest -R ch09_task_1, or scripts/grade.sh 09
#include "sse.h"

#include "lio/error.h"

namespace lio::server {

std::string sse_data_event(std::string_view payload) {
  // TODO(Task 1): the bytes of one text/event-stream event whose data is `payload`.
  //   Must hold: the event is a run of `data: ` lines ended by an empty line; a client that
  //   parses it as WHATWG HTML 9.2.5-9.2.6 says recovers `payload`, each of its line breaks
  //   ("\r\n", "\n" or "\r") read back as "\n"; an empty payload is still one event.
  //   lio-server sends every streamed chunk through this (openai_response.cpp, sse_event).
  //   Lesson: docs/09_server.md, "Task 1".
  (void)payload;
  throw NotImplemented(
      "Task 1 (exercises/09_server/sse.cpp): sse_data_event — "
      "see docs/09_server.md, Task 1");
}

std::string sse_done_event() {
  // TODO(Task 1): the event that ends an OpenAI stream, whose data is [DONE].
  //   Lesson: docs/09_server.md, "Task 1".
  throw NotImplemented(
      "Task 1 (exercises/09_server/sse.cpp): sse_done_event — "
      "see docs/09_server.md, Task 1");
}

}  // namespace lio::server
