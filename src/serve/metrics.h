// Counters of the native engine's API for GET /metrics (Prometheus text format 0.0.4).
// Thread-safe (atomics); knows nothing of HTTP or the engine.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace onebit {

class Metrics {
 public:
  void add_request() { requests_total_.fetch_add(1); }
  void add_error() { requests_failed_.fetch_add(1); }
  // A finished generation: tokens, times.
  void add_generation(int64_t n_prompt_tokens, int64_t n_cached_tokens, int64_t n_completion_tokens, double prompt_ms,
                      double decode_ms);

  // The counters, then the gauges given (queue length, sequences running).
  std::string prometheus_text(int64_t n_queued, int64_t n_running) const;

 private:
  std::atomic<int64_t> requests_total_{0};
  std::atomic<int64_t> requests_failed_{0};
  std::atomic<int64_t> prompt_tokens_total_{0};
  std::atomic<int64_t> cached_tokens_total_{0};
  std::atomic<int64_t> completion_tokens_total_{0};
  std::atomic<int64_t> prompt_us_total_{0};
  std::atomic<int64_t> decode_us_total_{0};
};

}  // namespace onebit
