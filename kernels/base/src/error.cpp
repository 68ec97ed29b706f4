#include "lio/error.h"

#include <string>

namespace lio {

// Built by appends: GCC 12 reports a false -Wrestrict on `"'" + std::string(s) + "'"`.
std::string single_quoted(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '\'';
  out += s;
  out += '\'';
  return out;
}

void check_failed(const char* expr, const std::string& msg, const char* file, int line) {
  std::string where = std::string(file) + ":" + std::to_string(line);
  throw InternalError(where + ": check `" + expr + "` failed" + (msg.empty() ? "" : ": " + msg));
}

}  // namespace lio
