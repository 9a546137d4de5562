// Prometheus text of the API counters.
#include "serve/metrics.h"

#include <sstream>

namespace onebit {
namespace {

void emit(std::ostringstream& out, const char* name, const char* type, const char* help, double value) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n" << name << " " << value << "\n";
}

}  // namespace

void Metrics::add_generation(int64_t n_prompt_tokens, int64_t n_cached_tokens, int64_t n_completion_tokens,
                             double prompt_ms, double decode_ms) {
  prompt_tokens_total_.fetch_add(n_prompt_tokens);
  cached_tokens_total_.fetch_add(n_cached_tokens);
  completion_tokens_total_.fetch_add(n_completion_tokens);
  prompt_us_total_.fetch_add(static_cast<int64_t>(prompt_ms * 1000.0));
  decode_us_total_.fetch_add(static_cast<int64_t>(decode_ms * 1000.0));
}

std::string Metrics::prometheus_text(int64_t n_queued, int64_t n_running) const {
  std::ostringstream out;
  out.precision(12);
  emit(out, "onebit_requests_total", "counter", "Completion requests received.", requests_total_.load());
  emit(out, "onebit_requests_failed_total", "counter", "Completion requests answered with an error.", requests_failed_.load());
  emit(out, "onebit_prompt_tokens_total", "counter", "Prompt tokens processed (cached ones included).", prompt_tokens_total_.load());
  emit(out, "onebit_prompt_tokens_cached_total", "counter", "Prompt tokens served from the prefix cache.", cached_tokens_total_.load());
  emit(out, "onebit_tokens_predicted_total", "counter", "Tokens generated.", completion_tokens_total_.load());
  emit(out, "onebit_prompt_seconds_total", "counter", "Time spent on prompt processing.", prompt_us_total_.load() / 1e6);
  emit(out, "onebit_tokens_predicted_seconds_total", "counter", "Time spent generating tokens.", decode_us_total_.load() / 1e6);
  emit(out, "onebit_requests_queued", "gauge", "Sequences waiting for a slot.", static_cast<double>(n_queued));
  emit(out, "onebit_requests_processing", "gauge", "Sequences running.", static_cast<double>(n_running));
  return out.str();
}

}  // namespace onebit
