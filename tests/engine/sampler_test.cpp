// The sampler: greedy is argmax, a seed fixes the draws, and the filters keep what llama.cpp's
// top-k / top-p / min-p keep. Draw frequencies are checked against the softmax computed here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <limits>
#include <vector>

#include "backend/backend_factory.h"
#include "engine/sampler.h"

namespace onebit {
namespace {

// sample() changes the logits it is given (biases, penalties): each call gets a copy.
int32_t draw(Sampler& s, std::vector<float> logits, const std::vector<int32_t>& context = {}, size_t n_prompt = 0,
             SampledLogprobs* lp = nullptr) {
  return s.sample(logits, context, n_prompt, lp);
}

// log-softmax of logits / temp over the ids in `keep` (all when empty), computed here in long double.
std::map<int32_t, double> log_softmax(const std::vector<float>& logits, double temp, std::vector<int32_t> keep = {}) {
  if (keep.empty()) {
    for (size_t i = 0; i < logits.size(); ++i) keep.push_back(int32_t(i));
  }
  long double sum = 0;
  for (int32_t id : keep) sum += std::exp((long double)logits[id] / temp);
  std::map<int32_t, double> out;
  for (int32_t id : keep) out[id] = double((long double)logits[id] / temp - std::log(sum));
  return out;
}

SamplerParams plain(float temp, uint64_t seed) {
  SamplerParams p;
  p.temperature = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  Sampler s(plain(0.0f, 1));
  EXPECT_EQ(draw(s, {0.1f, 3.0f, -2.0f, 3.0f}), 1);
  EXPECT_EQ(argmax(std::vector<float>{-1.0f}), 0);
}

// The backends' argmax_rows (a device's greedy rows come back as ids) is the greedy sampler's
// choice: on random rows, ties, NaN first / elsewhere / everywhere, all -inf (-1: nothing to take).
TEST(Sampler, BackendArgmaxRowsIsTheGreedyChoice) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), ninf = -std::numeric_limits<float>::infinity();
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int64_t n = 16, d = 50;
  std::vector<float> x(size_t(n * d));
  for (float& v : x) v = normal(rng);
  for (int64_t i = 0; i < n; ++i) {
    float* r = x.data() + i * d;
    const int64_t best = std::max_element(r, r + d) - r;
    if (i % 8 == 1) r[d - 1] = r[best];
    if (i % 8 == 2) r[0] = r[best];
    if (i % 8 == 3) r[0] = nan;
    if (i % 8 == 4) r[7] = nan;
    if (i % 8 == 5) std::fill(r, r + d, nan);
    if (i % 8 == 6) std::fill(r, r + d, ninf);
    if (i % 8 == 7) std::fill(r, r + d, ninf), r[3] = nan;
  }
  for (const char* name : {"reference", "cpu"}) {
    auto be = make_backend(name, 2).value();
    Tensor xt = be->alloc(GgmlType::kF32, n, d).value(), ids = be->alloc(GgmlType::kI32, 1, n).value();
    be->write(xt, x.data());
    be->argmax_rows(xt, ids);
    std::vector<int32_t> got(static_cast<size_t>(n), 0);
    be->read(ids, got.data());
    be->synchronize();
    for (int64_t i = 0; i < n; ++i) {
      Sampler s(plain(0.0f, 1));
      EXPECT_EQ(got[size_t(i)], draw(s, std::vector<float>(x.begin() + i * d, x.begin() + (i + 1) * d)))
          << name << " row " << i;
    }
  }
}

