// The sampler: greedy is argmax, a seed fixes the draws, and the filters keep what llama.cpp's
// top-k / top-p / min-p keep. Draw frequencies are checked against the softmax computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "engine/sampler.h"

namespace onebit {
namespace {

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
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 3.0f, -2.0f, 3.0f}), 1);
  EXPECT_EQ(argmax(std::vector<float>{-1.0f}), 0);
}

TEST(Sampler, SameSeedSameTokensOtherSeedDiffers) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(float(i));
  auto run = [&](uint64_t seed) {
    Sampler s(plain(1.0f, seed));
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(logits));
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
    for (int i = 0; i < n; ++i) n0 += s.sample(logits) == 0;
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
    for (int i = 0; i < 4000; ++i) ++count[s.sample(logits)];
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
}

}  // namespace
}  // namespace onebit
