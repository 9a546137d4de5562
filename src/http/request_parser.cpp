// The HTTP/1.1 request parser (request_parser.h).
#include "http/request_parser.h"

#include <algorithm>
#include <cstdint>

namespace onebit::http {
namespace {

constexpr size_t kMaxChunkLine = 4096;  // chunk size and extensions
constexpr size_t kMaxTarget = 8192;

bool is_tchar(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar); }

// Visible characters, spaces, tabs and obs-text: what a field value may hold.
bool is_field_value(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u == '\t' || u >= 0x20 ? u != 0x7f : false;
  });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes a path; false on a broken escape or a NUL.
bool decode_path(std::string_view in, std::string& out) {
  out.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return false;
      const int hi = hex_value(in[i + 1]), lo = hex_value(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
    }
    if (c == '\0') return false;
    out.push_back(c);
  }
  return true;
}

// A decimal length of at most 18 digits; false otherwise.
bool parse_length(std::string_view s, uint64_t& out) {
  if (s.empty() || s.size() > 18) return false;
  out = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    out = out * 10 + uint64_t(c - '0');
  }
  return true;
}

}  // namespace

bool RequestParser::started() const {
  if (phase_ != Phase::kHead) return true;
  for (size_t i = pos_; i < buf_.size(); ++i) {
    if (buf_[i] != '\r' && buf_[i] != '\n') return true;
  }
  return false;
}

ParseResult RequestParser::fail(int status, std::string message) {
  phase_ = Phase::kError;
  error_status_ = status;
  error_message_ = std::move(message);
  return ParseResult::kError;
}

bool RequestParser::next_line(std::string_view& line, size_t max_len, bool& too_long) {
  too_long = false;
  const size_t nl = buf_.find('\n', pos_);
  if (nl == std::string::npos) {
    too_long = buf_.size() - pos_ > max_len;
    return false;
  }
  if (nl - pos_ > max_len) {
    too_long = true;
    return false;
  }
  line = std::string_view(buf_).substr(pos_, nl - pos_);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  pos_ = nl + 1;
  return true;
}

ParseResult RequestParser::parse() {
  const ParseResult r = parse_some();
  if (r == ParseResult::kNeedMore && pos_ > 0) {  // drop what is parsed: memory stays one copy
    buf_.erase(0, pos_);
    head_scan_ = head_scan_ > pos_ ? head_scan_ - pos_ : 0;
    pos_ = 0;
  }
  return r;
}