TEST(Sampler, SameSeedSameTokensOtherSeedDiffers) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(float(i));
  auto run = [&](uint64_t seed) {
    Sampler s(plain(1.0f, seed));
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(draw(s, logits));
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(Sampler, FrequenciesFollowTemperedSoftmax) {
  // logits 0, ln 3 at temperature 1 -> p = 1/4, 3/4; at temperature 2 -> 1/(1+sqrt 3).
  const std::vector<float> logits = {0.0f, std::log(3.0f)};
  for (float temp : {1.0f, 2.0f}) {
    Sampler s(plain(temp, 123));
    int n0 = 0;
    const int n = 40000;
    for (int i = 0; i < n; ++i) n0 += draw(s, logits) == 0;
    const double expect = 1.0 / (1.0 + std::pow(3.0, 1.0 / temp));
    EXPECT_NEAR(double(n0) / n, expect, 0.01) << "temperature " << temp;
  }
}

TEST(Sampler, TopKTopPMinPFilter) {
  // probabilities (temperature 1): 0.5, 0.25, 0.125, 0.125
  const std::vector<float> logits = {std::log(0.5f), std::log(0.25f), std::log(0.125f), std::log(0.125f)};
  auto seen = [&](SamplerParams p) {
    Sampler s(p);
    std::map<int32_t, int> count;
    for (int i = 0; i < 4000; ++i) ++count[draw(s, logits)];
    std::vector<int32_t> ids;
    for (auto& [id, n] : count) ids.push_back(id);
    return ids;
  };
  SamplerParams p = plain(1.0f, 5);
  EXPECT_EQ(seen(p), (std::vector<int32_t>{0, 1, 2, 3}));
  p.top_k = 2;
  EXPECT_EQ(seen(p), (std::vector<int32_t>{0, 1}));
  p = plain(1.0f, 5);
  p.top_p = 0.7f;  // 0.5 < 0.7 <= 0.75: the first two
  EXPECT_EQ(seen(p), (std::vector<int32_t>{0, 1}));
  p = plain(1.0f, 5);
  p.min_p = 0.3f;  // keeps p >= 0.15: the first two
  EXPECT_EQ(seen(p), (std::vector<int32_t>{0, 1}));
  p.min_p = 0.6f;  // keeps p >= 0.3: the first only
  EXPECT_EQ(seen(p), (std::vector<int32_t>{0}));
}

TEST(Sampler, ValidateRejectsOutOfRange) {
  SamplerParams p;
  p.temperature = -1.0f;
  EXPECT_FALSE(validate(p).ok());
  p = SamplerParams{};
  p.top_p = 0.0f;
  EXPECT_NE(validate(p).message().find("top-p"), std::string::npos);
  p = SamplerParams{};
  p.min_p = 1.5f;
  EXPECT_FALSE(validate(p).ok());
  p = SamplerParams{};
  p.top_k = -3;
  EXPECT_FALSE(validate(p).ok());
  EXPECT_TRUE(validate(SamplerParams{}).ok());
  p = SamplerParams{};
  p.presence_penalty = 2.5f;
  EXPECT_NE(validate(p).message().find("presence_penalty"), std::string::npos);
  p = SamplerParams{};
  p.repeat_penalty = 0.0f;
  EXPECT_NE(validate(p).message().find("repeat_penalty"), std::string::npos);
  p = SamplerParams{};
  p.logit_bias = {{3, 101.0f}};
  EXPECT_NE(validate(p).message().find("logit_bias"), std::string::npos);
  p = SamplerParams{};
  p.n_logprobs = 21;
  EXPECT_FALSE(validate(p).ok());
}

TEST(Sampler, LogitBiasBansAndShifts) {
  SamplerParams p = plain(0.0f, 1);
  p.logit_bias = {{1, -100.0f}};
  Sampler s(p);
  EXPECT_EQ(draw(s, {0.1f, 3.0f, 2.0f}), 2);  // the greedy token banned: the next one
  p.logit_bias = {{0, 2.95f}};
  Sampler t(p);
  EXPECT_EQ(draw(t, {0.1f, 3.0f, 2.0f}), 0);  // 0.1 + 2.95 > 3
  // Sampled: a banned token is never drawn.
  p = plain(1.0f, 9);
  p.logit_bias = {{0, -100.0f}};
  Sampler u(p);
  for (int i = 0; i < 2000; ++i) ASSERT_NE(draw(u, {5.0f, 0.0f, 0.0f}), 0);
  // Every token banned: nothing to sample.
  p = plain(0.0f, 1);
  p.logit_bias = {{0, -100.0f}, {1, -100.0f}};
  Sampler v(p);
  EXPECT_EQ(draw(v, {1.0f, 2.0f}), -1);
  p.temperature = 1.0f;
  Sampler w(p);
  EXPECT_EQ(draw(w, {1.0f, 2.0f}), -1);
}

TEST(Sampler, PenaltiesFollowTheirFormulas) {
  // Logits seen after the chain, read through greedy logprobs of every token.
  auto after = [](SamplerParams p, std::vector<float> logits, const std::vector<int32_t>& ctx, size_t n_prompt) {
    p.temperature = 0.0f;
    Sampler s(p);
    s.sample(logits, ctx, n_prompt, nullptr);
    return logits;
  };
  const std::vector<float> z = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  // llama.cpp's repeat penalty over the last repeat_last_n tokens (prompt included): positive
  // logits divided, negative multiplied, each distinct token once.
  SamplerParams p = plain(0.0f, 1);
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 3;
  auto r = after(p, z, {3, 0, 1, 1, 2}, 4);  // the last 3: 1, 1, 2
  EXPECT_EQ(r, (std::vector<float>{2.0f, -2.0f, 0.25f, 3.0f, -2.0f}));
  p.repeat_last_n = -1;  // all: 3, 0, 1, 2
  r = after(p, z, {3, 0, 1, 1, 2}, 4);
  EXPECT_EQ(r, (std::vector<float>{1.0f, -2.0f, 0.25f, 1.5f, -2.0f}));
  // OpenAI's: logit -= count * frequency + presence, over the reply's tokens only.
  p = plain(0.0f, 1);
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  r = after(p, z, {4, 4, 0, 0, 0, 2}, 2);  // reply: 0, 0, 0, 2 (the prompt's 4s do not count)
  EXPECT_EQ(r, (std::vector<float>{2.0f - 1.5f - 0.25f, -1.0f, 0.5f - 0.5f - 0.25f, 3.0f, -2.0f}));
  // Penalties change the greedy pick: 3 repeated often enough loses to 0.
  p = plain(0.0f, 1);
  p.frequency_penalty = 2.0f;
  Sampler s(p);
  EXPECT_EQ(draw(s, z, {9 % 5, 3}, 1), 0);  // 3 - 2 = 1 < 2
}

TEST(Sampler, GreedyLogprobsAreTheLogSoftmax) {
  const std::vector<float> z = {0.3f, 2.0f, -1.0f, 2.0f, 0.7f, 1.1f};
  SamplerParams p = plain(0.0f, 1);
  p.n_logprobs = 3;
  Sampler s(p);
  SampledLogprobs lp;
  EXPECT_EQ(draw(s, z, {}, 0, &lp), 1);
  const auto want = log_softmax(z, 1.0);
  EXPECT_NEAR(lp.logprob, want.at(1), 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].id, 1);  // ties: lower id first
  EXPECT_EQ(lp.top[1].id, 3);
  EXPECT_EQ(lp.top[2].id, 5);
  for (const TokenLogprob& t : lp.top) EXPECT_NEAR(t.logprob, want.at(t.id), 1e-6);
}

