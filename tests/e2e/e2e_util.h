// Black-box helpers for the server tests: start the real `1bit serve` on a free port, wait for
// /health, post JSON, read Server-Sent Events. The server dies with the test (ChildProcess).
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/child_process.h"
#include "testdata.h"

namespace onebit::e2e {

using json = nlohmann::json;

inline std::string stories_model() { return testing::testdata_path("models/stories260K.gguf"); }
inline std::string onebit_model() { return testing::source_path("models/onebit-20m-q8_0.gguf"); }

struct Reply {
  int status = 0;  // 0: no reply (connection failed)
  json body;
  std::string raw;
};

struct Stream {
  int status = 0;
  std::vector<json> events;  // every data: event but [DONE]
  bool done = false;         // saw data: [DONE] last
  std::string raw;
};

class Server {
 public:
  // Starts `1bit serve -m model args... --port P` and waits until /health is 200.
  void start(const std::string& model, std::vector<std::string> args = {},
             std::vector<std::pair<std::string, std::string>> env = {}) {
    port_ = *find_free_loopback_port();
    std::vector<std::string> argv = {"serve", "-m", model, "--port", std::to_string(port_), "--device", "cpu"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = ChildProcess::start({testing::binary_path(), argv, env, "[serve] "});
    ASSERT_TRUE(p.ok()) << p.message();
    process_ = std::move(*p);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = client().Get("/health");
      if (r && r->status == 200) return;
      ASSERT_FALSE(process_->poll_exit()) << "1bit serve exited before it was ready";
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    FAIL() << "1bit serve was not ready within 60 s";
  }
  ~Server() {
    if (process_) process_->stop(std::chrono::seconds(5));
  }
  bool alive() { return process_ && !process_->poll_exit(); }
  pid_t pid() const { return process_ ? process_->pid() : -1; }
  // The exit status once the server has ended within `timeout`, else -1.
  int wait_exit(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (auto st = process_->poll_exit()) return *st;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  int port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(120, 0);
    c.set_connection_timeout(5, 0);
    return c;
  }

  Reply post(const std::string& path, const std::string& body, httplib::Headers headers = {}) const {
    auto r = client().Post(path.c_str(), headers, body, "application/json");
    Reply out;
    if (!r) return out;
    out.status = r->status;
    out.raw = r->body;
    out.body = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
    return out;
  }
  Reply post(const std::string& path, const json& body) const { return post(path, body.dump()); }
  Reply get(const std::string& path) const {
    auto r = client().Get(path.c_str());
    Reply out;
    if (!r) return out;
    out.status = r->status;
    out.raw = r->body;
    out.body = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
    return out;
  }

  // Posts with "stream": true and collects the events.
  Stream stream(const std::string& path, json body) const {
    body["stream"] = true;
    Stream s;
    auto r = client().Post(path.c_str(), body.dump(), "application/json");
    if (!r) return s;
    s.status = r->status;
    s.raw = r->body;
    size_t at = 0;
    while ((at = s.raw.find("data: ", at)) != std::string::npos) {
      const size_t end = s.raw.find("\n\n", at);
      const std::string data = s.raw.substr(at + 6, end - at - 6);
      at = end == std::string::npos ? s.raw.size() : end + 2;
      s.done = data == "[DONE]";
      if (!s.done) s.events.push_back(json::parse(data, nullptr, false));
    }
    return s;
  }

 private:
  int port_ = 0;
  std::unique_ptr<ChildProcess> process_;
};

// The error body's fields, checked.
// The value of a Prometheus sample `name` in the server's /metrics, or -1 when it is absent.
inline int64_t metric(const Server& s, const std::string& name) {
  auto m = s.client().Get("/metrics");
  const std::string key = "\n" + name + " ";
  const size_t at = m ? m->body.find(key) : std::string::npos;
  return at == std::string::npos ? -1 : std::stoll(m->body.substr(at + key.size()));
}

// Prompt tokens the prefix cache serves to a repeat of an n-token prompt: its full K/V blocks of
// 16, less the last token when the whole prompt is blocks (it runs again for its logits).
inline int cached_of_repeat(int n) { return n % 16 == 0 ? n - 1 : n / 16 * 16; }

inline void expect_error_body(const Reply& r, int status, const std::string& type) {
  EXPECT_EQ(r.status, status) << r.raw;
  ASSERT_TRUE(r.body.is_object()) << r.raw;
  ASSERT_TRUE(r.body.contains("error")) << r.raw;
  EXPECT_EQ(r.body["error"]["code"], status) << r.raw;
  EXPECT_EQ(r.body["error"]["type"], type) << r.raw;
  EXPECT_TRUE(r.body["error"]["message"].is_string()) << r.raw;
}

}  // namespace onebit::e2e