ParseResult RequestParser::parse_some() {
  for (;;) {
    switch (phase_) {
      case Phase::kError:
        return ParseResult::kError;
      case Phase::kDone:
        return ParseResult::kComplete;
      case Phase::kHead: {
        // Empty lines before a request line are skipped (RFC 9112 2.2).
        while (pos_ < buf_.size()) {
          if (buf_[pos_] == '\n') {
            ++pos_;
          } else if (buf_[pos_] == '\r') {
            if (pos_ + 1 == buf_.size()) return ParseResult::kNeedMore;
            if (buf_[pos_ + 1] != '\n') return fail(400, "malformed request line");
            pos_ += 2;
          } else {
            break;
          }
        }
        // The head ends at the first empty line: "\n\n" or "\n\r\n".
        size_t end = std::string::npos;
        for (size_t i = std::max(pos_, head_scan_); i < buf_.size(); ++i) {
          if (buf_[i] != '\n') continue;
          if (i + 1 >= buf_.size() || (buf_[i + 1] == '\r' && i + 2 >= buf_.size())) {
            head_scan_ = i;  // look again here when more arrives
            break;
          }
          if (buf_[i + 1] == '\n') {
            end = i + 2;
            break;
          }
          if (buf_[i + 1] == '\r' && buf_[i + 2] == '\n') {
            end = i + 3;
            break;
          }
          head_scan_ = i + 1;
        }
        if (end == std::string::npos) {
          if (buf_.size() - pos_ > limits_.max_head_bytes) {
            return fail(431, "request header too large (limit " + std::to_string(limits_.max_head_bytes) + " bytes)");
          }
          return ParseResult::kNeedMore;
        }
        if (end - pos_ > limits_.max_head_bytes) {
          return fail(431, "request header too large (limit " + std::to_string(limits_.max_head_bytes) + " bytes)");
        }
        const std::string_view head = std::string_view(buf_).substr(pos_, end - pos_);
        pos_ = end;
        if (parse_head(head) == ParseResult::kError) return ParseResult::kError;
        if (parse_framing() == ParseResult::kError) return ParseResult::kError;
        continue;
      }
      case Phase::kBody: {
        const size_t take = std::min(body_left_, buf_.size() - pos_);
        req_.body.append(buf_, pos_, take);
        pos_ += take;
        body_left_ -= take;
        if (body_left_ > 0) return ParseResult::kNeedMore;
        phase_ = Phase::kDone;
        continue;
      }
      case Phase::kChunkSize: {
        std::string_view line;
        bool too_long = false;
        if (!next_line(line, kMaxChunkLine, too_long)) {
          return too_long ? fail(400, "malformed chunked body: chunk size line too long") : ParseResult::kNeedMore;
        }
        const std::string_view size = trim(line.substr(0, line.find(';')));
        if (size.empty() || size.size() > 15) return fail(400, "malformed chunked body: bad chunk size");
        uint64_t n = 0;
        for (char c : size) {
          const int v = hex_value(c);
          if (v < 0) return fail(400, "malformed chunked body: bad chunk size");
          n = n * 16 + uint64_t(v);
        }
        if (req_.body.size() + n > limits_.max_body_bytes) {
          return fail(413, "request body too large (limit " + std::to_string(limits_.max_body_bytes) + " bytes)");
        }
        body_left_ = size_t(n);
        phase_ = n == 0 ? Phase::kTrailers : Phase::kChunkData;
        continue;
      }
      case Phase::kChunkData: {
        const size_t take = std::min(body_left_, buf_.size() - pos_);
        req_.body.append(buf_, pos_, take);
        pos_ += take;
        body_left_ -= take;
        if (body_left_ > 0) return ParseResult::kNeedMore;
        phase_ = Phase::kChunkEnd;
        continue;
      }
      case Phase::kChunkEnd: {
        std::string_view line;
        bool too_long = false;
        if (!next_line(line, 2, too_long)) {
          return too_long ? fail(400, "malformed chunked body: chunk data longer than its size") : ParseResult::kNeedMore;
        }
        if (!line.empty()) return fail(400, "malformed chunked body: chunk data longer than its size");
        phase_ = Phase::kChunkSize;
        continue;
      }
      case Phase::kTrailers: {
        std::string_view line;
        bool too_long = false;
        const size_t before = pos_;
        if (!next_line(line, limits_.max_head_bytes, too_long)) {
          return too_long ? fail(431, "chunked trailer too large") : ParseResult::kNeedMore;
        }
        trailer_bytes_ += pos_ - before;
        if (trailer_bytes_ > limits_.max_head_bytes) return fail(431, "chunked trailer too large");
        if (line.empty()) phase_ = Phase::kDone;  // trailer fields are read past, not used
        continue;
      }
    }
  }
}

ParseResult RequestParser::parse_request_line(std::string_view line) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return fail(400, "malformed request line (expected 'METHOD /path HTTP/1.1')");
  }
  const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                         version = line.substr(sp2 + 1);
  if (!is_token(method) || method.size() > 32) return fail(400, "malformed request line: bad method");
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' || version[5] < '0' ||
      version[5] > '9' || version[7] < '0' || version[7] > '9') {
    return fail(400, "malformed request line: bad HTTP version");
  }
  if (version[5] != '1') return fail(505, "HTTP version " + std::string(version.substr(5)) + " not supported; use HTTP/1.1");
  req_.minor_version = version[7] - '0';
  if (target.empty() || target.size() > kMaxTarget) return fail(target.empty() ? 400 : 414, "bad request target length");
  for (char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return fail(400, "malformed request target");
  }
  req_.method = method;
  req_.target = target;
  std::string_view origin = target;
  if (origin.substr(0, 7) == "http://" || origin.substr(0, 8) == "https://") {  // absolute form
    const size_t slash = origin.find('/', origin.find("//") + 2);
    origin = slash == std::string_view::npos ? std::string_view("/") : origin.substr(slash);
  } else if (origin == "*") {
    if (method != "OPTIONS") return fail(400, "request target '*' is only for OPTIONS");
  } else if (origin[0] != '/') {
    return fail(400, "malformed request target (expected a path starting with '/')");
  }
  const size_t q = origin.find('?');
  if (q != std::string_view::npos) req_.query = origin.substr(q + 1);
  if (!decode_path(origin.substr(0, q), req_.path)) return fail(400, "malformed request target: bad percent escape");
  return ParseResult::kNeedMore;
}

