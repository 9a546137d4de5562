// OpenAI-style error bodies and the HTTP status of each error kind, in one place (as llama.cpp's
// server format_error_response). No HTTP library here: callers put status and body on the wire.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace onebit {

enum class ApiErrorKind {
  kInvalidRequest,     // 400 invalid_request_error: bad JSON, wrong type, value out of range
  kExceedContext,      // 400 exceed_context_size_error: the prompt does not fit
  kAuthentication,     // 401 authentication_error: no or wrong API key
  kPermission,         // 403 permission_error: e.g. a non-loopback Host on a loopback bind
  kNotFound,           // 404 not_found_error: unknown route or model
  kPayloadTooLarge,    // 413 invalid_request_error: body over the limit
  kServer,             // 500 server_error: an internal error, for this request alone
  kNotSupported,       // 501 not_supported_error
  kBadGateway,         // 502 server_error: a backend failed
  kUnavailable,        // 503 unavailable_error: loading, or full
  kGatewayTimeout,     // 504 server_error: a backend stopped answering
};

struct ApiError {
  ApiErrorKind kind;
  std::string message;
};

int http_status(ApiErrorKind kind);
// The "type" string of the error body.
const char* error_type(ApiErrorKind kind);
// {"error":{"code":STATUS,"message":MESSAGE,"type":TYPE}}
nlohmann::json error_body(const ApiError& error);

}  // namespace onebit
