// Implementation of Router: choose-and-reserve under one lock.
#include "serve/router.h"

#include "base/check.h"

namespace onebit {

Router::Router(size_t n_backends, int64_t primary_limit)
    : counts_(n_backends), primary_limit_(primary_limit) {
  ONEBIT_CHECK(n_backends >= 1);
}

Router::Ticket::~Ticket() { router_->release(backend_idx_); }

std::shared_ptr<Router::Ticket> Router::reserve() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t idx = 0;
  if (counts_.size() > 1 && counts_[0].in_flight >= primary_limit_) {
    idx = 1;
    for (size_t i = 2; i < counts_.size(); ++i) {
      if (counts_[i].in_flight < counts_[idx].in_flight) idx = i;
    }
  }
  counts_[idx].in_flight++;
  counts_[idx].served++;
  return std::shared_ptr<Ticket>(new Ticket(this, idx));
}

void Router::release(size_t idx) {
  std::lock_guard<std::mutex> lock(mu_);
  ONEBIT_CHECK(counts_[idx].in_flight > 0);
  counts_[idx].in_flight--;
}

std::vector<BackendCounts> Router::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

}  // namespace onebit
