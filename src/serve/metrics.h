// Counters of the native engine's API for GET /metrics (Prometheus text format 0.0.4).
// Thread-safe (atomics); knows nothing of HTTP or the engine.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace onebit {

// The engine's gauges and counters at the moment of the scrape.
struct EngineGauges {
  int64_t queued = 0, running = 0;
  int64_t blocks_used = 0, blocks_free = 0, blocks_cached = 0;
  int64_t prefix_hit_tokens = 0, preemptions = 0;
  int64_t steps = 0, step_tokens = 0, last_step_tokens = 0;
  int64_t draft_verdicts_paid = 0, draft_verdicts_failed = 0, draft_retired = 0;
};

class Metrics {
 public:
  void add_request() { requests_total_.fetch_add(1); }
  void add_error() { requests_failed_.fetch_add(1); }
  // A finished generation: tokens, times.
  void add_generation(int64_t n_prompt_tokens, int64_t n_cached_tokens, int64_t n_completion_tokens, double prompt_ms,
                      double decode_ms);
  // Speculative decoding of a finished generation: tokens drafted, and of those accepted.
  void add_drafts(int64_t n_drafted, int64_t n_accepted, int64_t n_steps) {
    draft_tokens_total_.fetch_add(n_drafted);
    draft_accepted_total_.fetch_add(n_accepted);
    draft_steps_total_.fetch_add(n_steps);
  }

  // The counters, then the engine's.
  std::string prometheus_text(const EngineGauges& engine) const;

 private:
  std::atomic<int64_t> requests_total_{0};
  std::atomic<int64_t> requests_failed_{0};
  std::atomic<int64_t> prompt_tokens_total_{0};
  std::atomic<int64_t> cached_tokens_total_{0};
  std::atomic<int64_t> completion_tokens_total_{0};
  std::atomic<int64_t> prompt_us_total_{0};
  std::atomic<int64_t> decode_us_total_{0};
  std::atomic<int64_t> draft_tokens_total_{0};
  std::atomic<int64_t> draft_accepted_total_{0};
  std::atomic<int64_t> draft_steps_total_{0};
};

}  // namespace onebit
