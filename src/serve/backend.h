// What the front routes to: a llama-server child (proxied) or, later, the native engine in process.
// The front treats both the same way (architecture.md).
#pragma once

#include <memory>
#include <string>

#include "http/http.h"


namespace onebit {

class FrontBackend {
 public:
  virtual ~FrontBackend() = default;
  virtual std::string label() const = 0;   // "primary/vulkan": for logs and /metrics
  virtual std::string route() const = 0;   // cpu | cuda | vulkan | rocm | hrx
  virtual bool ready() const = 0;
  // Serves a completion-like POST. `hold` (the router's place) must stay alive until the reply,
  // or the stream, has ended. The reply's `model` is rewritten to `alias`.
  virtual void post(const http::Request& req, http::Response& res, std::shared_ptr<void> hold,
                    const std::string& alias) = 0;
  // Relays an auxiliary route (/tokenize, /props, /metrics...) unchanged.
  virtual void relay(const http::Request& req, http::Response& res) = 0;
  // Shutdown past its deadline: every reply in progress ends now, a stream with an error event
  // (`message`, 503) and [DONE], a whole reply with a 503 body; later requests get the same.
  virtual void abort_all(const std::string& message) = 0;
};

}  // namespace onebit
