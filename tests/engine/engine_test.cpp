// The serving engine on stories260K: greedy output equals generate()'s token for token, the
// prefix cache reuses the common prefix without changing the output, cancellation frees the slot,
// the queue serves requests in order, bad requests are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"
#include "testdata.h"

namespace onebit {
namespace {

constexpr const char* kModel = "models/stories260K.gguf";

struct Loaded {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
};

Loaded load() {
  Loaded l;
  auto file = GgufFile::open(testing::testdata_path(kModel));
  EXPECT_TRUE(file.ok());
  l.file = std::make_unique<GgufFile>(std::move(*file));
  l.backend = make_reference_backend();
  auto model = Model::load(*l.file, *l.backend);
  EXPECT_TRUE(model.ok()) << model.message();
  l.model = std::move(*model);
  return l;
}

EngineOptions options(int32_t n_ctx) {
  EngineOptions o;
  o.n_ctx = n_ctx;
  return o;
}

SamplerParams greedy() {
  SamplerParams p;
  p.temperature = 0.0f;
  return p;
}

// Runs one request to its end; returns its tokens, with the final events in `last`.
std::vector<TokenId> run(Engine& engine, SequenceRequest req, SequenceEvents* last = nullptr) {
  auto h = engine.submit(std::move(req));
  EXPECT_TRUE(h.ok()) << h.message();
  std::vector<TokenId> out;
  for (;;) {
    SequenceEvents ev = (*h)->wait(1000);
    out.insert(out.end(), ev.tokens.begin(), ev.tokens.end());
    if (ev.finished) {
      if (last) *last = ev;
      return out;
    }
  }
}

std::vector<TokenId> reference(Model& model, const std::vector<TokenId>& prompt, int32_t n) {
  GenerateOptions o;
  o.n_predict = n;
  o.sampler = greedy();
  std::vector<TokenId> out;
  auto st = generate(model, prompt, o, [&](TokenId t) {
    out.push_back(t);
    return true;
  });
  EXPECT_TRUE(st.ok());
  return out;
}

TEST(Engine, GreedyEqualsGenerateAndPrefixCacheKeepsOutput) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  Loaded l = load();
  const std::vector<TokenId> prompt = {1, 403, 407, 261, 378};
  const auto expected = reference(*l.model, prompt, 24);
  auto engine = Engine::start(*l.model, options(128));
  ASSERT_TRUE(engine.ok()) << engine.message();

  SequenceEvents last;
  EXPECT_EQ(run(**engine, {prompt, 24, greedy(), true}, &last), expected);
  EXPECT_EQ(last.reason, FinishReason::kLength);
  EXPECT_EQ(last.stats.n_cached_tokens, 0);
  EXPECT_EQ(last.stats.n_prompt_tokens, 5);
  EXPECT_EQ(last.stats.n_generated_tokens, 24);

  // Same prompt again: all but the last prompt token come from the cache; same tokens.
  EXPECT_EQ(run(**engine, {prompt, 24, greedy(), true}, &last), expected);
  EXPECT_EQ(last.stats.n_cached_tokens, 4);

  // The prompt extended by generated tokens reuses the whole previous prompt and more.
  std::vector<TokenId> longer = prompt;
  longer.insert(longer.end(), expected.begin(), expected.begin() + 6);
  const auto expected_longer = reference(*l.model, longer, 8);
  EXPECT_EQ(run(**engine, {longer, 8, greedy(), true}, &last), expected_longer);
  EXPECT_EQ(last.stats.n_cached_tokens, 10);

  // cache_prompt false recomputes everything.
  EXPECT_EQ(run(**engine, {prompt, 24, greedy(), false}, &last), expected);
  EXPECT_EQ(last.stats.n_cached_tokens, 0);
  EXPECT_EQ((*engine)->state().slot_task[0], -1);
}

TEST(Engine, CancelFreesTheSlotAndQueueRunsInOrder) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  Loaded l = load();
  auto engine = Engine::start(*l.model, options(256));
  ASSERT_TRUE(engine.ok());
  auto first = (*engine)->submit({{1, 403}, 200, greedy(), true});
  auto second = (*engine)->submit({{1, 407}, 3, greedy(), true});
  ASSERT_TRUE(first.ok() && second.ok());
  (*first)->cancel();
  SequenceEvents ev;
  do ev = (*first)->wait(1000); while (!ev.finished);
  EXPECT_EQ(ev.reason, FinishReason::kCancelled);
  EXPECT_LT(ev.stats.n_generated_tokens, 200);
  std::vector<TokenId> got;
  do {
    ev = (*second)->wait(1000);
    got.insert(got.end(), ev.tokens.begin(), ev.tokens.end());
  } while (!ev.finished);
  EXPECT_EQ(ev.reason, FinishReason::kLength);
  EXPECT_EQ(got, reference(*l.model, {1, 407}, 3));
}

