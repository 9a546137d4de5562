// The sampler chain. Order and semantics follow llama.cpp's common sampler (src/llama-sampling.cpp):
// top-k, top-p (on the softmax of the remaining logits), min-p (relative to the top
// probability), temperature, then a draw from the softmax.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/check.h"

namespace onebit {

Status validate(const SamplerParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return make_error("temperature is " + std::to_string(p.temperature) + "; allowed >= 0 (0 = greedy)");
  }
  if (p.top_k < 0) return make_error("top-k is " + std::to_string(p.top_k) + "; allowed >= 0 (0 = off)");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return make_error("top-p is " + std::to_string(p.top_p) + "; allowed (0, 1] (1 = off)");
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return make_error("min-p is " + std::to_string(p.min_p) + "; allowed [0, 1] (0 = off)");
  }
  return ok_status();
}

int32_t argmax(std::span<const float> logits) {
  ONEBIT_CHECK(!logits.empty());
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

Sampler::Sampler(const SamplerParams& params) : params_(params), rng_(params.seed) {
  ONEBIT_CHECK(validate(params).ok());
}

void Sampler::apply_filters(std::vector<Candidate>& c) const {
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < c.size()) c.resize(params_.top_k);
  // Probabilities of the remaining candidates (softmax at temperature 1, as llama.cpp does).
  std::vector<double> prob(c.size());
  double sum = 0.0;
  for (size_t i = 0; i < c.size(); ++i) sum += prob[i] = std::exp(double(c[i].logit) - c[0].logit);
  if (params_.top_p < 1.0f) {
    double cum = 0.0;
    size_t keep = c.size();
    for (size_t i = 0; i < c.size(); ++i) {
      cum += prob[i] / sum;
      if (cum >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
    c.resize(keep);
  }
  if (params_.min_p > 0.0f) {
    // p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p)
    const double threshold = c[0].logit + std::log(double(params_.min_p));
    size_t keep = 1;
    while (keep < c.size() && c[keep].logit >= threshold) ++keep;
    c.resize(keep);
  }
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (params_.temperature <= 0.0f) return argmax(logits);
  candidates_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) candidates_[i] = {static_cast<int32_t>(i), logits[i]};
  // Sorted descending by logit, ids ascending among equals: the result does not depend on the
  // sort's stability.
  std::sort(candidates_.begin(), candidates_.end(), [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  });
  apply_filters(candidates_);
  std::vector<double> prob(candidates_.size());
  double sum = 0.0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    sum += prob[i] = std::exp((double(candidates_[i].logit) - candidates_[0].logit) / params_.temperature);
  }
  // A uniform draw in [0, sum) from the top 53 bits: the same on every standard library.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * sum;
  double cum = 0.0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    cum += prob[i];
    if (u < cum) return candidates_[i].id;
  }
  return candidates_.back().id;
}

}  // namespace onebit
