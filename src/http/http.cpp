// HTTP messages (http.h).
#include "http/http.h"

#include <algorithm>

namespace onebit::http {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; };
           return lower(x) == lower(y);
         });
}

const std::string& Headers::get(std::string_view name) const {
  static const std::string kEmpty;
  for (const auto& [n, v] : fields_) {
    if (iequals(n, name)) return v;
  }
  return kEmpty;
}

bool Headers::has(std::string_view name) const {
  return std::any_of(fields_.begin(), fields_.end(), [&](const auto& f) { return iequals(f.first, name); });
}

void Headers::set(std::string name, std::string value) {
  std::erase_if(fields_, [&](const auto& f) { return iequals(f.first, name); });
  fields_.emplace_back(std::move(name), std::move(value));
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string serialize_head(const Response& res, int64_t content_length, bool close) {
  std::string out = "HTTP/1.1 " + std::to_string(res.status) + " " + reason_phrase(res.status) + "\r\n";
  for (const auto& [name, value] : res.headers.fields()) {
    if (iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding") || iequals(name, "Connection")) continue;
    // A CR or LF from a handler's value cannot split the head (response splitting).
    auto clean = [](std::string s) {
      std::replace_if(s.begin(), s.end(), [](char c) { return c == '\r' || c == '\n'; }, ' ');
      return s;
    };
    out += clean(name) + ": " + clean(value) + "\r\n";
  }
  if (res.status == 204 || res.status == 304) {
    // No body, and no Content-Length (RFC 9110 8.6).
  } else if (content_length >= 0) {
    out += "Content-Length: " + std::to_string(content_length) + "\r\n";
  } else if (content_length == -1) {
    out += "Transfer-Encoding: chunked\r\n";
  }
  out += close ? "Connection: close\r\n\r\n" : "Connection: keep-alive\r\n\r\n";
  return out;
}

}  // namespace onebit::http
