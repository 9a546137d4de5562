// The draft governor (engine/draft_governor.h): drafting stays on where drafted turns give tokens
// faster than plain ones and goes off, for ever longer, where they do not; then the engine with
// it: a drafter that only costs is stopped (and a long sequence retired from drafting), one that
// pays keeps drafting.
#include <gtest/gtest.h>

#include <mutex>

#include "engine/draft_governor.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "fake_runner.h"

namespace onebit {
namespace {

using testing::fake_continuation;
using testing::FakeRunner;
using G = DraftGovernor;

// Plain turns of n sequences (1 ms per token) until the governor allows drafting; how many it took
// (capped at `cap`).
int plain_until_allowed(G& g, int32_t n, int cap = 100000) {
  int turns = 0;
  while (!g.allows(n) && turns < cap) {
    g.record(n, false, 1.0 * n, n);
    ++turns;
  }
  return turns;
}

// Drafted turns of n sequences giving `tokens_per_turn` tokens each for `ms` each, while allowed
// (at most `cap`); how many ran.
int drafted_while_allowed(G& g, int32_t n, double ms, int32_t tokens, int cap) {
  int turns = 0;
  while (g.allows(n) && turns < cap) {
    g.record(n, true, ms, tokens);
    ++turns;
  }
  return turns;
}

TEST(DraftGovernor, MeasuresTheBaselineFirst) {
  G g;
  EXPECT_FALSE(g.allows(1));
  EXPECT_EQ(plain_until_allowed(g, 1), G::kFirstWait);
  EXPECT_TRUE(g.allows(1));
  // Drafted turns do not count as the baseline's.
  G h;
  h.record(1, true, 1.0, 3);
  EXPECT_EQ(plain_until_allowed(h, 1), G::kFirstWait);
}

TEST(DraftGovernor, DraftingThatLosesGoesOffForEverLonger) {
  G g;
  plain_until_allowed(g, 1);
  // 2 tokens for 2.2 ms (1.1 ms a token, against 1.0): not clearly slower, so a whole trial.
  EXPECT_EQ(drafted_while_allowed(g, 1, 2.2, 2, 1000), G::kTrialTurns);
  EXPECT_EQ(plain_until_allowed(g, 1), G::kRetryWait);
  // Clearly slower (2 ms a token): found after kQuickTurns.
  EXPECT_EQ(drafted_while_allowed(g, 1, 4.0, 2, 1000), G::kQuickTurns);
  EXPECT_EQ(plain_until_allowed(g, 1), 2 * G::kRetryWait);
  EXPECT_EQ(g.verdicts_failed(), 2);
  EXPECT_EQ(g.verdicts_paid(), 0);
  int wait = 2 * G::kRetryWait;
  for (int i = 0; i < 12; ++i) {
    drafted_while_allowed(g, 1, 4.0, 2, 1000);
    wait = std::min(2 * wait, G::kMaxWait);
    EXPECT_EQ(plain_until_allowed(g, 1), wait);
  }
  EXPECT_EQ(wait, G::kMaxWait);
  // A trial that pays now and then halves the wait, and the next failure doubles it back: a
  // drafter that pays only on some stretches keeps long waits.
  EXPECT_EQ(drafted_while_allowed(g, 1, 2.0, 3, G::kTrialTurns), G::kTrialTurns);
  EXPECT_TRUE(g.allows(1));
  EXPECT_EQ(drafted_while_allowed(g, 1, 4.0, 2, 1000), G::kQuickTurns);
  EXPECT_EQ(plain_until_allowed(g, 1), G::kMaxWait);
}

TEST(DraftGovernor, DraftingThatPaysStaysOnAndIsJudgedAfresh) {
  G g;
  plain_until_allowed(g, 1);
  // 3 tokens for 2 ms: on through kOnTurns, then a fresh baseline, a trial, on again.
  EXPECT_EQ(drafted_while_allowed(g, 1, 2.0, 3, 100000), G::kTrialTurns + G::kOnTurns);
  EXPECT_EQ(plain_until_allowed(g, 1), G::kFirstWait);
  EXPECT_EQ(drafted_while_allowed(g, 1, 2.0, 3, 100000), G::kTrialTurns + G::kOnTurns);
  // Within the margin is not paying: 1.0 against 0.99 ms a token.
  plain_until_allowed(g, 1);
  EXPECT_EQ(drafted_while_allowed(g, 1, 0.99 * 4, 4, 100000), G::kTrialTurns);
  // While on, drafting that stops paying goes off at its next verdict.
  G h;
  plain_until_allowed(h, 1);
  drafted_while_allowed(h, 1, 2.0, 3, G::kTrialTurns);
  EXPECT_TRUE(h.allows(1));
  EXPECT_EQ(drafted_while_allowed(h, 1, 6.0, 3, 1000), G::kQuickTurns);
  EXPECT_FALSE(h.allows(1));
}

TEST(DraftGovernor, EachNumberOfSequencesHasItsOwnVerdict) {
  G g;
  plain_until_allowed(g, 1);
  drafted_while_allowed(g, 1, 2.0, 3, G::kTrialTurns);  // pays alone
  EXPECT_TRUE(g.allows(1));
  for (int32_t n : {2, 3, 4, 16, 200}) EXPECT_FALSE(g.allows(n)) << n;
  // 3 and 4 share a bucket, 5 starts the next.
  EXPECT_EQ(plain_until_allowed(g, 3), G::kFirstWait);
  EXPECT_TRUE(g.allows(4));
  EXPECT_FALSE(g.allows(5));
  EXPECT_FALSE(g.allows(2));
}

// --- the engine with it ---

constexpr int32_t kVocab = 500;

// A drafter proposing `max` tokens after waiting propose_ms a call; wrong ones when `wrong`.
// Remembers the last position it was shown.
class TimedDrafter final : public Drafter {
 public:
  TimedDrafter(bool wrong, double propose_ms) : wrong_(wrong), propose_ms_(propose_ms) {}
  void observe(std::span<const DraftObservation> runs) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const DraftObservation& r : runs) last_seen = std::max(last_seen, r.first + r.n);
  }
  void propose(std::span<const DraftAsk> asks) override {
    if (propose_ms_ > 0.0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(propose_ms_));
    for (const DraftAsk& a : asks) {
      std::vector<TokenId> c(a.seq.tokens.begin(), a.seq.tokens.end());
      for (TokenId t : fake_continuation(c, a.max, kVocab)) a.out->push_back(wrong_ ? (t + 1) % kVocab : t);
    }
  }
  void forget(int64_t) override { ++forgotten; }
  int32_t last_seen = 0;
  int32_t forgotten = 0;

