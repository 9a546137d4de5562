// Adaptive overflow routing: which backend a request goes to, with in-flight places reserved
// under one lock (product.md, "Adaptive serving"). Pure bookkeeping: no HTTP, no processes.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace onebit {

struct BackendCounts {
  int64_t in_flight = 0;   // requests holding a place now
  int64_t served = 0;      // requests routed here since start
};

// Backend 0 is the primary; the others are overflow backends. Thread-safe.
class Router {
 public:
  // `primary_limit`: requests in flight on the primary before overflowing (--adaptive-at).
  Router(size_t n_backends, int64_t primary_limit);

  // A held place in one backend; releasing it (destruction) frees the place.
  class Ticket {
   public:
    size_t backend_idx() const { return backend_idx_; }
    ~Ticket();
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;

   private:
    friend class Router;
    Ticket(Router* router, size_t idx) : router_(router), backend_idx_(idx) {}
    Router* router_;
    size_t backend_idx_;
  };

  // Chooses and reserves in one step: the primary while it has fewer than `primary_limit` in
  // flight (always, with a single backend), else the overflow backend with the fewest in flight;
  // backends marked unavailable are passed over (an unavailable primary sends everything to the
  // overflow). Null when none is available. The Router must outlive every Ticket.
  std::shared_ptr<Ticket> reserve();

  // A backend that stopped answering (or is restarting) is unavailable until marked again.
  void set_available(size_t idx, bool available);
  bool any_available() const;

  std::vector<BackendCounts> counts() const;

 private:
  void release(size_t idx);
  mutable std::mutex mu_;
  std::vector<BackendCounts> counts_;
  std::vector<bool> available_;
  int64_t primary_limit_;
};

}  // namespace onebit
