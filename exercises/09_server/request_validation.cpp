// Chapter 09, Task 3 — YOUR implementation: a request body's shared fields and chat messages
// validated into engine parameters, and a refusal into OpenAI's error body.
// Declarations and contracts: chapters/09_server/openai_protocol.h and api_error.h.
// Read fields with json_fields.h (optional_field, number_in, integer_in, boolean_field,
// string_field, bad_field): they throw the 400 ApiError that names the field.
// Lesson: docs/09_server.md, "Task 3". Grade: ctest -R ch09_task_3, or scripts/grade.sh 09
#include <limits>
#include <string>
#include <vector>

#include "api_error.h"
#include "json_fields.h"
#include "lio/error.h"
#include "openai_protocol.h"

namespace lio::server {

using json = nlohmann::json;

nlohmann::ordered_json error_body(const ApiError& e) {
  // TODO(Task 3): OpenAI's error body for e: one key "error" holding "message", "type",
  //   "param", "code" in that order; an empty param or code is JSON null, not "".
  //   Every refusal of lio-server goes out through this (server.cpp, send_error).
  //   Lesson: docs/09_server.md, "Task 3".
  (void)e;
  throw NotImplemented(
      "Task 3 (exercises/09_server/request_validation.cpp): error_body — "
      "see docs/09_server.md, Task 3");
}

void parse_common_fields(const json& j, GenerationRequest& r, const RequestLimits& limits) {
  // TODO(Task 3): read the fields both endpoints share from body j into r (r.model,
  //   r.params.sampler, r.params.n, r.params.stop, r.params.ignore_eos, r.stream,
  //   r.include_usage, r.seed_given), each with the type and range openai_protocol.h lists.
  //   Must hold: a field that is absent or null keeps its default (temperature's is 1, OpenAI's,
  //   not the engine's greedy 0); a wrong one throws a 400 whose param is its name ("stop[1]"
  //   for an element); top_k -1 means off (stored as 0); stream_options without stream true,
  //   a best_of other than 1 or n, and a non-empty logit_bias are refused.
  //   Lesson: docs/09_server.md, "Task 3" (OpenAI API reference; vLLM protocol.py).
  (void)j, (void)r, (void)limits;
  throw NotImplemented(
      "Task 3 (exercises/09_server/request_validation.cpp): parse_common_fields — "
      "see docs/09_server.md, Task 3");
}

namespace {

std::string message_content(const json& m, const std::string& param, const std::string& role) {
  // TODO(Task 3): (a helper of parse_messages; keep it or not) the text of message m, whose
  //   field name is param ("messages[2]"): a string, or a list of {"type": "text", "text"}
  //   parts joined by "\n"; absent or null only for the assistant.
  (void)m, (void)param, (void)role;
  throw NotImplemented(
      "Task 3 (exercises/09_server/request_validation.cpp): message_content — "
      "see docs/09_server.md, Task 3");
}

}  // namespace

std::vector<ChatMessage> parse_messages(const json& j) {
  // TODO(Task 3): the conversation of body j, one ChatMessage {role, content} per message in
  //   order, as openai_protocol.h specifies ("developer" is returned as "system").
  //   Must hold: every refusal names the deepest field at fault ("messages",
  //   "messages[1].role", "messages[0].content[2].type"), so a client can point at it.
  //   Lesson: docs/09_server.md, "Task 3".
  (void)j;
  (void)message_content;
  throw NotImplemented(
      "Task 3 (exercises/09_server/request_validation.cpp): parse_messages — "
      "see docs/09_server.md, Task 3");
}

}  // namespace lio::server
