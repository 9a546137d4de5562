// The Engine (its worker thread, queue, handles, cancellation, state) over the FakeRunner: many
// client threads at once, cancellations mid-stream, a tight K/V pool. Every sequence that runs to
// its end gets exactly its solo tokens; at the end no block is held and the queue is empty.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <regex>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "fake_runner.h"
#include "grammar/matcher.h"

namespace onebit {
namespace {

using testing::fake_continuation;
using testing::FakeRunner;

constexpr int32_t kVocab = 500;

std::unique_ptr<Engine> start_fake(EngineOptions o) {
  auto layout = plan_engine_layout(o);
  EXPECT_TRUE(layout.ok()) << layout.message();
  auto e = Engine::start(std::make_unique<FakeRunner>(layout->n_blocks, layout->block_size, kVocab), o);
  EXPECT_TRUE(e.ok()) << e.message();
  return std::move(*e);
}

TEST(EngineFake, ManyClientsWithCancellationsGetTheirSoloTokens) {
  EngineOptions o;
  o.n_ctx = 128;
  o.pool_slots = {6};
  o.batch_tokens = 24;
  o.block_size = 4;
  o.kv_tokens = 300;  // less than 6 x 128: preemption happens
  o.max_queue = 1000;
  o.is_end = [](TokenId t) { return t == 7; };
  auto engine = start_fake(o);
  std::atomic<int> exact{0}, cancelled{0}, failures{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(100 + c);
      const std::vector<TokenId> shared = {1, 2, 3, 4, 5, 6, 8, 9, 10};
      for (int r = 0; r < 25; ++r) {
        std::vector<TokenId> prompt = shared;
        prompt.resize(1 + rng() % shared.size());
        for (int i = rng() % 40; i > 0; --i) prompt.push_back(static_cast<TokenId>(10 + rng() % 400));
        const int32_t n = 1 + static_cast<int32_t>(rng() % 60);
        const bool cancel = rng() % 5 == 0;
        SequenceRequest req;
        req.prompt = prompt;
        req.n_predict = n;
        req.sampler.temperature = 0.0f;
        auto h = engine->submit(req);
        if (!h.ok()) {
          ++failures;
          continue;
        }
        std::vector<TokenId> got;
        for (;;) {
          SequenceEvents ev = (*h)->wait(1000);
          got.insert(got.end(), ev.tokens.begin(), ev.tokens.end());
          if (cancel && got.size() >= 2) (*h)->cancel();
          if (!ev.finished) continue;
          std::vector<TokenId> want = fake_continuation(prompt, n, kVocab);
          if (auto end = std::find(want.begin(), want.end(), 7); end != want.end()) want.erase(end + 1, want.end());
          if (ev.reason == FinishReason::kCancelled) {
            ++cancelled;
            if (!std::equal(got.begin(), got.end(), want.begin())) ++failures;
          } else if (got == want) {
            ++exact;
          } else {
            ++failures;
          }
          break;
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(exact.load(), 100);
  const EngineState s = engine->state();
  EXPECT_EQ(s.n_running, 0u);
  EXPECT_EQ(s.n_queued, 0u);
  EXPECT_EQ(s.blocks_used, 0);
  EXPECT_GT(s.prefix_hit_tokens, 0);
  std::printf("exact %d, cancelled %d, preemptions %lld, prefix hits %lld tokens, %lld steps\n", exact.load(),
              cancelled.load(), (long long)s.preemptions, (long long)s.prefix_hit_tokens, (long long)s.steps);
}

TEST(EngineFake, QueueLimitAndBadRequestsAreRefusedClearly) {
  EngineOptions o;
  o.n_ctx = 64;
  o.max_queue = 2;
  auto engine = start_fake(o);
  SequenceRequest big;
  big.prompt = {1, 2};
  big.n_predict = 60;
  // Four at once (one call, so the worker cannot drain the queue between them: one slot and a
  // queue of 2 hold three) are refused together.
  auto all = engine->submit_all(std::vector<SequenceRequest>(4, big));
  ASSERT_FALSE(all.ok());
  EXPECT_NE(all.message().find("queue is full"), std::string::npos) << all.message();
  SequenceRequest bad = big;
  bad.prompt = {kVocab};
  EXPECT_NE(engine->submit(bad).message().find("outside the vocabulary"), std::string::npos);
  bad.prompt = {1};
  bad.n_predict = 64;
  EXPECT_NE(engine->submit(bad).message().find("exceed the context"), std::string::npos);
  bad.n_predict = 1;
  bad.pool = 1;
  EXPECT_NE(engine->submit(bad).message().find("pool"), std::string::npos);
}

TEST(EngineFake, LayoutErrorsNameTheOption) {
  EngineOptions o;
  o.n_ctx = 4096;
  o.kv_tokens = 1000;
  EXPECT_NE(plan_engine_layout(o).message().find("--kv-memory"), std::string::npos);
  o.kv_tokens = 0;
  o.pool_slots = {8};
  o.batch_tokens = 4;
  EXPECT_NE(plan_engine_layout(o).message().find("--batch-tokens"), std::string::npos);
}

}  // namespace
}  // namespace onebit

namespace onebit {
namespace {

// submit_all: n choices of one prompt. The followers wait for the leader's prompt, then take its
// full blocks from the prefix cache; every choice gets its solo tokens; the signal wakes the owner;
// a cancelled leader releases its followers; the queue limit counts the whole group.
TEST(EngineFake, GroupFollowersTakeTheLeadersPrompt) {
  EngineOptions o;
  o.n_ctx = 128;
  o.pool_slots = {4};
  o.block_size = 4;
  o.max_queue = 2;
  auto engine = start_fake(o);
  std::vector<TokenId> prompt;
  for (int i = 0; i < 22; ++i) prompt.push_back(TokenId(20 + i));
  std::vector<SequenceRequest> reqs(3);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].prompt = prompt;
    reqs[i].n_predict = 5;
    reqs[i].sampler.temperature = 0.0f;
    if (i > 0) reqs[i].after = 0;
  }
  auto handles = engine->submit_all(reqs);
  ASSERT_TRUE(handles.ok()) << handles.message();
  ASSERT_EQ(handles->size(), 3u);
  const auto& signal = (*handles)[0]->signal();
  ASSERT_NE(signal, nullptr);
  for (const auto& h : *handles) EXPECT_EQ(h->signal(), signal);
  const std::vector<TokenId> want = fake_continuation(prompt, 5, kVocab);
  for (const auto& h : *handles) {
    std::vector<TokenId> got;
    SequenceEvents ev;
    for (int i = 0; i < 100 && !ev.finished; ++i) {
      ev = h->wait(1000);
      got.insert(got.end(), ev.tokens.begin(), ev.tokens.end());
    }
    ASSERT_TRUE(ev.finished);
    EXPECT_EQ(got, want);
    EXPECT_EQ(ev.reason, FinishReason::kLength);
    // The leader computed 22 tokens; each follower found its 5 full blocks (20 tokens).
    EXPECT_EQ(ev.stats.n_cached_tokens, h == (*handles)[0] ? 0 : 20);
  }
  // A follower may only wait for an earlier request.
  std::vector<SequenceRequest> bad(2, reqs[0]);
  bad[0].after = 1;
  EXPECT_NE(engine->submit_all(bad).message().find("earlier"), std::string::npos);
  // The queue limit (2 beyond the 4 free slots) counts the group: 7 sequences are refused whole.
  std::vector<SequenceRequest> many(7, reqs[0]);
  for (auto& r : many) r.after = -1;
  EXPECT_NE(engine->submit_all(many).message().find("queue is full"), std::string::npos);
  // A cancelled leader lets its followers go on.
  auto again = engine->submit_all(reqs);
  ASSERT_TRUE(again.ok());
  (*again)[0]->cancel();
  for (size_t i = 1; i < 3; ++i) {
    SequenceEvents ev;
    for (int k = 0; k < 100 && !ev.finished; ++k) ev = (*again)[i]->wait(1000);
    EXPECT_TRUE(ev.finished);
    EXPECT_EQ(ev.reason, FinishReason::kLength);
  }
}

}  // namespace
}  // namespace onebit

namespace onebit {
namespace {

// Proposes the fake model's own continuation (full acceptance), or that continuation with every
// third token wrong (partial acceptance).
class FakeDrafter final : public Drafter {
 public:
  explicit FakeDrafter(bool noisy) : noisy_(noisy) {}
  void propose(std::span<const DraftAsk> asks) override {
    for (const DraftAsk& a : asks) {
      std::vector<TokenId> c(a.seq.tokens.begin(), a.seq.tokens.end());
      std::vector<TokenId>& out = *a.out;
      for (TokenId t : fake_continuation(c, a.max, kVocab)) {
        out.push_back(noisy_ && (c.size() + out.size()) % 3 == 0 ? (t + 1) % kVocab : t);
      }
    }
  }

