// The benchmark's HTTP client; see client.h.
#include "bench/client.h"

#include <httplib.h>

#include <chrono>

namespace onebit {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::unique_ptr<httplib::Client> make_client(int port, int read_timeout_s) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  c->set_connection_timeout(5, 0);
  c->set_read_timeout(read_timeout_s, 0);
  c->set_write_timeout(60, 0);
  return c;
}

std::string shorten(const std::string& s, size_t n = 300) {
  return s.size() <= n ? s : s.substr(0, n) + "...";
}

std::string unreachable(const std::string& path, httplib::Error e) {
  return "POST " + path + " failed: " + httplib::to_string(e) + " (is the server still running? see its log)";
}

// The text a stream chunk carries: delta.content, delta.reasoning_content or (completions) text.
std::string chunk_text(const json& ev) {
  if (!ev.contains("choices") || !ev["choices"].is_array() || ev["choices"].empty()) return "";
  const json& c = ev["choices"][0];
  std::string out;
  if (c.contains("delta") && c["delta"].is_object()) {
    const json& d = c["delta"];
    for (const char* k : {"content", "reasoning_content"}) {
      if (d.contains(k) && d[k].is_string()) out += d[k].get<std::string>();
    }
  }
  if (c.contains("text") && c["text"].is_string()) out += c["text"].get<std::string>();
  return out;
}

}  // namespace

std::string error_message_of(const std::string& body) {
  auto j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error")) {
    const json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) return e["message"].get<std::string>();
    if (e.is_string()) return e.get<std::string>();
    return shorten(e.dump());
  }
  return shorten(body);
}

std::vector<std::string> SseSplitter::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (c != '\r') pending_.push_back(c);
  }
  std::vector<std::string> out;
  size_t pos;
  while ((pos = pending_.find("\n\n")) != std::string::npos) {
    const std::string event = pending_.substr(0, pos);
    pending_.erase(0, pos + 2);
    std::string data;
    size_t start = 0;
    while (start < event.size()) {
      size_t end = event.find('\n', start);
      if (end == std::string::npos) end = event.size();
      const std::string line = event.substr(start, end - start);
      if (line.rfind("data:", 0) == 0) {
        std::string payload = line.substr(5);
        if (!payload.empty() && payload[0] == ' ') payload.erase(0, 1);
        data += (data.empty() ? "" : "\n") + payload;
      }
      start = end + 1;
    }
    if (!data.empty()) out.push_back(std::move(data));
  }
  return out;
}

Result<int> BenchClient::health() const {
  httplib::Client c("127.0.0.1", port_);
  c.set_connection_timeout(1, 0);
  c.set_read_timeout(2, 0);
  auto r = c.Get("/health");
  if (!r) return make_error("GET /health failed: " + httplib::to_string(r.error()));
  return r->status;
}

Result<json> BenchClient::complete(const std::string& path, const json& body) const {
  auto client = make_client(port_, read_timeout_s_);
  auto r = client->Post(path, body.dump(), "application/json");
  if (!r) return make_error(unreachable(path, r.error()));
  if (r->status != 200) {
    return make_error("POST " + path + ": the server answered HTTP " + std::to_string(r->status) + ": " + error_message_of(r->body));
  }
  // A slow whole reply may start with blanks (keep-alive); JSON allows leading whitespace.
  auto j = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return make_error("POST " + path + ": the reply is not a JSON object: " + shorten(r->body));
  if (j.contains("error")) return make_error("POST " + path + ": the server answered an error: " + error_message_of(r->body));
  return j;
}

Result<StreamOutcome> BenchClient::stream(const std::string& path, const json& body) const {
  auto client = make_client(port_, read_timeout_s_);
  StreamOutcome out;
  SseSplitter splitter;
  std::string error;
  std::string raw;  // the body when the status is not 200
  int status = 0;
  bool done = false;
  const auto start = Clock::now();

  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    if (status != 200) {
      raw.append(data, len);
      return raw.size() < (1 << 20);
    }
    for (const std::string& payload : splitter.feed(std::string_view(data, len))) {
      if (payload == "[DONE]") {
        done = true;
        continue;
      }
      auto ev = json::parse(payload, nullptr, /*allow_exceptions=*/false);
      if (!ev.is_object()) {
        error = "a stream event is not JSON: " + shorten(payload);
        return false;
      }
      if (ev.contains("error")) {
        error = "the stream carried an error: " + error_message_of(payload);
        return false;
      }
      if (!chunk_text(ev).empty()) {
        if (out.content_chunks == 0) out.ttft_ms = ms_since(start);
        ++out.content_chunks;
      }
      if (ev.contains("usage") && ev["usage"].is_object()) out.usage = ev["usage"];
      if (ev.contains("timings") && ev["timings"].is_object()) out.timings = ev["timings"];
    }
    return true;
  };
  auto r = client->send(req);
  out.total_ms = ms_since(start);
  if (!error.empty()) return make_error("POST " + path + " (stream): " + error);
  if (!r) return make_error(unreachable(path, r.error()));
  if (r->status != 200) {
    const std::string& b = raw.empty() ? r->body : raw;
    return make_error("POST " + path + " (stream): the server answered HTTP " + std::to_string(r->status) + ": " + error_message_of(b));
  }
  if (!done) return make_error("POST " + path + " (stream): the stream ended without 'data: [DONE]'");
  const json& u = out.usage;
  if (u.is_object() && u.contains("completion_tokens") && u["completion_tokens"].is_number_integer()) {
    out.usage_seen = true;
    out.completion_tokens = u["completion_tokens"].get<int64_t>();
  } else {
    out.completion_tokens = out.content_chunks;
  }
  return out;
}

}  // namespace onebit
