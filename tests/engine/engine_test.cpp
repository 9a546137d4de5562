// The serving engine on stories260K (reference backend, F32 K/V): greedy output equals a plain
// token-by-token loop over Model::forward, the prefix cache reuses the common prefix without
// changing the output, cancellation frees the sequence, the queue serves requests in order, bad
// requests are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "backend/backend.h"
#include "engine/drafter.h"
#include "engine/engine.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"
#include "engine_test_util.h"
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

// Block size 1: every prompt token but the last can come from the prefix cache.
EngineOptions options(int32_t n_ctx) {
  EngineOptions o;
  o.n_ctx = n_ctx;
  o.block_size = 1;
  o.cache_type = GgmlType::kF32;
  return o;
}

SamplerParams greedy() {
  SamplerParams p;
  p.temperature = 0.0f;
  return p;
}

using testing::run_to_end;

// Greedy tokens of a plain loop over the single-sequence forward (no engine): the prompt at once,
// then one token at a time. Call it before an engine starts on the model: the model's step buffers
// are the engine's while it runs.
std::vector<TokenId> reference(Model& model, const std::vector<TokenId>& prompt, int32_t n) {
  auto kv = model.new_kv_cache(static_cast<int32_t>(prompt.size()) + n);
  EXPECT_TRUE(kv.ok());
  std::vector<TokenId> out;
  std::vector<float> logits;
  std::vector<TokenId> feed = prompt;
  for (int32_t i = 0; i < n; ++i) {
    EXPECT_TRUE(model.forward(*kv, feed, false, logits).ok());
    out.push_back(static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    feed.assign(1, out.back());
  }
  model.free_kv_cache(*kv);
  return out;
}

TEST(Engine, GreedyEqualsGenerateAndPrefixCacheKeepsOutput) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  Loaded l = load();
  const std::vector<TokenId> prompt = {1, 403, 407, 261, 378};
  const auto expected = reference(*l.model, prompt, 24);
  std::vector<TokenId> longer = prompt;
  longer.insert(longer.end(), expected.begin(), expected.begin() + 6);
  const auto expected_longer = reference(*l.model, longer, 8);
  auto engine = Engine::start(*l.model, options(128));
  ASSERT_TRUE(engine.ok()) << engine.message();

  SequenceEvents last;
  EXPECT_EQ(run_to_end(**engine, {prompt, 24, greedy(), true}, &last), expected);
  EXPECT_EQ(last.reason, FinishReason::kLength);
  EXPECT_EQ(last.stats.n_cached_tokens, 0);
  EXPECT_EQ(last.stats.n_prompt_tokens, 5);
  EXPECT_EQ(last.stats.n_generated_tokens, 24);

  // Same prompt again: all but the last prompt token come from the cache; same tokens.
  EXPECT_EQ(run_to_end(**engine, {prompt, 24, greedy(), true}, &last), expected);
  EXPECT_EQ(last.stats.n_cached_tokens, 4);

  // The prompt extended by generated tokens reuses the whole previous prompt and more.
  EXPECT_EQ(run_to_end(**engine, {longer, 8, greedy(), true}, &last), expected_longer);
  EXPECT_EQ(last.stats.n_cached_tokens, 10);

  // cache_prompt false recomputes everything.
  EXPECT_EQ(run_to_end(**engine, {prompt, 24, greedy(), false}, &last), expected);
  EXPECT_EQ(last.stats.n_cached_tokens, 0);
  EXPECT_EQ((*engine)->state().n_running, 0u);
  EXPECT_EQ((*engine)->state().blocks_used, 0);
}

TEST(Engine, CancelFreesTheSlotAndQueueRunsInOrder) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  Loaded l = load();
  const auto expected = reference(*l.model, {1, 407}, 3);
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
  EXPECT_EQ(got, expected);
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
  auto got = run_to_end(**engine, {prompt, 10, greedy(), true}, &last);
  EXPECT_EQ(last.reason, FinishReason::kEnd);
  EXPECT_EQ(got.back(), end_token);
  EXPECT_LE(got.size(), 4u);

  EXPECT_FALSE((*engine)->submit({{}, 4, greedy(), true}).ok());
  EXPECT_FALSE((*engine)->submit({prompt, 0, greedy(), true}).ok());
  auto too_long = (*engine)->submit({prompt, 62, greedy(), true});
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.message().find("context of 64"), std::string::npos) << too_long.message();
  // A token outside the vocabulary is refused at the door; the engine goes on.
  auto bad = (*engine)->submit({{1, 1 << 30}, 2, greedy(), true});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("outside the vocabulary"), std::string::npos) << bad.message();
  EXPECT_EQ(run_to_end(**engine, {prompt, 3, greedy(), true}), std::vector<TokenId>(expected.begin(), expected.begin() + 3));
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
  auto got = run_to_end(**engine, req, &last);
  EXPECT_EQ(last.reason, FinishReason::kLength);
  ASSERT_EQ(got.size(), 10u);
  EXPECT_EQ(last.stats.n_generated_tokens, 10);
  EXPECT_EQ(std::count(got.begin(), got.end(), end_token), 0);
  // Up to the first place greedy chose the end token, the output is the plain greedy one.
  const auto first_end = std::find(expected.begin(), expected.end(), end_token) - expected.begin();
  EXPECT_EQ(std::vector<TokenId>(got.begin(), got.begin() + first_end),
            std::vector<TokenId>(expected.begin(), expected.begin() + first_end));
  // Without ignore_eos the same engine still stops at the end token.
  auto stopped = run_to_end(**engine, {prompt, 10, greedy(), true}, &last);
  EXPECT_EQ(last.reason, FinishReason::kEnd);
  EXPECT_EQ(stopped.size(), static_cast<size_t>(first_end + 1));
}