 private:
  std::mutex mu_;
  bool wrong_;
  double propose_ms_;
};

struct GovernedRun {
  bool exact = false;
  SequenceStats stats;
  EngineState state;  // after the sequence ended
};

GovernedRun run_governed(std::shared_ptr<Drafter> drafter, double step_ms, int32_t n_predict) {
  EngineOptions o;
  o.n_ctx = 4096;
  o.pool_slots = {1};
  o.batch_tokens = 64;
  o.block_size = 16;
  o.drafter = std::move(drafter);
  o.draft_max = 4;
  auto layout = plan_engine_layout(o);
  EXPECT_TRUE(layout.ok()) << layout.message();
  auto runner = std::make_unique<FakeRunner>(layout->n_blocks, layout->block_size, kVocab);
  runner->step_ms = step_ms;
  auto engine = Engine::start(std::move(runner), o);
  EXPECT_TRUE(engine.ok()) << engine.message();
  const std::vector<TokenId> prompt = {11, 12, 13};
  SequenceRequest req;
  req.prompt = prompt;
  req.n_predict = n_predict;
  req.sampler.temperature = 0.0f;
  SequenceEvents ev;
  GovernedRun out;
  out.exact = testing::run_to_end(**engine, req, &ev) == fake_continuation(prompt, n_predict, kVocab);
  out.stats = ev.stats;
  out.state = (*engine)->state();
  return out;
}

TEST(DraftGovernorEngine, ADrafterThatOnlyCostsIsStoppedAndRetired) {
  // Every draft wrong, and 2 ms a proposal against steps of microseconds.
  auto d = std::make_shared<TimedDrafter>(true, 2.0);
  constexpr int32_t kTokens = 4000;
  GovernedRun r = run_governed(d, 0.0, kTokens);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.stats.n_draft_accepted, 0);
  // Failed trials of kQuickTurns drafted turns each, the k-th followed by 32 * 2^k plain turns:
  // the 5th's 1024 pass 512 turns without a draft, which retires the sequence.
  EXPECT_GT(r.stats.n_draft_steps, 0);
  EXPECT_LE(r.stats.n_draft_steps, 5 * G::kQuickTurns) << r.stats.n_draft_tokens;
  // Retired: forgotten before its end (once: not again when it ends), and never shown the rest
  // (without retirement it is shown every 512 positions).
  EXPECT_EQ(d->forgotten, 1);
  EXPECT_LT(d->last_seen, kTokens - 1024) << r.stats.n_draft_steps;
  EXPECT_EQ(r.state.draft_retired, 1);
  EXPECT_GE(r.state.draft_verdicts_failed, 4);  // the trials before the 1,024-turn wait
  EXPECT_EQ(r.state.draft_verdicts_paid, 0);
}

TEST(DraftGovernorEngine, ADrafterThatPaysKeepsDrafting) {
  // Every draft right, steps of 2 ms whatever their tokens: 5 tokens a drafted step against 1.
  auto d = std::make_shared<TimedDrafter>(false, 0.0);
  constexpr int32_t kTokens = 400;
  GovernedRun r = run_governed(d, 2.0, kTokens);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.stats.n_draft_accepted, r.stats.n_draft_tokens);
  // The baseline's 16 plain steps and a few of the cost model's exploring lengths; the rest drafts
  // (more than 3/4 of the tokens when the machine is quiet; half leaves room for a busy one, whose
  // hiccups can mislead the cost model's line for a while).
  EXPECT_GE(r.state.draft_verdicts_paid, 1);
  EXPECT_EQ(r.state.draft_retired, 0);
  EXPECT_GT(r.stats.n_draft_accepted, kTokens / 2) << r.stats.n_draft_steps << " steps, " << r.stats.n_draft_tokens << " drafted";
}

}  // namespace
}  // namespace onebit