 private:
  bool noisy_;
};

struct DraftRun {
  int exact = 0, failures = 0;
  int64_t drafted = 0, accepted = 0, generated = 0;
};

// Many clients at once through a drafting engine (a tight pool, so some are preempted): every
// sequence must get exactly its solo tokens.
DraftRun run_drafting(std::shared_ptr<Drafter> drafter, int32_t draft_max, int32_t slots, int64_t kv_tokens) {
  EngineOptions o;
  o.n_ctx = 128;
  o.pool_slots = {slots};
  o.batch_tokens = 32;
  o.block_size = 4;
  o.kv_tokens = kv_tokens;
  o.max_queue = 1000;
  o.drafter = std::move(drafter);
  o.draft_max = draft_max;
  o.draft_when_it_pays = false;  // the fake runner's steps cost nothing: draft every time
  auto engine = start_fake(o);
  DraftRun out;
  std::mutex mu;
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(7 + c);
      for (int r = 0; r < 12; ++r) {
        std::vector<TokenId> prompt;
        for (int i = 1 + rng() % 30; i > 0; --i) prompt.push_back(static_cast<TokenId>(10 + rng() % 20));
        const int32_t n = 1 + static_cast<int32_t>(rng() % 50);
        SequenceRequest req;
        req.prompt = prompt;
        req.n_predict = n;
        req.sampler.temperature = 0.0f;
        SequenceEvents ev;
        const std::vector<TokenId> got = testing::run_to_end(*engine, req, &ev);
        std::lock_guard<std::mutex> lock(mu);
        if (ev.finished && ev.reason == FinishReason::kLength && got == fake_continuation(prompt, n, kVocab)) ++out.exact;
        else ++out.failures;
        out.drafted += ev.stats.n_draft_tokens;
        out.accepted += ev.stats.n_draft_accepted;
        out.generated += ev.stats.n_generated_tokens;
      }
    });
  }
  for (auto& t : clients) t.join();
  return out;
}

