// Implementation of Router: choose-and-reserve under one lock.
#include "serve/router.h"

#include "base/check.h"

#include <cstdint>

namespace onebit {

Router::Router(size_t n_backends, int64_t primary_limit)
    : counts_(n_backends), available_(n_backends, true), primary_limit_(primary_limit) {
  ONEBIT_CHECK(n_backends >= 1);
}

Router::Ticket::~Ticket() { router_->release(backend_idx_); }

std::shared_ptr<Router::Ticket> Router::reserve() {
  std::lock_guard<std::mutex> lock(mu_);
  constexpr size_t kNone = SIZE_MAX;
  size_t idx = kNone;
  if (available_[0] && (counts_.size() == 1 || counts_[0].in_flight < primary_limit_)) {
    idx = 0;
  } else {
    for (size_t i = 1; i < counts_.size(); ++i) {
      if (available_[i] && (idx == kNone || counts_[i].in_flight < counts_[idx].in_flight)) idx = i;
    }
    if (idx == kNone && available_[0]) idx = 0;  // no overflow answering: the primary queues it
  }
  if (idx == kNone) return nullptr;
  counts_[idx].in_flight++;
  counts_[idx].served++;
  return std::shared_ptr<Ticket>(new Ticket(this, idx));
}

void Router::set_available(size_t idx, bool available) {
  std::lock_guard<std::mutex> lock(mu_);
  available_.at(idx) = available;
}

bool Router::any_available() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (bool a : available_) {
    if (a) return true;
  }
  return false;
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
