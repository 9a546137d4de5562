// The benchmark's HTTP client for one server under test: /health, a whole (non-streamed)
// completion returning the reply's JSON with `usage` and `timings`, and a streamed completion
// measuring the time to the first content and counting tokens. Every failure is an Error that
// says what came back (unreachable, the HTTP status and the server's message, not JSON).
#pragma once

#include <atomic>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace onebit {

// What a streamed completion gave.
struct StreamOutcome {
  double ttft_ms = -1.0;           // send to the first chunk carrying content; -1 when none did
  double total_ms = 0.0;           // send to the end of the stream
  int64_t content_chunks = 0;      // chunks with non-empty content (or reasoning) text
  int64_t completion_tokens = 0;   // usage.completion_tokens when the stream sent usage, else content_chunks
  bool usage_seen = false;
  nlohmann::json usage;            // null when absent
  nlohmann::json timings;          // null when absent
};

class BenchClient {
 public:
  // A client of http://127.0.0.1:PORT; `read_timeout_s` bounds the wait for a reply's next bytes.
  BenchClient(int port, int read_timeout_s) : port_(port), read_timeout_s_(read_timeout_s) {}

  // The status of GET /health, or an error when the server cannot be reached.
  Result<int> health() const;

  // POSTs `body` to `path` and returns the reply's JSON object. Errors: unreachable, a status
  // other than 200 (with the server's error message), a body that is not a JSON object, or an
  // object with an "error" member.
  Result<nlohmann::json> complete(const std::string& path, const nlohmann::json& body) const;

  // POSTs `body` (which should ask for "stream": true) and reads the Server-Sent Events to
  // `data: [DONE]`. Errors as complete(), and an error event inside the stream.
  Result<StreamOutcome> stream(const std::string& path, const nlohmann::json& body) const;

 private:
  int port_;
  int read_timeout_s_;
};

// The message of an OpenAI error body ({"error":{"message":...}}), or the body itself, shortened.
std::string error_message_of(const std::string& body);

// Feeds Server-Sent Events bytes and hands each complete `data:` payload to the caller.
class SseSplitter {
 public:
  // Appends bytes; returns the payloads of every event completed by them, in order.
  std::vector<std::string> feed(std::string_view bytes);

 private:
  std::string pending_;
};

}  // namespace onebit