TEST(EngineFake, DraftingKeepsTheOutputExactly) {
  // The model as its own drafter: every draft is accepted (the bookkeeping is right).
  DraftRun own = run_drafting(std::make_shared<FakeDrafter>(false), 4, 3, 0);
  EXPECT_EQ(own.failures, 0);
  EXPECT_EQ(own.exact, 48);
  EXPECT_GT(own.drafted, own.generated * 2 / 3);
  EXPECT_EQ(own.accepted, own.drafted);
  // Wrong tokens in the drafts, and a pool too small for everyone (preemption drops drafts).
  DraftRun noisy = run_drafting(std::make_shared<FakeDrafter>(true), 5, 4, 160);
  EXPECT_EQ(noisy.failures, 0);
  EXPECT_GT(noisy.accepted, 0);
  EXPECT_LT(noisy.accepted, noisy.drafted);
  // Prompt lookup on the fake model's text.
  DraftRun ngram = run_drafting(std::make_shared<NgramDrafter>(), 3, 4, 0);
  EXPECT_EQ(ngram.failures, 0);
  std::printf("drafting: own %lld/%lld accepted, noisy %lld/%lld, ngram %lld/%lld\n", (long long)own.accepted,
              (long long)own.drafted, (long long)noisy.accepted, (long long)noisy.drafted, (long long)ngram.accepted,
              (long long)ngram.drafted);
}

