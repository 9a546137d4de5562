// One sequence generated to its end through the serving engine (there is one decode loop: the
// engine's): prompt in, each token out through a callback until n_predict tokens, an
// end-of-generation token, or the callback says stop. Knows nothing of text.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/model.h"

namespace onebit {

struct GenerateOptions {
  int32_t n_predict = 128;       // tokens to generate at most (>= 0)
  int32_t n_ctx = 0;             // cache positions; 0 = prompt + n_predict, capped by the model's
  SamplerParams sampler;
  std::function<bool(TokenId)> is_end;  // optional: true for tokens that end generation (EOS)
  GgmlType cache_type = GgmlType::kF16; // K/V storage
};

struct GenerateStats {
  int32_t n_prompt_tokens = 0;
  int32_t n_generated_tokens = 0;  // including an end token that stopped the loop
  double prompt_ms = 0.0;          // prefill wall time
  double decode_ms = 0.0;          // wall time of the token-by-token steps
};

// Runs one sequence on `engine` (options.n_ctx, cache_type and is_end are the engine's then).
// `on_token` gets each generated token as soon as it is sampled (an end token too, before
// stopping) and returns false to stop early. Errors: an empty prompt, invalid sampler
// parameters, a prompt + n_predict longer than the context, or an engine error.
Result<GenerateStats> generate(Engine& engine, std::span<const TokenId> prompt, const GenerateOptions& options,
                               const std::function<bool(TokenId)>& on_token);
// The same on an engine of one slot made for this call over `model`.
Result<GenerateStats> generate(Model& model, std::span<const TokenId> prompt, const GenerateOptions& options,
                               const std::function<bool(TokenId)>& on_token);

}  // namespace onebit