TEST(Sampler, SampledLogprobsDescribeTheDrawnDistribution) {
  const std::vector<float> z = {0.3f, 2.0f, -1.0f, 1.5f, 0.7f, 1.1f};
  // No filters: log-softmax of logits / temperature.
  SamplerParams p = plain(0.7f, 42);
  p.n_logprobs = 6;
  Sampler s(p);
  const auto want = log_softmax(z, 0.7);
  for (int i = 0; i < 50; ++i) {
    SampledLogprobs lp;
    const int32_t id = draw(s, z, {}, 0, &lp);
    EXPECT_NEAR(lp.logprob, want.at(id), 1e-6);
    ASSERT_EQ(lp.top.size(), 6u);
    for (const TokenLogprob& t : lp.top) EXPECT_NEAR(t.logprob, want.at(t.id), 1e-6);
  }
  // top-k 2: renormalized over the two kept tokens; nothing else is listed.
  p.top_k = 2;
  Sampler k(p);
  const auto kept = log_softmax(z, 0.7, {1, 3});
  SampledLogprobs lp;
  const int32_t id = draw(k, z, {}, 0, &lp);
  ASSERT_TRUE(id == 1 || id == 3);
  EXPECT_NEAR(lp.logprob, kept.at(id), 1e-6);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_NEAR(lp.top[0].logprob, kept.at(1), 1e-6);
  EXPECT_NEAR(lp.top[1].logprob, kept.at(3), 1e-6);
}

TEST(Sampler, PenaltiesKeepSeededRunsReproducible) {
  std::vector<float> z(40);
  for (size_t i = 0; i < z.size(); ++i) z[i] = std::cos(float(i) * 0.7f);
  auto run = [&](uint64_t seed) {
    SamplerParams p = plain(1.0f, seed);
    p.frequency_penalty = 0.8f;
    p.repeat_penalty = 1.3f;
    p.logit_bias = {{3, 1.5f}};
    Sampler s(p);
    std::vector<int32_t> ctx = {1, 2};
    for (int i = 0; i < 64; ++i) ctx.push_back(draw(s, z, ctx, 2));
    return ctx;
  };
  EXPECT_EQ(run(11), run(11));
  EXPECT_NE(run(11), run(12));
}

}  // namespace
}  // namespace onebit

namespace onebit {
namespace {

// Speculative sampling keeps the target's distribution: 20,000 draws with a proposed draft token
// (likely, unlikely, or cut by top-k) against the tempered softmax, by chi-square (4 degrees of
// freedom; 18.47 is the 0.999 quantile). Accepting every draft, or never, fails it.
TEST(Sampler, DraftedSamplingKeepsTheDistribution) {
  const std::vector<float> z = {1.0f, 2.0f, 0.5f, -0.5f, 1.5f};
  for (int32_t draft : {1, 3, 0}) {
    for (int32_t top_k : {0, 3}) {
      SamplerParams p = plain(0.9f, 1000 + uint64_t(draft) * 10 + uint64_t(top_k));
      p.top_k = top_k;
      Sampler s(p);
      std::vector<int32_t> keep;  // top-k by logit
      for (int32_t i = 0; i < 5; ++i) keep.push_back(i);
      std::sort(keep.begin(), keep.end(), [&](int32_t a, int32_t b) { return z[a] > z[b]; });
      if (top_k > 0) keep.resize(size_t(top_k));
      const auto want = log_softmax(z, 0.9, keep);
      const int n = 20000;
      std::map<int32_t, int> count;
      for (int i = 0; i < n; ++i) {
        std::vector<float> logits = z;
        ++count[s.sample(logits, {}, 0, nullptr, draft)];
      }
      double chi2 = 0.0;
      for (const auto& [id, lp] : want) {
        const double e = n * std::exp(lp);
        chi2 += (count[id] - e) * (count[id] - e) / e;
      }
      for (const auto& [id, c] : count) EXPECT_TRUE(want.count(id)) << "token " << id << " is outside top-k";
      EXPECT_LT(chi2, 18.47) << "draft " << draft << ", top_k " << top_k;
    }
  }
}

}  // namespace
}  // namespace onebit
