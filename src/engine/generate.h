// The single-sequence generation loop: prefill the prompt, then sample and decode one token at a
// time until n_predict tokens, an end-of-generation token, or the callback says stop.
// Uses the model seam (Model::forward); knows nothing of text (the caller decodes tokens).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "base/status.h"
#include "engine/sampler.h"
#include "model/model.h"

namespace onebit {

struct GenerateOptions {
  int32_t n_predict = 128;       // tokens to generate at most (>= 0)
  int32_t n_ctx = 0;             // cache positions; 0 = prompt + n_predict, capped by the model's
  SamplerParams sampler;
  std::function<bool(TokenId)> is_end;  // optional: true for tokens that end generation (EOS)
};

struct GenerateStats {
  int32_t n_prompt_tokens = 0;
  int32_t n_generated_tokens = 0;  // including an end token that stopped the loop
  double prompt_ms = 0.0;          // prefill wall time
  double decode_ms = 0.0;          // wall time of the token-by-token steps
};

// Runs the loop. `on_token` gets each generated token as soon as it is sampled (an end token
// too, before stopping) and returns false to stop early. Errors: an empty prompt, invalid
// sampler parameters, a prompt + n_predict longer than the context, or a forward error.
Result<GenerateStats> generate(Model& model, std::span<const TokenId> prompt, const GenerateOptions& options,
                               const std::function<bool(TokenId)>& on_token);

}  // namespace onebit
