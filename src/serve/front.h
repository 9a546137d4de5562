// The HTTP front of `1bit serve`: binds the port first, answers /health (503 until every backend
// is ready), /v1/models, routes POSTs through the Router to a backend, relays auxiliary routes to
// the primary, checks the API key and the Host header, turns any internal error into a 500.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "serve/backend.h"
#include "serve/router.h"

namespace httplib {
class Server;
}

namespace onebit {

struct FrontOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string alias;
  std::string api_key;                       // empty: no key needed
  size_t max_body_bytes = 16 * 1024 * 1024;  // larger bodies get 413
  int64_t primary_limit = 8;                 // --adaptive-at
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

  // Marks everything ready once every backend is (call after the backends report ready).
  void set_ready(bool ready);
  bool ready() const;

  // "primary/vulkan 8, overflow/rocm 4": requests routed per backend, for the exit log.
  std::string counts_summary() const;

 private:
  void install_routes();
  std::string metrics_text() const;
  FrontOptions options_;
  std::vector<std::unique_ptr<FrontBackend>> backends_;
  Router router_;
  std::unique_ptr<httplib::Server> server_;
  std::atomic<bool> ready_{false};
};

}  // namespace onebit