// A noisy drafter that checks what the engine shows it: an observed position is never taken back
// (rejected draft tokens are not observed), observations end by n_computed with the next token
// known, and a sequence is asked for drafts only at its observed frontier.
class CheckingDrafter final : public Drafter {
 public:
  void observe(std::span<const DraftObservation> runs) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const DraftObservation& r : runs) {
      ++observations_;
      if (r.first + r.n > r.seq.n_computed || int64_t(r.seq.tokens.size()) <= r.first + r.n || !r.rows.empty()) ++bad_;
      std::vector<TokenId>& seen = seen_[r.seq.id];
      for (int32_t p = r.first; p < r.first + r.n; ++p) {
        if (size_t(p) < seen.size() && seen[size_t(p)] != r.seq.tokens[size_t(p)]) ++bad_;  // taken back
        if (size_t(p) >= seen.size()) seen.resize(size_t(p) + 1, -1);
        seen[size_t(p)] = r.seq.tokens[size_t(p)];
      }
      frontier_[r.seq.id] = r.first + r.n;
    }
  }
  void propose(std::span<const DraftAsk> asks) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const DraftAsk& a : asks) {
      if (a.seq.n_computed + 1 != int32_t(a.seq.tokens.size()) || frontier_[a.seq.id] != a.seq.n_computed) ++bad_;
      std::vector<TokenId> c(a.seq.tokens.begin(), a.seq.tokens.end());
      for (TokenId t : fake_continuation(c, a.max, kVocab)) {
        a.out->push_back((c.size() + a.out->size()) % 3 == 0 ? (t + 1) % kVocab : t);
      }
    }
  }
  void forget(int64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    seen_.erase(id);
    frontier_.erase(id);
  }
  int64_t bad() const { return bad_; }
  int64_t observations() const { return observations_; }

 private:
  std::mutex mu_;
  std::map<int64_t, std::vector<TokenId>> seen_;
  std::map<int64_t, int32_t> frontier_;
  int64_t bad_ = 0, observations_ = 0;
};

TEST(EngineFake, DrafterSeesOnlyVerifiedPositions) {
  auto d = std::make_shared<CheckingDrafter>();
  DraftRun r = run_drafting(d, 4, 4, 160);  // a tight pool: preemptions recompute positions
  EXPECT_EQ(r.failures, 0);
  EXPECT_LT(r.accepted, r.drafted);
  EXPECT_GT(d->observations(), 100);
  EXPECT_EQ(d->bad(), 0);
}