TEST(Engine, EndTokenStopsAndBadRequestsAreRefused) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  Loaded l = load();
  const std::vector<TokenId> prompt = {1, 403, 407};
  const auto expected = reference(*l.model, prompt, 10);
  const TokenId end_token = expected[3];
  EngineOptions o = options(64);
  o.is_end = [end_token](TokenId t) { return t == end_token; };
  auto engine = Engine::start(*l.model, o);
  ASSERT_TRUE(engine.ok());
  SequenceEvents last;
  auto got = run(**engine, {prompt, 10, greedy(), true}, &last);
  EXPECT_EQ(last.reason, FinishReason::kEnd);
  EXPECT_EQ(got.back(), end_token);
  EXPECT_LE(got.size(), 4u);

  EXPECT_FALSE((*engine)->submit({{}, 4, greedy(), true}).ok());
  EXPECT_FALSE((*engine)->submit({prompt, 0, greedy(), true}).ok());
  auto too_long = (*engine)->submit({prompt, 62, greedy(), true});
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.message().find("context of 64"), std::string::npos) << too_long.message();
  // A token outside the vocabulary fails that request alone; the engine goes on.
  run(**engine, {{1, 1 << 30}, 2, greedy(), true}, &last);
  EXPECT_EQ(last.reason, FinishReason::kError);
  EXPECT_FALSE(last.error.empty());
  EXPECT_EQ(run(**engine, {prompt, 3, greedy(), true}), std::vector<TokenId>(expected.begin(), expected.begin() + 3));
}

// ignore_eos: the end token is never sampled, so the sequence runs to n_predict (kLength) and
// its tokens are the greedy ones with that token banned.
TEST(Engine, IgnoreEosRunsToTheLimitWithoutTheEndToken) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  Loaded l = load();
  const std::vector<TokenId> prompt = {1, 403, 407};
  const auto expected = reference(*l.model, prompt, 10);
  const TokenId end_token = expected[3];
  EngineOptions o = options(64);
  o.is_end = [end_token](TokenId t) { return t == end_token; };
  auto engine = Engine::start(*l.model, o);
  ASSERT_TRUE(engine.ok());
  SequenceRequest req{prompt, 10, greedy(), true};
  req.ignore_eos = true;
  SequenceEvents last;
  auto got = run(**engine, req, &last);
  EXPECT_EQ(last.reason, FinishReason::kLength);
  ASSERT_EQ(got.size(), 10u);
  EXPECT_EQ(last.stats.n_generated_tokens, 10);
  EXPECT_EQ(std::count(got.begin(), got.end(), end_token), 0);
  // Up to the first place greedy chose the end token, the output is the plain greedy one.
  const auto first_end = std::find(expected.begin(), expected.end(), end_token) - expected.begin();
  EXPECT_EQ(std::vector<TokenId>(got.begin(), got.begin() + first_end),
            std::vector<TokenId>(expected.begin(), expected.begin() + first_end));
  // Without ignore_eos the same engine still stops at the end token.
  auto stopped = run(**engine, {prompt, 10, greedy(), true}, &last);
  EXPECT_EQ(last.reason, FinishReason::kEnd);
  EXPECT_EQ(stopped.size(), static_cast<size_t>(first_end + 1));
}

TEST(Engine, CommonPrefixLength) {
  EXPECT_EQ(common_prefix_length({}, {1}), 0u);
  EXPECT_EQ(common_prefix_length({1, 2, 3}, {1, 2, 4}), 2u);
  EXPECT_EQ(common_prefix_length({1, 2}, {1, 2, 3}), 2u);
}

}  // namespace
}  // namespace onebit

namespace onebit {
namespace {

// Two slots: two sequences run in the same batches (prefill of one beside the decode of the
// other) and each gets exactly its own greedy tokens.
TEST(Engine, TwoSlotsBatchSequencesTogether) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  Loaded l = load();
  const std::vector<TokenId> a = {1, 403, 407, 261, 378}, b = {1, 407};
  const auto expected_a = reference(*l.model, a, 30), expected_b = reference(*l.model, b, 20);
  EngineOptions o = options(128);
  o.n_slots = 2;
  auto engine = Engine::start(*l.model, o);
  ASSERT_TRUE(engine.ok());
  auto ha = (*engine)->submit({a, 30, greedy(), true});
  auto hb = (*engine)->submit({b, 20, greedy(), true});
  ASSERT_TRUE(ha.ok() && hb.ok());
  auto collect = [](SequenceHandle& h) {
    std::vector<TokenId> out;
    for (;;) {
      SequenceEvents ev = h.wait(1000);
      out.insert(out.end(), ev.tokens.begin(), ev.tokens.end());
      if (ev.finished) return out;
    }
  };
  EXPECT_EQ(collect(**ha), expected_a);
  EXPECT_EQ(collect(**hb), expected_b);
}

}  // namespace
}  // namespace onebit
