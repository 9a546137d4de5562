// HTTP/1.1 messages as the server's handlers see them: a parsed request, a response that is either
// whole or a stream pulled from a provider, and the sink a provider writes to. No sockets here
// (server.h owns them) and no JSON (the layers above choose bodies).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace onebit::http {

// Header fields in arrival order; names compare case-insensitively.
class Headers {
 public:
  void add(std::string name, std::string value) { fields_.emplace_back(std::move(name), std::move(value)); }
  // The first field named `name`, or "" when there is none.
  const std::string& get(std::string_view name) const;
  bool has(std::string_view name) const;
  // Replaces every field named `name` with one.
  void set(std::string name, std::string value);
  const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }
  size_t size() const { return fields_.size(); }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

bool iequals(std::string_view a, std::string_view b);

struct Request {
  std::string method;  // "GET", "POST" ...
  std::string target;  // as sent: "/v1/models?x=1"
  std::string path;    // the target's path, percent-decoded: "/v1/models"
  std::string query;   // after '?', raw
  int minor_version = 1;  // HTTP/1.<minor>
  Headers headers;
  std::string body;    // de-chunked
  std::string remote_addr;

  // httplib-style accessors, so handlers read the same either way.
  const std::string& get_header_value(std::string_view name) const { return headers.get(name); }
  bool has_header(std::string_view name) const { return headers.has(name); }
};

// Where a streamed response's provider writes. write() blocks while too much is unsent (the
// client reads slowly) and returns false once the client is gone or the server is stopping: the
// provider should then release what it holds and return false.
class DataSink {
 public:
  virtual ~DataSink() = default;
  virtual bool write(const char* data, size_t size) = 0;
  bool write(std::string_view s) { return write(s.data(), s.size()); }
  // The body is complete (the provider is not called again).
  virtual void done() = 0;
  // False once the client is gone.
  virtual bool is_writable() const = 0;
};

// Called again and again on the handler's thread until it calls sink.done() (the reply is
// complete) or returns false (abandon the reply: the connection is closed without a proper end).
// `offset` is the number of body bytes written so far.
using ContentProvider = std::function<bool(size_t offset, DataSink& sink)>;
// Called once after the stream ends: true when it ended with done().
using ContentReleaser = std::function<void(bool success)>;

struct Response {
  int status = 200;
  Headers headers;
  std::string body;
  ContentProvider provider;  // set: the body is streamed (chunked) instead of `body`
  ContentReleaser releaser;

  void set_header(std::string name, std::string value) { headers.set(std::move(name), std::move(value)); }
  void set_content(std::string content, std::string content_type) {
    body = std::move(content);
    headers.set("Content-Type", std::move(content_type));
  }
  void set_chunked_content_provider(std::string content_type, ContentProvider p, ContentReleaser r = nullptr) {
    headers.set("Content-Type", std::move(content_type));
    provider = std::move(p);
    releaser = std::move(r);
  }
};

// "OK", "Not Found" ...; "Unknown" for codes we never send.
const char* reason_phrase(int status);

// "HTTP/1.1 <status> <reason>\r\n<headers>\r\n" with the framing headers added: Content-Length
// `content_length`, or chunked when it is -1, or neither when it is -2 (the body ends when the
// connection closes: HTTP/1.0); Connection: close when `close`.
std::string serialize_head(const Response& res, int64_t content_length, bool close);

}  // namespace onebit::http
