// An embedding engine (EngineOptions::pooling) over the FakeRunner's hidden rows: prompts chunked
// over many steps and mixed with others in tight K/V pools still get exactly the pooled,
// L2-normalised rows of their prompt alone (last token, mean, first token); last pooling uses the
// prefix cache, mean and cls never do; the context check counts the prompt only.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "fake_runner.h"

namespace onebit {
namespace {

using testing::fake_hidden;
using testing::FakeRunner;

constexpr int32_t kVocab = 300;
constexpr int32_t kWidth = 12;

// The fake runner, slowed down: a burst of submissions arrives while the first steps run, so the
// sequences run beside each other.
class SlowRunner final : public ModelRunner {
 public:
  explicit SlowRunner(std::unique_ptr<FakeRunner> inner) : inner_(std::move(inner)) {}
  int32_t vocab_size() const override { return inner_->vocab_size(); }
  void copy_blocks(std::span<const BlockCopy> copies) override { inner_->copy_blocks(copies); }
  Status run(const StepBatch& batch, StepOutput& out) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return inner_->run(batch, out);
  }

 private:
  std::unique_ptr<FakeRunner> inner_;
};

std::unique_ptr<Engine> start_embedding(EngineOptions o) {
  auto layout = plan_engine_layout(o);
  EXPECT_TRUE(layout.ok()) << layout.message();
  auto runner = std::make_unique<FakeRunner>(layout->n_blocks, layout->block_size, kVocab);
  runner->hidden_width = kWidth;
  auto e = Engine::start(std::make_unique<SlowRunner>(std::move(runner)), o);
  EXPECT_TRUE(e.ok()) << e.message();
  return std::move(*e);
}

// What the engine must give for `prompt` alone.
std::vector<float> expected(const std::vector<TokenId>& prompt, Pooling p) {
  std::vector<double> sum(kWidth, 0.0);
  const size_t first = p == Pooling::kLast ? prompt.size() - 1 : 0;
  const size_t last = p == Pooling::kCls ? 1 : prompt.size();
  for (size_t n = first + 1; n <= last; ++n) {
    const std::vector<float> row = fake_hidden(std::span<const TokenId>(prompt.data(), n), kWidth);
    for (int32_t k = 0; k < kWidth; ++k) sum[k] += row[k];
  }
  double sq = 0.0;
  for (double x : sum) sq += x * x;
  std::vector<float> out(kWidth);
  for (int32_t k = 0; k < kWidth; ++k) out[k] = static_cast<float>(sum[k] / std::sqrt(sq));
  return out;
}

SequenceEvents run_to_end(SequenceHandle& h) {
  for (int i = 0; i < 2000; ++i) {
    SequenceEvents ev = h.wait(50);
    if (ev.finished) return ev;
  }
  ADD_FAILURE() << "the sequence did not finish";
  return {};
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
  return worst;
}

class EngineEmbedding : public ::testing::TestWithParam<Pooling> {};

TEST_P(EngineEmbedding, ChunkedAndMixedPromptsGetTheirSoloVectors) {
  const Pooling pooling = GetParam();
  // Several budgets, slot counts and tight pools. (Prompts alone hardly ever preempt: admission
  // keeps a block for each running sequence; Scheduler.EveryRowSequencesTakeNoCachedPrefix...
  // covers the re-admission of a preempted mean/cls sequence.)
  for (const int32_t slots : {2, 4}) {
    for (const int32_t budget : {8, 12, 20}) {
      for (const int64_t extra : {0, 8}) {
        EngineOptions o;
        o.n_ctx = 40;
        o.pool_slots = {slots};
        o.batch_tokens = budget;  // long prompts run in several chunks, several sequences per step
        o.block_size = 4;
        o.kv_tokens = o.n_ctx + extra;
        o.pooling = pooling;
        auto engine = start_embedding(o);
        std::mt19937 rng(static_cast<uint32_t>(7 + slots * 100 + budget + extra));
        std::vector<std::vector<TokenId>> prompts;
        std::vector<std::shared_ptr<SequenceHandle>> handles;
        for (int i = 0; i < 16; ++i) {
          std::vector<TokenId> p(1 + rng() % o.n_ctx);
          for (TokenId& t : p) t = static_cast<TokenId>(rng() % kVocab);
          SequenceRequest req;
          req.prompt = p;
          auto h = engine->submit(req);
          ASSERT_TRUE(h.ok()) << h.message();
          prompts.push_back(std::move(p));
          handles.push_back(*h);
        }
        for (size_t i = 0; i < handles.size(); ++i) {
          const SequenceEvents ev = run_to_end(*handles[i]);
          ASSERT_EQ(ev.reason, FinishReason::kEnd) << i << ": " << ev.error;
          EXPECT_TRUE(ev.tokens.empty());
          EXPECT_EQ(ev.stats.n_prompt_tokens, static_cast<int32_t>(prompts[i].size()));
          EXPECT_EQ(ev.stats.n_generated_tokens, 0);
          EXPECT_LT(max_abs_diff(ev.embedding, expected(prompts[i], pooling)), 1e-6)
              << "prompt " << i << " of " << prompts[i].size() << " tokens; slots " << slots << ", budget " << budget;
        }
        EXPECT_EQ(engine->state().blocks_used, 0);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Pooling, EngineEmbedding, ::testing::Values(Pooling::kLast, Pooling::kMean, Pooling::kCls),
                         [](const ::testing::TestParamInfo<Pooling>& p) { return std::string(pooling_name(p.param)); });

TEST(EngineEmbeddingCache, LastPoolingTakesTheCachedPrefixMeanAndClsDoNot) {
  for (Pooling pooling : {Pooling::kLast, Pooling::kMean, Pooling::kCls}) {
    EngineOptions o;
    o.n_ctx = 64;
    o.block_size = 4;
    o.pooling = pooling;
    auto engine = start_embedding(o);
    std::vector<TokenId> prompt(30);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<TokenId>(3 * i + 1);
    std::vector<float> first;
    for (int rep = 0; rep < 2; ++rep) {
      SequenceRequest req;
      req.prompt = prompt;
      auto h = engine->submit(req);
      ASSERT_TRUE(h.ok()) << h.message();
      const SequenceEvents ev = run_to_end(**h);
      ASSERT_EQ(ev.reason, FinishReason::kEnd) << ev.error;
      EXPECT_LT(max_abs_diff(ev.embedding, expected(prompt, pooling)), 1e-6) << pooling_name(pooling);
      EXPECT_EQ(ev.stats.n_cached_tokens, rep == 1 && pooling == Pooling::kLast ? 28 : 0) << pooling_name(pooling);
    }
  }
}

TEST(EngineEmbeddingLimits, ThePromptAloneMustFitTheContextAndRankIsRefused) {
  EngineOptions o;
  o.n_ctx = 32;
  o.pooling = Pooling::kMean;
  auto engine = start_embedding(o);
  SequenceRequest req;
  req.prompt.assign(32, 5);  // the whole context: no room is kept for new tokens
  auto h = engine->submit(req);
  ASSERT_TRUE(h.ok()) << h.message();
  const SequenceEvents ev = run_to_end(**h);
  EXPECT_EQ(ev.reason, FinishReason::kEnd) << ev.error;
  EXPECT_EQ(ev.embedding.size(), size_t(kWidth));
  req.prompt.assign(33, 5);
  auto over = engine->submit(req);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.message().find("exceed the context of 32"), std::string::npos) << over.message();

  o.pooling = Pooling::kRank;
  auto layout = plan_engine_layout(o);
  ASSERT_FALSE(layout.ok());
  EXPECT_NE(layout.message().find("--pooling"), std::string::npos) << layout.message();
}

}  // namespace
}  // namespace onebit
