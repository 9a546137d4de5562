// Token sampling from logits: greedy, or llama.cpp's chain top-k -> top-p -> min-p -> temperature
// -> seeded draw. Knows nothing of models or tokenizers.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "base/status.h"

namespace onebit {

struct SamplerParams {
  float temperature = 0.8f;  // 0 = greedy (argmax; ties go to the lowest id)
  int32_t top_k = 40;        // keep the k most likely; 0 = off
  float top_p = 0.95f;       // keep the smallest most-likely set with probability >= p; 1 = off
  float min_p = 0.05f;       // drop tokens below min_p * the top probability; 0 = off
  uint64_t seed = 0;         // same seed, same logits -> same tokens
};

// Checks the ranges; errors name the parameter, the value and the allowed range.
Status validate(const SamplerParams& p);

// One sequence's sampler: holds the random state. Not thread-safe.
class Sampler {
 public:
  // CHECKs validate(params): callers validate outside input first.
  explicit Sampler(const SamplerParams& params);

  // Picks a token id from logits [vocab] (at least one finite value).
  int32_t sample(std::span<const float> logits);

 private:
  struct Candidate {
    int32_t id;
    float logit;
  };
  // top-k, top-p, min-p as llama.cpp's llama_sampler_*_apply, on candidates sorted descending.
  void apply_filters(std::vector<Candidate>& c) const;

  SamplerParams params_;
  std::mt19937_64 rng_;
  std::vector<Candidate> candidates_;  // [vocab] scratch
};

// Index of the largest value; the lowest index among equals. CHECKs a non-empty span.
int32_t argmax(std::span<const float> logits);

}  // namespace onebit
