// Token sampling from logits. The chain, in this order (docs/api.md "Sampling"):
//   1. logit_bias added (a bias of -100 or less bans the token),
//   2. repeat penalty over the last repeat_last_n tokens of the context (llama.cpp's),
//   3. frequency and presence penalties over the generated tokens (OpenAI's),
//   4. greedy (temperature 0): argmax; otherwise llama.cpp's top-k -> top-p -> min-p ->
//      temperature -> seeded draw.
// Log probabilities describe the distribution the token was drawn from: after steps 1-3, the
// filters and the temperature; for greedy, the log-softmax of the logits after steps 1-3.
// Knows nothing of models or tokenizers.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "base/status.h"

namespace onebit {

inline constexpr float kBanBias = -100.0f;  // a logit_bias at or below this bans the token
inline constexpr int32_t kMaxLogprobs = 20;  // top alternatives reported per token at most

struct LogitBias {
  int32_t id = 0;
  float bias = 0.0f;
};

struct SamplerParams {
  float temperature = 0.8f;  // 0 = greedy (argmax; ties go to the lowest id)
  int32_t top_k = 40;        // keep the k most likely; 0 = off
  float top_p = 0.95f;       // keep the smallest most-likely set with probability >= p; 1 = off
  float min_p = 0.05f;       // drop tokens below min_p * the top probability; 0 = off
  uint64_t seed = 0;         // same seed, same logits, same context -> same tokens
  std::vector<LogitBias> logit_bias;  // ids inside the vocabulary (the caller checks)
  float repeat_penalty = 1.0f;        // > 0; 1 = off: a positive logit is divided, a negative one multiplied
  int32_t repeat_last_n = 64;         // tokens of the context the repeat penalty looks at; -1 = all
  float frequency_penalty = 0.0f;     // [-2, 2]: subtracted once per earlier occurrence in the reply
  float presence_penalty = 0.0f;      // [-2, 2]: subtracted once if the token occurs in the reply
  int32_t n_logprobs = -1;            // -1: none; 0: the chosen token's; k: and the k most likely
};

// Checks the ranges; errors name the parameter, the value and the allowed range.
Status validate(const SamplerParams& p);

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

// The log probability of a sampled token and the most likely alternatives, descending.
struct SampledLogprobs {
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;  // [n_logprobs] at most (fewer when filters kept fewer)
};

// One sequence's sampler: holds the random state. Not thread-safe.
class Sampler {
 public:
  // CHECKs validate(params): callers validate outside input first.
  explicit Sampler(const SamplerParams& params);

  // Picks a token id from logits [vocab] (changed in place by biases and penalties). `context` is
  // every token so far, of which the first n_prompt are the prompt. Returns -1 when no token is
  // left (every logit -inf: all banned). Fills `logprobs` when params.n_logprobs >= 0.
  // With a `draft` token (a drafter's deterministic proposal for this position), speculative
  // sampling: the draft is kept with its probability p(draft), else a token is drawn from p with
  // the draft taken out; the result is distributed exactly as p. Greedy ignores the draft.
  int32_t sample(std::span<float> logits, std::span<const int32_t> context = {}, size_t n_prompt = 0,
                 SampledLogprobs* logprobs = nullptr, int32_t draft = -1);

  const SamplerParams& params() const { return params_; }
  // Greedy with nothing that reads or changes the logits first (no bias, penalties or log
  // probabilities): sample() is then argmax (the lowest id on ties; -1 when every logit is -inf),
  // which a backend can compute where the logits are (Backend::argmax_rows).
  bool plain_greedy() const;

 private:
  struct Candidate {
    int32_t id;
    float logit;
  };
  void apply_penalties(std::span<float> logits, std::span<const int32_t> context, size_t n_prompt);
  // top-k, top-p, min-p as llama.cpp's llama_sampler_*_apply, on candidates sorted descending.
  void apply_filters(std::vector<Candidate>& c) const;
  void sort_candidates(std::span<const float> logits);
  // The top n of the sorted candidates with log probabilities of logit / temp less log_sum.
  void fill_top(size_t n, double temp, double log_sum, SampledLogprobs& out) const;
  // An index into prob drawn with weights prob (summing to `sum`), skipping `skip` (-1: none).
  size_t draw(const std::vector<double>& prob, double sum, ptrdiff_t skip);

  SamplerParams params_;
  std::mt19937_64 rng_;
  std::vector<Candidate> candidates_;  // [vocab] scratch
  std::vector<int32_t> counts_;        // [vocab] scratch: occurrences in the reply
};

// Index of the largest value; the lowest index among equals. CHECKs a non-empty span.
int32_t argmax(std::span<const float> logits);

}  // namespace onebit