ParseResult RequestParser::parse_head(std::string_view head) {
  size_t at = 0;
  bool first = true;
  while (at < head.size()) {
    size_t nl = head.find('\n', at);
    std::string_view line = head.substr(at, nl - at);
    at = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find('\r') != std::string_view::npos) return fail(400, "malformed request: bare CR in the head");
    if (first) {
      first = false;
      if (parse_request_line(line) == ParseResult::kError) return ParseResult::kError;
      continue;
    }
    if (line.empty()) break;  // the end of the head
    if (line[0] == ' ' || line[0] == '\t') return fail(400, "malformed header: folded lines are not allowed");
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return fail(400, "malformed header line (no ':')");
    const std::string_view name = line.substr(0, colon);
    if (!is_token(name)) return fail(400, "malformed header name '" + std::string(name.substr(0, 64)) + "'");
    const std::string_view value = trim(line.substr(colon + 1));
    if (!is_field_value(value)) return fail(400, "malformed header value for '" + std::string(name) + "'");
    if (int(req_.headers.size()) >= limits_.max_headers) {
      return fail(431, "too many header fields (limit " + std::to_string(limits_.max_headers) + ")");
    }
    req_.headers.add(std::string(name), std::string(value));
  }
  return ParseResult::kNeedMore;
}

ParseResult RequestParser::parse_framing() {
  int hosts = 0;
  const std::string* cl = nullptr;
  const std::string* te = nullptr;
  for (const auto& [name, value] : req_.headers.fields()) {
    if (iequals(name, "Host")) ++hosts;
    if (iequals(name, "Content-Length")) {
      if (cl != nullptr && *cl != value) return fail(400, "conflicting Content-Length headers");
      cl = &value;
    }
    if (iequals(name, "Transfer-Encoding")) {
      if (te != nullptr) return fail(400, "more than one Transfer-Encoding header");
      te = &value;
    }
    if (iequals(name, "Expect")) {
      if (!iequals(value, "100-continue")) return fail(417, "Expect '" + value + "' is not supported");
      expect_continue_ = true;
    }
  }
  if (req_.minor_version >= 1 && hosts != 1) return fail(400, hosts == 0 ? "missing Host header" : "more than one Host header");
  if (te != nullptr) {
    if (cl != nullptr) return fail(400, "both Content-Length and Transfer-Encoding sent");
    if (!iequals(*te, "chunked")) return fail(501, "Transfer-Encoding '" + *te + "' is not supported; send Content-Length or chunked");
    phase_ = Phase::kChunkSize;
    return ParseResult::kNeedMore;
  }
  uint64_t length = 0;
  if (cl != nullptr && !parse_length(*cl, length)) return fail(400, "malformed Content-Length '" + cl->substr(0, 32) + "'");
  if (length > limits_.max_body_bytes) {
    return fail(413, "request body too large: " + std::to_string(length) + " bytes (limit " +
                         std::to_string(limits_.max_body_bytes) + ")");
  }
  body_left_ = size_t(length);
  req_.body.reserve(body_left_);
  phase_ = Phase::kBody;
  return ParseResult::kNeedMore;
}

Request RequestParser::take() {
  Request out = std::move(req_);
  req_ = Request{};
  // Drop the consumed bytes; what follows belongs to the next request.
  buf_.erase(0, pos_);
  if (buf_.capacity() > 64 * 1024 && buf_.size() < 16 * 1024) buf_.shrink_to_fit();
  pos_ = 0;
  head_scan_ = 0;
  phase_ = Phase::kHead;
  body_left_ = 0;
  trailer_bytes_ = 0;
  expect_continue_ = false;
  continue_sent_ = false;
  return out;
}

}  // namespace onebit::http
