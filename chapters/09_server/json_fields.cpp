// json_fields.cpp — typed, range-checked access to request fields (see the header).
#include "json_fields.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "api_error.h"

namespace lio::server {

using json = nlohmann::json;

void bad_field(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

const char* json_type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "an unknown type";
  }
}

const json* optional_field(const json& obj, const char* name) {
  const auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

namespace {

std::string format_number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

double number_in(const json& v, const std::string& param, double lo, double hi, bool lo_open) {
  if (!v.is_number())
    bad_field(param, "'" + param + "' must be a number, got " + json_type_name(v));
  const double x = v.get<double>();
  const bool ok = std::isfinite(x) && (lo_open ? x > lo : x >= lo) && x <= hi;
  if (!ok) {
    bad_field(param, "'" + param + "' must be in " + (lo_open ? "(" : "[") + format_number(lo) +
                         ", " + format_number(hi) + "], got " + format_number(x));
  }
  return x;
}

int64_t integer_in(const json& v, const std::string& param, int64_t lo, int64_t hi) {
  if (!v.is_number_integer())
    bad_field(param, "'" + param + "' must be an integer, got " + json_type_name(v));
  const bool too_big =
      v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  const int64_t x = too_big ? std::numeric_limits<int64_t>::max() : v.get<int64_t>();
  if (too_big || x < lo || x > hi) {
    const std::string shown = v.dump();
    if (hi == std::numeric_limits<int64_t>::max())
      bad_field(param, "'" + param + "' must be >= " + std::to_string(lo) + ", got " + shown);
    bad_field(param, "'" + param + "' must be in [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "], got " + shown);
  }
  return x;
}

bool boolean_field(const json& v, const std::string& param) {
  if (!v.is_boolean())
    bad_field(param, "'" + param + "' must be a boolean, got " + json_type_name(v));
  return v.get<bool>();
}

const std::string& string_field(const json& v, const std::string& param) {
  if (!v.is_string())
    bad_field(param, "'" + param + "' must be a string, got " + json_type_name(v));
  return v.get_ref<const std::string&>();
}

}  // namespace lio::server