TEST(Drafter, NgramProposesWhatFollowedTheLatestMatch) {
  NgramDrafter d(2, 3);
  std::vector<TokenId> out;
  // ... 1 2 3 [4 5 6] ... 9 1 2 3 [7 8] ... 1 2 3 -> the latest match of "1 2 3" is followed by 7 8.
  d.propose_one(std::vector<TokenId>{1, 2, 3, 4, 5, 6, 9, 1, 2, 3, 7, 8, 1, 2, 3}, 4, out);
  EXPECT_EQ(out, (std::vector<TokenId>{7, 8, 1, 2}));
  out.clear();
  d.propose_one(std::vector<TokenId>{5, 6, 9, 9, 5, 6}, 2, out);  // a 2-gram when no 3-gram matches
  EXPECT_EQ(out, (std::vector<TokenId>{9, 9}));
  out.clear();
  d.propose_one(std::vector<TokenId>{1, 2, 3, 4}, 3, out);  // nothing repeats
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace onebit

namespace onebit {
namespace {

// The cost model of drafting: a line through timed steps, and the draft length that pays.
TEST(DraftCost, FitsTheStepLineAndDraftsOnlyWhatPays) {
  StepCostFit fit;
  double t0 = 0, c = 0;
  EXPECT_FALSE(fit.fit(t0, c));
  for (int i = 0; i < 10; ++i) fit.add(1, 11.0);
  EXPECT_FALSE(fit.fit(t0, c)) << "one step size tells nothing of the slope";
  for (int i = 0; i < 10; ++i) {
    fit.add(2, 12.0);
    fit.add(4, 14.0);
  }
  ASSERT_TRUE(fit.fit(t0, c));
  EXPECT_NEAR(t0, 10.0, 1e-9);
  EXPECT_NEAR(c, 1.0, 1e-9);
  // One sequence, a step mostly fixed cost (share 1/11): drafting pays while acceptance^k > 1/11.
  EXPECT_EQ(worthwhile_draft(0.5, 8, 10.0, 1.0, 1), 3);
  EXPECT_EQ(worthwhile_draft(0.5, 2, 10.0, 1.0, 1), 2);
  EXPECT_EQ(worthwhile_draft(0.05, 8, 10.0, 1.0, 1), 0);
  // 64 sequences: their tokens are 86% of the step; only a near-certain drafter pays.
  EXPECT_EQ(worthwhile_draft(0.5, 8, 10.0, 1.0, 64), 0);
  EXPECT_EQ(worthwhile_draft(0.9, 8, 10.0, 1.0, 64), 1);
  // Compute-bound (no fixed cost): never.
  EXPECT_EQ(worthwhile_draft(0.99, 8, 0.0, 1.0, 1), 0);
  // The drafter's own work: proposing a token costs as much as verifying one, so a token must be
  // kept twice as often to pay; observing each kept token costs half a plain step, so the whole
  // draft must gain more than that.
  EXPECT_EQ(worthwhile_draft(0.5, 8, 10.0, 1.0, 1, {0.0, 1.0}), 2);
  EXPECT_EQ(worthwhile_draft(0.5, 8, 10.0, 1.0, 1, {5.0, 0.0}), 0);
  EXPECT_EQ(worthwhile_draft(0.9, 8, 10.0, 1.0, 1, {5.0, 0.0}), 8);
}

}  // namespace
}  // namespace onebit

namespace onebit {
namespace {

// A grammar on the fake model: token i is the letter 'a' + i % 26 (token 7, the end token, too).
// Every reply matches the grammar's regular equivalent, ends (kEnd) where the grammar is complete,
// and is the same with a noisy drafter as without (a draft that leaves the grammar is rejected).
std::vector<TokenId> constrained_reply(std::shared_ptr<grammar::CompiledGrammar> compiled, std::shared_ptr<Drafter> drafter,
                                       const std::vector<TokenId>& prompt, FinishReason& reason) {
  EngineOptions o;
  o.n_ctx = 128;
  o.pool_slots = {2};
  o.batch_tokens = 32;
  o.block_size = 4;
  o.drafter = std::move(drafter);
  o.draft_max = 3;
  o.draft_when_it_pays = false;
  o.is_end = [](TokenId t) { return t == 7; };
  auto engine = start_fake(o);
  SequenceRequest req;
  req.prompt = prompt;
  req.n_predict = 40;
  req.sampler.temperature = 0.0f;
  req.constraint = std::make_shared<grammar::GrammarConstraint>(compiled);
  SequenceEvents ev;
  std::vector<TokenId> got = testing::run_to_end(*engine, req, &ev);
  reason = ev.reason;
  return got;
}

TEST(EngineFake, GrammarConstrainsTokensWithAndWithoutDrafts) {
  std::vector<std::string> pieces;
  std::vector<uint8_t> flags;
  for (int i = 0; i < kVocab; ++i) {
    pieces.emplace_back(1, char('a' + i % 26));
    flags.push_back(i == 7 ? grammar::TokenTable::kEnd : grammar::TokenTable::kText);
  }
  auto table = std::make_shared<const grammar::TokenTable>(pieces, flags);
  auto g = grammar::parse_gbnf(R"(root ::= [a-f] [g-z]{2,5} ("x" | "yz"))");
  ASSERT_TRUE(g.ok()) << g.message();
  auto compiled = std::make_shared<grammar::CompiledGrammar>(std::move(*g), table);
  const std::regex re("[a-f][g-z]{2,5}(x|yz)");
  std::mt19937 rng(5);
  for (int r = 0; r < 12; ++r) {
    std::vector<TokenId> prompt;
    for (int i = 1 + rng() % 10; i > 0; --i) prompt.push_back(static_cast<TokenId>(10 + rng() % 400));
    FinishReason plain_reason, drafted_reason;
    const auto plain = constrained_reply(compiled, nullptr, prompt, plain_reason);
    const auto drafted = constrained_reply(compiled, std::make_shared<FakeDrafter>(true), prompt, drafted_reason);
    std::string text;
    for (TokenId t : plain) text += pieces[size_t(t)];
    EXPECT_TRUE(std::regex_match(text, re)) << text;
    EXPECT_EQ(plain_reason, FinishReason::kEnd);
    EXPECT_EQ(plain, drafted);
    EXPECT_EQ(drafted_reason, FinishReason::kEnd);
  }
}

}  // namespace
}  // namespace onebit
