// One sequence through the engine; see generate.h.
#include "engine/generate.h"

#include <algorithm>
#include <string>
#include <vector>

namespace onebit {

Result<GenerateStats> generate(Engine& engine, std::span<const TokenId> prompt, const GenerateOptions& options,
                               const std::function<bool(TokenId)>& on_token) {
  if (prompt.empty()) return make_error("generate: the prompt has no tokens; give a prompt (with BOS at least)");
  if (options.n_predict < 0) return make_error("generate: n_predict is " + std::to_string(options.n_predict) + "; allowed >= 0");
  ONEBIT_TRY(validate(options.sampler));
  const int64_t needed = static_cast<int64_t>(prompt.size()) + options.n_predict;
  if (needed > engine.n_ctx()) {
    return make_error("generate: prompt (" + std::to_string(prompt.size()) + " tokens) + " +
                      std::to_string(options.n_predict) + " new tokens exceed the context of " +
                      std::to_string(engine.n_ctx()) + "; lower -n or shorten the prompt");
  }
  GenerateStats stats;
  stats.n_prompt_tokens = static_cast<int32_t>(prompt.size());
  if (options.n_predict == 0) return stats;
  SequenceRequest req;
  req.prompt.assign(prompt.begin(), prompt.end());
  req.n_predict = options.n_predict;
  req.sampler = options.sampler;
  auto handle = engine.submit(std::move(req));
  if (!handle.ok()) return make_error("generate: " + handle.message());
  bool stopped = false;
  for (;;) {
    SequenceEvents ev = (*handle)->wait(1000);
    for (TokenId t : ev.tokens) {
      if (stopped) break;
      ++stats.n_generated_tokens;
      if (!on_token(t)) {
        stopped = true;
        (*handle)->cancel();
      }
    }
    if (!ev.finished) continue;
    if (ev.reason == FinishReason::kError) return make_error("generate: " + ev.error);
    stats.prompt_ms = ev.stats.prompt_ms;
    stats.decode_ms = ev.stats.decode_ms;
    return stats;
  }
}

Result<GenerateStats> generate(Model& model, std::span<const TokenId> prompt, const GenerateOptions& options,
                               const std::function<bool(TokenId)>& on_token) {
  const int64_t needed = static_cast<int64_t>(prompt.size()) + std::max(options.n_predict, 0);
  const int64_t train = model.config().context_length > 0 ? model.config().context_length : needed;
  EngineOptions eo;
  eo.n_ctx = static_cast<int32_t>(std::max<int64_t>(1, options.n_ctx > 0 ? options.n_ctx : std::min(needed, train)));
  eo.cache_type = options.cache_type;
  eo.is_end = options.is_end;
  auto engine = Engine::start(model, std::move(eo));
  if (!engine.ok()) return make_error("generate: " + engine.message());
  return generate(**engine, prompt, options, on_token);
}

}  // namespace onebit