// Greedy rows handed back as argmax ids (EngineOptions::argmax_ids, the default) give the tokens
// the logits rows give: plain greedy, greedy ignoring an end token that greedy picks (its row read
// again and masked), greedy with a bias or with log probabilities (logits rows), drafted by
// n-grams (verification rows), and a seeded sample after them.
TEST(Engine, GreedyIdsGiveTheTokensOfLogitsRows) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  Loaded l = load();
  const std::vector<TokenId> prompt = {1, 403, 407};
  const TokenId end_token = reference(*l.model, prompt, 10)[3];
  std::vector<std::vector<TokenId>> runs[2];
  for (bool ids : {true, false}) {
    EngineOptions o = options(96);
    o.pool_slots = {2};
    o.is_end = [end_token](TokenId t) { return t == end_token; };
    o.argmax_ids = ids;
    o.drafter = std::make_shared<NgramDrafter>();
    o.draft_when_it_pays = false;
    auto engine = Engine::start(*l.model, o);
    ASSERT_TRUE(engine.ok()) << engine.message();
    std::vector<SequenceRequest> reqs;
    reqs.push_back({prompt, 24, greedy(), true});
    reqs.push_back({prompt, 24, greedy(), true});
    reqs.back().ignore_eos = true;
    SamplerParams biased = greedy();
    biased.logit_bias.push_back({end_token, -100.0f});
    reqs.push_back({prompt, 24, biased, true});
    SamplerParams lp = greedy();
    lp.n_logprobs = 2;
    reqs.push_back({{1, 403, 407, 403, 407, 403, 407}, 24, lp, true});
    SamplerParams hot;
    hot.temperature = 0.9f;
    hot.seed = 5;
    reqs.push_back({prompt, 24, hot, true});
    for (const SequenceRequest& r : reqs) runs[ids].push_back(run_to_end(**engine, r));
  }
  ASSERT_EQ(runs[1].size(), runs[0].size());
  for (size_t i = 0; i < runs[0].size(); ++i) EXPECT_EQ(runs[1][i], runs[0][i]) << "request " << i;
  EXPECT_EQ(std::count(runs[1][1].begin(), runs[1][1].end(), end_token), 0);
  EXPECT_EQ(runs[1][1].size(), 24u);
}

// Two slots: two sequences run in the same batches (prefill of one beside the decode of the
// other) and each gets exactly its own greedy tokens.
TEST(Engine, TwoSlotsBatchSequencesTogether) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  Loaded l = load();
  const std::vector<TokenId> a = {1, 403, 407, 261, 378}, b = {1, 407};
  const auto expected_a = reference(*l.model, a, 30), expected_b = reference(*l.model, b, 20);
  EngineOptions o = options(128);
  o.pool_slots = {2};
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

namespace onebit {
namespace {

// Chunked prefill (8 tokens a step) and six sequences of 5 to 120 prompt tokens over three slots,
// submitted at once: every one gets exactly its solo greedy tokens, and nothing stays held.
TEST(Engine, ChunkedPrefillInMixedStepsKeepsEachSequenceExact) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  Loaded l = load();
  std::vector<std::vector<TokenId>> prompts;
  for (int len : {5, 120, 17, 64, 33, 90}) {
    std::vector<TokenId> p = {1};
    for (int i = 1; i < len; ++i) p.push_back(static_cast<TokenId>(300 + (i * 37 + len) % 200));
    prompts.push_back(p);
  }
  std::vector<std::vector<TokenId>> expected;
  for (const auto& p : prompts) expected.push_back(reference(*l.model, p, 12));
  EngineOptions o = options(200);
  o.block_size = 4;
  o.pool_slots = {3};
  o.batch_tokens = 8;
  auto engine = Engine::start(*l.model, o);
  ASSERT_TRUE(engine.ok()) << engine.message();
  std::vector<std::shared_ptr<SequenceHandle>> handles;
  for (const auto& p : prompts) handles.push_back(*(*engine)->submit({p, 12, greedy(), true}));
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<TokenId> got;
    for (;;) {
      SequenceEvents ev = handles[i]->wait(1000);
      got.insert(got.end(), ev.tokens.begin(), ev.tokens.end());
      if (ev.finished) break;
    }
    EXPECT_EQ(got, expected[i]) << "prompt " << i << " of " << prompts[i].size() << " tokens";
  }
  const EngineState s = (*engine)->state();
  EXPECT_EQ(s.blocks_used, 0);
  EXPECT_GT(s.steps, 120 / 8);
}

}  // namespace
}  // namespace onebit
