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

std::string Metrics::prometheus_text(const EngineGauges& g) const {
  std::ostringstream out;
  out.precision(12);
  emit(out, "onebit_requests_total", "counter", "Completion requests received.", requests_total_.load());
  emit(out, "onebit_requests_failed_total", "counter", "Completion requests answered with an error.", requests_failed_.load());
  emit(out, "onebit_prompt_tokens_total", "counter", "Prompt tokens processed (cached ones included).", prompt_tokens_total_.load());
  emit(out, "onebit_prompt_tokens_cached_total", "counter", "Prompt tokens served from the prefix cache.", cached_tokens_total_.load());
  emit(out, "onebit_tokens_predicted_total", "counter", "Tokens generated.", completion_tokens_total_.load());
  emit(out, "onebit_prompt_seconds_total", "counter", "Time spent on prompt processing.", prompt_us_total_.load() / 1e6);
  emit(out, "onebit_tokens_predicted_seconds_total", "counter", "Time spent generating tokens.", decode_us_total_.load() / 1e6);
  emit(out, "onebit_draft_tokens_total", "counter", "Tokens a drafter proposed (speculative decoding).", draft_tokens_total_.load());
  emit(out, "onebit_draft_tokens_accepted_total", "counter", "Drafted tokens the target model kept.", draft_accepted_total_.load());
  emit(out, "onebit_draft_steps_total", "counter",
       "Verification steps that carried a draft (accepted per step and draft length: the two above over this).",
       draft_steps_total_.load());
  emit(out, "onebit_draft_verdicts_paid_total", "counter",
       "Times the draft governor found drafted decode turns faster than plain ones (drafting stays on).",
       double(g.draft_verdicts_paid));
  emit(out, "onebit_draft_verdicts_failed_total", "counter",
       "Times the draft governor found drafting not paying and turned it off for a while.", double(g.draft_verdicts_failed));
  emit(out, "onebit_draft_sequences_retired_total", "counter",
       "Sequences that decoded 512 tokens without a draft and stopped drafting.", double(g.draft_retired));
  emit(out, "onebit_requests_queued", "gauge", "Sequences waiting for admission (preempted ones included).", double(g.queued));
  emit(out, "onebit_requests_processing", "gauge", "Sequences running.", double(g.running));
  emit(out, "onebit_kv_blocks_used", "gauge", "K/V blocks held by sequences.", double(g.blocks_used));
  emit(out, "onebit_kv_blocks_free", "gauge", "K/V blocks no sequence holds (cached ones included).", double(g.blocks_free));
  emit(out, "onebit_kv_blocks_cached", "gauge", "Free K/V blocks that still hold a cached prefix.", double(g.blocks_cached));
  emit(out, "onebit_prefix_cache_hit_tokens_total", "counter", "Prompt tokens taken from the prefix cache.", double(g.prefix_hit_tokens));
  emit(out, "onebit_preemptions_total", "counter", "Sequences preempted (K/V released, recomputed later).", double(g.preemptions));
  emit(out, "onebit_engine_steps_total", "counter", "Engine steps run.", double(g.steps));
  emit(out, "onebit_engine_step_tokens_total", "counter", "Tokens of all engine steps.", double(g.step_tokens));
  emit(out, "onebit_engine_tokens_per_step", "gauge", "Tokens of the last engine step.", double(g.last_step_tokens));
  return out.str();
}

}  // namespace onebit
