// An incremental HTTP/1.1 request parser (RFC 9112) with limits checked as bytes arrive: bytes
// are appended as they are read, parse() makes what progress it can, and a complete request is
// taken out while the bytes after it stay buffered (pipelining). Strict where leniency enables
// request smuggling (Content-Length with Transfer-Encoding, differing lengths, space before the
// colon, folded lines); lenient where clients differ harmlessly (bare LF line ends, empty lines
// before a request line).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "http/http.h"

namespace onebit::http {

struct ParserLimits {
  size_t max_head_bytes = 16 * 1024;         // request line + header fields: 431 past it
  int max_headers = 100;                     // 431 past it
  size_t max_body_bytes = 16 * 1024 * 1024;  // 413 past it (known from Content-Length at once)
};

enum class ParseResult {
  kNeedMore,  // waiting for bytes
  kComplete,  // take() the request
  kError,     // error_status() / error_message(); the connection cannot be read further
};

class RequestParser {
 public:
  explicit RequestParser(ParserLimits limits = {}) : limits_(limits) {}

  void append(std::string_view bytes) { buf_.append(bytes); }
  ParseResult parse();

  // The current request's head is parsed (its body may be pending).
  bool head_done() const { return phase_ != Phase::kHead; }
  // Bytes of a request have arrived (an idle keep-alive connection has none).
  bool started() const;
  // The head asked for "Expect: 100-continue" and the body has not begun: the server should send
  // an interim 100 (once; see continue_sent()).
  bool wants_continue() const { return expect_continue_ && !continue_sent_ && phase_ != Phase::kHead; }
  void continue_sent() { continue_sent_ = true; }
  // The request being parsed, once its head is parsed (method, path, headers).
  const Request& request() const { return req_; }

  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

  // The complete request; the parser moves on to the next one (whose bytes may be buffered).
  Request take();
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  enum class Phase { kHead, kBody, kChunkSize, kChunkData, kChunkEnd, kTrailers, kDone, kError };
  ParseResult parse_some();
  ParseResult fail(int status, std::string message);
  ParseResult parse_head(std::string_view head);
  ParseResult parse_request_line(std::string_view line);
  ParseResult parse_framing();
  // The next line from pos_ (without its CR LF / LF) or false when it has not fully arrived.
  bool next_line(std::string_view& line, size_t max_len, bool& too_long);

  ParserLimits limits_;
  std::string buf_;
  size_t pos_ = 0;         // parsed up to here
  size_t head_scan_ = 0;   // the head's end was searched for up to here
  Phase phase_ = Phase::kHead;
  Request req_;
  size_t body_left_ = 0;   // Content-Length still to come, or the current chunk's
  size_t trailer_bytes_ = 0;
  bool expect_continue_ = false;
  bool continue_sent_ = false;
  int error_status_ = 0;
  std::string error_message_;
};

}  // namespace onebit::http
