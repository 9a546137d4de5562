// Error kinds -> HTTP status and OpenAI error type.
#include "api/openai_error.h"

namespace onebit {

int http_status(ApiErrorKind kind) {
  switch (kind) {
    case ApiErrorKind::kInvalidRequest: return 400;
    case ApiErrorKind::kExceedContext: return 400;
    case ApiErrorKind::kAuthentication: return 401;
    case ApiErrorKind::kPermission: return 403;
    case ApiErrorKind::kNotFound: return 404;
    case ApiErrorKind::kPayloadTooLarge: return 413;
    case ApiErrorKind::kServer: return 500;
    case ApiErrorKind::kNotSupported: return 501;
    case ApiErrorKind::kBadGateway: return 502;
    case ApiErrorKind::kUnavailable: return 503;
    case ApiErrorKind::kGatewayTimeout: return 504;
  }
  return 500;
}

const char* error_type(ApiErrorKind kind) {
  switch (kind) {
    case ApiErrorKind::kInvalidRequest: return "invalid_request_error";
    case ApiErrorKind::kExceedContext: return "exceed_context_size_error";
    case ApiErrorKind::kAuthentication: return "authentication_error";
    case ApiErrorKind::kPermission: return "permission_error";
    case ApiErrorKind::kNotFound: return "not_found_error";
    case ApiErrorKind::kPayloadTooLarge: return "invalid_request_error";
    case ApiErrorKind::kServer: return "server_error";
    case ApiErrorKind::kNotSupported: return "not_supported_error";
    case ApiErrorKind::kBadGateway: return "server_error";
    case ApiErrorKind::kUnavailable: return "unavailable_error";
    case ApiErrorKind::kGatewayTimeout: return "server_error";
  }
  return "server_error";
}

nlohmann::json error_body(const ApiError& error) {
  return {{"error", {{"code", http_status(error.kind)}, {"message", error.message}, {"type", error_type(error.kind)}}}};
}

}  // namespace onebit
