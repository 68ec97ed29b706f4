// request_trace.cpp — reads the JSONL request trace of the chapter 04 and 05 executables (see
// lio/request_trace.h for the format).
#include "lio/request_trace.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "lio/error.h"

namespace lio {

std::vector<TraceRequestLine> read_request_trace(const std::string& path,
                                                 const TraceReadOptions& options) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument("--trace " + single_quoted(path) + ": cannot open");
  std::vector<TraceRequestLine> trace;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw InvalidArgument(where + "not JSON (" + e.what() + ")");
    }
    if (!j.is_object()) throw InvalidArgument(where + "expected a JSON object");
    auto length = [&](const char* key, int64_t fallback) {
      if (!j.contains(key) && fallback > 0) return fallback;
      if (!j.contains(key) || !j[key].is_number_integer())
        throw InvalidArgument(where + "'" + key + "' must be an integer");
      const int64_t n = j[key].get<int64_t>();
      if (n < 1)
        throw InvalidArgument(where + "'" + key + "' must be >= 1, got " + std::to_string(n));
      return n;
    };
    TraceRequestLine r;
    r.prompt_tokens = length("prompt_tokens", options.default_prompt_tokens);
    r.output_tokens = length("output_tokens", 0);
    if (j.contains("shared_prefix")) {
      if (!j["shared_prefix"].is_boolean())
        throw InvalidArgument(where + "'shared_prefix' must be true or false");
      r.shared_prefix = j["shared_prefix"].get<bool>();
    }
    if (r.shared_prefix && r.prompt_tokens <= options.shared_prefix_tokens) {
      throw InvalidArgument(where + "a shared_prefix prompt needs more than --shared-prefix (" +
                            std::to_string(options.shared_prefix_tokens) + ") tokens, got " +
                            std::to_string(r.prompt_tokens));
    }
    trace.push_back(r);
  }
  if (trace.empty()) throw InvalidArgument("--trace " + single_quoted(path) + " holds no request");
  return trace;
}

}  // namespace lio
