// The sampler chain. Order and semantics of the filters follow llama.cpp's common sampler
// (src/llama-sampling.cpp): logit bias, penalties, top-k, top-p (on the softmax of the remaining
// logits), min-p (relative to the top probability), temperature, then a draw from the softmax.
// Frequency and presence penalties count the reply's tokens only, as OpenAI defines them.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "base/check.h"

namespace onebit {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

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
  if (!(p.repeat_penalty > 0.0f && p.repeat_penalty <= 10.0f)) {
    return make_error("repeat_penalty is " + std::to_string(p.repeat_penalty) + "; allowed (0, 10] (1 = off)");
  }
  if (p.repeat_last_n < -1) return make_error("repeat_last_n is " + std::to_string(p.repeat_last_n) + "; allowed -1 (all) or >= 0");
  for (float v : {p.frequency_penalty, p.presence_penalty}) {
    if (!(v >= -2.0f && v <= 2.0f)) {
      return make_error(std::string(v == p.frequency_penalty ? "frequency_penalty" : "presence_penalty") + " is " +
                        std::to_string(v) + "; allowed -2 to 2");
    }
  }
  for (const LogitBias& b : p.logit_bias) {
    if (b.id < 0 || !(b.bias >= -100.0f && b.bias <= 100.0f)) {
      return make_error("logit_bias of token " + std::to_string(b.id) + " is " + std::to_string(b.bias) +
                        "; allowed token ids >= 0 and biases -100 to 100");
    }
  }
  if (p.n_logprobs < -1 || p.n_logprobs > kMaxLogprobs) {
    return make_error("logprobs asks for " + std::to_string(p.n_logprobs) + " alternatives; allowed 0 to " +
                      std::to_string(kMaxLogprobs));
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

bool Sampler::plain_greedy() const {
  const SamplerParams& p = params_;
  return p.temperature <= 0.0f && p.logit_bias.empty() && p.repeat_penalty == 1.0f && p.frequency_penalty == 0.0f &&
         p.presence_penalty == 0.0f && p.n_logprobs < 0;
}

void Sampler::apply_penalties(std::span<float> logits, std::span<const int32_t> context, size_t n_prompt) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  for (const LogitBias& b : params_.logit_bias) {
    if (b.id >= vocab) continue;
    logits[b.id] = b.bias <= kBanBias ? kNegInf : logits[b.id] + b.bias;
  }
  auto distinct = [&](std::span<const int32_t> tokens, auto&& apply) {
    // counts_ is all zeros between calls.
    counts_.resize(logits.size(), 0);
    for (int32_t t : tokens) {
      if (t >= 0 && t < vocab) ++counts_[t];
    }
    for (int32_t t : tokens) {
      if (t >= 0 && t < vocab && counts_[t] > 0) {
        apply(t, counts_[t]);
        counts_[t] = 0;
      }
    }
  };
  if (params_.repeat_penalty != 1.0f && params_.repeat_last_n != 0) {
    const size_t n = params_.repeat_last_n < 0 ? context.size() : std::min(context.size(), size_t(params_.repeat_last_n));
    distinct(context.last(n), [&](int32_t t, int32_t) {
      float& l = logits[t];
      l = l <= 0.0f ? l * params_.repeat_penalty : l / params_.repeat_penalty;
    });
  }
  if ((params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f) && n_prompt < context.size()) {
    distinct(context.subspan(n_prompt), [&](int32_t t, int32_t count) {
      logits[t] -= float(count) * params_.frequency_penalty + params_.presence_penalty;
    });
  }
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

void Sampler::sort_candidates(std::span<const float> logits) {
  candidates_.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] != kNegInf) candidates_.push_back({static_cast<int32_t>(i), logits[i]});
  }
  // Sorted descending by logit, ids ascending among equals: the result does not depend on the
  // sort's stability.
  std::sort(candidates_.begin(), candidates_.end(), [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  });
}

void Sampler::fill_top(size_t n, double temp, double log_sum, SampledLogprobs& out) const {
  out.top.clear();
  const double top = candidates_.empty() ? 0.0 : candidates_[0].logit;
  for (size_t i = 0; i < std::min(n, candidates_.size()); ++i) {
    out.top.push_back({candidates_[i].id, static_cast<float>((candidates_[i].logit - top) / temp - log_sum)});
  }
}

size_t Sampler::draw(const std::vector<double>& prob, double sum, ptrdiff_t skip) {
  // A uniform draw in [0, sum) from the top 53 bits: the same on every standard library.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * sum;
  double cum = 0.0;
  size_t last = prob.size() - 1;
  for (size_t i = 0; i < prob.size(); ++i) {
    if (ptrdiff_t(i) == skip) continue;
    last = i;
    cum += prob[i];
    if (u < cum) return i;
  }
  return last;
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> context, size_t n_prompt,
                        SampledLogprobs* logprobs, int32_t draft) {
  ONEBIT_CHECK(!logits.empty());
  apply_penalties(logits, context, n_prompt);
  const bool want = logprobs != nullptr && params_.n_logprobs >= 0;
  const size_t n_top = want ? static_cast<size_t>(params_.n_logprobs) : 0;
  if (params_.temperature <= 0.0f) {
    const int32_t best = argmax(logits);
    if (logits[best] == kNegInf) return -1;
    if (want) {
      // log-softmax at temperature 1 over the whole vocabulary.
      const double top = logits[best];
      double sum = 0.0;
      for (float l : logits) sum += std::exp(double(l) - top);
      const double log_sum = std::log(sum);
      logprobs->logprob = static_cast<float>(-log_sum);
      candidates_.clear();
      for (size_t i = 0; i < logits.size(); ++i) candidates_.push_back({static_cast<int32_t>(i), logits[i]});
      const size_t k = std::min(n_top, candidates_.size());
      std::partial_sort(candidates_.begin(), candidates_.begin() + k, candidates_.end(),
                        [](const Candidate& a, const Candidate& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); });
      fill_top(k, 1.0, log_sum, *logprobs);
    }
    return best;
  }
  sort_candidates(logits);
  if (candidates_.empty()) return -1;
  apply_filters(candidates_);
  std::vector<double> prob(candidates_.size());
  double sum = 0.0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    sum += prob[i] = std::exp((double(candidates_[i].logit) - candidates_[0].logit) / params_.temperature);
  }
  ptrdiff_t at = -1;  // the draft among the candidates
  for (size_t i = 0; i < candidates_.size() && draft >= 0; ++i) {
    if (candidates_[i].id == draft) at = ptrdiff_t(i);
  }
  size_t pick = 0;
  if (at < 0) {
    pick = draw(prob, sum, -1);
  } else if (static_cast<double>(rng_() >> 11) * 0x1.0p-53 * sum < prob[size_t(at)] || candidates_.size() == 1) {
    pick = size_t(at);  // kept with probability p(draft)
  } else {
    pick = draw(prob, sum - prob[size_t(at)], at);  // else from p without the draft, renormalized
  }
  if (want) {
    const double log_sum = std::log(sum);
    logprobs->logprob = static_cast<float>(std::log(prob[pick]) - log_sum);
    fill_top(n_top, params_.temperature, log_sum, *logprobs);
  }
  return candidates_[pick].id;
}

}  // namespace onebit
