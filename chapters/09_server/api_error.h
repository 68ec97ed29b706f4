// api_error.h — a request the server refuses, and the body OpenAI answers it with.
//
// Source: the OpenAI API reference, "Error codes": every error is an HTTP status and the body
// {"error": {"message", "type", "param", "code"}}; vLLM's server (vllm/entrypoints/openai/
// protocol.py, ErrorResponse) answers the same shape.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>

namespace lio::server {

/// A request the server refuses: an HTTP status and OpenAI's error body
/// `{"error": {"message", "type", "param", "code"}}`. `param` names the offending field ("" ->
/// null), `code` is OpenAI's machine-readable code ("" -> null).
class ApiError : public std::runtime_error {
 public:
  /// `status` is the HTTP status (4xx for the client's fault, 5xx for the server's).
  ApiError(int status_, const std::string& message, std::string param_ = "", std::string code_ = "",
           std::string type_ = "invalid_request_error")
      : std::runtime_error(message),
        status(status_),
        param(std::move(param_)),
        code(std::move(code_)),
        type(std::move(type_)) {}
  int status;         ///< HTTP status
  std::string param;  ///< offending field, "" = none
  std::string code;   ///< e.g. "model_not_found", "invalid_api_key"; "" = none
  std::string type;   ///< "invalid_request_error", "server_error", ...
};

/// Chapter 09, Task 3 (solutions/09_server/request_validation.cpp): the error body of `e`,
/// {"error": {"message": e.what(), "type", "param", "code"}} in that key order, with null for
/// an empty param or code. Never throws for the message's content.
nlohmann::ordered_json error_body(const ApiError& e);

}  // namespace lio::server
