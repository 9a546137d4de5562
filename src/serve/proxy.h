// The llama-server child as a FrontBackend: requests forwarded over loopback HTTP, streams relayed
// chunk by chunk as they arrive, `model` rewritten to the served alias in replies and in each chunk.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "api/openai_error.h"
#include "serve/backend.h"

namespace onebit {

// Rewrites `model` in every `data: {...}` event of a server-sent-event stream fed in pieces.
class SseModelRewriter {
 public:
  explicit SseModelRewriter(std::string alias) : alias_(std::move(alias)) {}
  // Appends bytes; returns the complete events among them, rewritten. Partial events wait.
  std::string feed(const std::string& bytes);
  // Whatever is left (an unterminated last event), rewritten.
  std::string finish();

 private:
  std::string rewrite_event(const std::string& event) const;
  std::string alias_;
  std::string pending_;
};

// Rewrites the top-level `model` of a JSON object body to `alias`; other bodies are unchanged.
std::string rewrite_model_in_json(const std::string& body, const std::string& alias);

class ChildBackend : public FrontBackend {
 public:
  ChildBackend(std::string label, std::string route, int port);

  std::string label() const override { return label_; }
  std::string route() const override { return route_; }
  bool ready() const override { return ready_.load(); }
  void set_ready(bool r) { ready_.store(r); }
  int port() const { return port_.load(); }
  // A restarted child listens on a new port (its old one may have been taken meanwhile).
  void set_port(int port) { port_.store(port); }

  void post(const http::Request& req, http::Response& res, std::shared_ptr<void> hold,
            const std::string& alias) override;
  void relay(const http::Request& req, http::Response& res) override;
  void abort_all(const std::string& message) override;
  // Ends every reply in progress with an error (`kind`, `message`): the child stopped answering.
  void cut_in_flight(const std::string& message, ApiErrorKind kind);

  struct Aborter;  // proxy.cpp

 private:
  void post_streamed(const http::Request& req, http::Response& res, std::shared_ptr<void> hold,
                     const std::string& alias);
  std::string label_;
  std::string route_;
  std::atomic<int> port_;
  std::atomic<bool> ready_{false};
  std::shared_ptr<Aborter> aborter_;
};

// Polls http://127.0.0.1:port/health once: true only for status 200.
bool child_health_ok(int port);

}  // namespace onebit
