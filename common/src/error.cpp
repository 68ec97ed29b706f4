#include "lio/error.h"

#include <string>

namespace lio {

void check_failed(const char* expr, const std::string& msg, std::source_location loc) {
  std::string where = std::string(loc.file_name()) + ":" + std::to_string(loc.line());
  throw InternalError(where + ": check `" + expr + "` failed" + (msg.empty() ? "" : ": " + msg));
}

}  // namespace lio
