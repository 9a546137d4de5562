// The HTTP front of `1bit serve`: binds the port first, answers /health (503 until every backend
// is ready), /v1/models, routes POSTs through the Router to a backend, relays auxiliary routes to
// the primary, checks the API key and the Host header, turns any internal error into a 500. The
// sockets, limits and timeouts are the event-loop server's (http/server.h).
#pragma once

#include <signal.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "serve/backend.h"
#include "serve/router.h"

#include "http/server.h"

namespace onebit {

struct FrontOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string alias;
  std::string api_key;                       // empty: no key needed
  size_t max_body_bytes = 16 * 1024 * 1024;  // larger bodies get 413
  int64_t primary_limit = 8;                 // --adaptive-at
  std::vector<std::string> cors_origins;     // browser origins allowed (--cors-origin); empty = any
  http::ServerOptions http = {};             // limits and timeouts (max_body_bytes overrides its own)
};

class Front {
 public:
  // `backends[0]` is the primary. Nothing is bound yet.
  Front(FrontOptions options, std::vector<std::unique_ptr<FrontBackend>> backends);
  ~Front();

  // Binds host:port; an error names the address (e.g. the port is in use).
  Status bind();
  // Serves until stop(); blocking. Call after bind().
  void serve();
  // Thread-safe; makes serve() return.
  void stop();
  // Graceful shutdown: /health turns 503, nothing new is accepted, replies in progress go on for up
  // to `timeout_ms`; then every backend ends what is left (streams with an error event and
  // [DONE], whole replies with a 503), and serve() returns. Blocking; thread-safe.
  void shutdown(int timeout_ms);

  // Marks everything ready once every backend is (call after the backends report ready).
  void set_ready(bool ready);
  // A backend that stopped answering (or restarts) gets no requests; /health is 503 while none
  // answers.
  void set_backend_available(size_t idx, bool available) { router_.set_available(idx, available); }
  bool ready() const;

  // "primary/vulkan 8, overflow/rocm 4": requests routed per backend, for the exit log.
  std::string counts_summary() const;

 private:
  using Route = std::function<void(const http::Request&, http::Response&)>;
  void install_routes();
  void handle(const http::Request& req, http::Response& res);
  void route(const http::Request& req, http::Response& res);
  void preflight(const http::Request& req, http::Response& res);
  // The Access-Control-Allow-Origin value for a request's Origin, or "" when it is not allowed.
  std::string allowed_origin(const std::string& origin) const;
  std::string metrics_text() const;
  FrontOptions options_;
  std::vector<std::unique_ptr<FrontBackend>> backends_;
  Router router_;
  std::vector<std::pair<std::string, std::string>> route_keys_;  // (method, path)
  std::vector<Route> routes_;
  std::unique_ptr<http::Server> server_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> shutting_down_{false};
};

// The shutdown of `1bit serve` after its first stop signal: front.shutdown(timeout_ms), while a
// second signal from `signals` (blocked in this thread) exits the process at once.
void shut_down_on_signal(Front& front, const sigset_t& signals, int timeout_ms);

}  // namespace onebit
