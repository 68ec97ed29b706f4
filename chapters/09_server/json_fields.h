// json_fields.h — reading one field of an OpenAI request body: present or not, its JSON type,
// its range, and the 400 error that names it when it is wrong.
//
// The request parsers (openai_protocol.cpp) and chapter 09's Task 3 (the shared sampling
// fields and the chat messages, solutions/09_server/request_validation.cpp) both read fields
// through these, so every error message has one wording: "'top_p' must be in (0, 1], got 1.5".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace lio::server {

/// Throws ApiError 400 with `message`, `param` naming the offending field ("" = none).
[[noreturn]] void bad_field(const std::string& param, const std::string& message);

/// JSON's name for the type of `v` as an error message shows it: "null", "a boolean",
/// "an integer", "a number", "a string", "an array", "an object".
const char* json_type_name(const nlohmann::json& v);

/// The field `name` of object `obj`, or nullptr when it is absent or null (OpenAI treats null
/// as "not given" for every optional field).
const nlohmann::json* optional_field(const nlohmann::json& obj, const char* name);

/// `v` as a finite number in [lo, hi] (lo excluded when `lo_open`). Throws ApiError 400
/// naming `param` when it is not a number or outside the range ("'temperature' must be in
/// [0, 2], got 3").
double number_in(const nlohmann::json& v, const std::string& param, double lo, double hi,
                 bool lo_open = false);

/// `v` as a 64-bit integer in [lo, hi] (a value past int64 is out of range, never wrapped).
/// Throws ApiError 400 naming `param` for a non-integer or a value outside the range.
int64_t integer_in(const nlohmann::json& v, const std::string& param, int64_t lo, int64_t hi);

/// `v` as a boolean. Throws ApiError 400 naming `param` for any other type.
bool boolean_field(const nlohmann::json& v, const std::string& param);

/// `v` as a string. Throws ApiError 400 naming `param` for any other type.
const std::string& string_field(const nlohmann::json& v, const std::string& param);

}  // namespace lio::server
