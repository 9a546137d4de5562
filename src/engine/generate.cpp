// The generation loop over Model::forward with one sequence and its own K/V cache.
#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace onebit {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Frees the cache on every exit path.
struct KvGuard {
  Model& model;
  KvCache kv;
  ~KvGuard() { model.free_kv_cache(kv); }
};

}  // namespace

Result<GenerateStats> generate(Model& model, std::span<const TokenId> prompt, const GenerateOptions& options,
                               const std::function<bool(TokenId)>& on_token) {
  if (prompt.empty()) return make_error("generate: the prompt has no tokens; give a prompt (with BOS at least)");
  if (options.n_predict < 0) return make_error("generate: n_predict is " + std::to_string(options.n_predict) + "; allowed >= 0");
  ONEBIT_TRY(validate(options.sampler));
  const int64_t needed = static_cast<int64_t>(prompt.size()) + options.n_predict;
  const int64_t n_ctx = options.n_ctx > 0 ? options.n_ctx : std::min<int64_t>(needed, model.config().context_length);
  if (needed > n_ctx) {
    return make_error("generate: prompt (" + std::to_string(prompt.size()) + " tokens) + " +
                      std::to_string(options.n_predict) + " new tokens exceed the context of " +
                      std::to_string(n_ctx) + "; lower -n or shorten the prompt");
  }
  ONEBIT_ASSIGN_OR_RETURN(KvCache kv, model.new_kv_cache(static_cast<int32_t>(n_ctx)));
  KvGuard guard{model, std::move(kv)};
  Sampler sampler(options.sampler);
  GenerateStats stats;
  stats.n_prompt_tokens = static_cast<int32_t>(prompt.size());
  if (options.n_predict == 0) return stats;

  std::vector<float> logits;  // [vocab]
  auto t0 = std::chrono::steady_clock::now();
  Batch batch{{BatchSequence{&guard.kv, prompt, /*all_logits=*/false}}};
  ONEBIT_TRY(model.forward(batch, logits));
  stats.prompt_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  TokenId token = 0;
  for (int32_t i = 0; i < options.n_predict; ++i) {
    if (i > 0) {
      batch.sequences[0].tokens = std::span<const TokenId>(&token, 1);
      ONEBIT_TRY(model.forward(batch, logits));
    }
    token = sampler.sample(logits);
    ++stats.n_generated_tokens;
    const bool end = options.is_end && options.is_end(token);
    if (!on_token(token) || end) break;
  }
  stats.decode_ms = ms_since(t0);
  return stats;
}

}  // namespace onebit
