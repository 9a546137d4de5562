// The serving core without a model: BlockManager and Scheduler driven by a simulated engine loop
// over the FakeRunner, with randomized arrivals (many sharing prefixes), cancellations, tight K/V
// pools (preemption) and small budgets (chunked prefill). After every step the invariants must
// hold, and every sequence that runs to its end must produce exactly what it produces alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>

#include "engine/block_manager.h"
#include "engine/scheduler.h"
#include "fake_runner.h"

namespace onebit {
namespace {

using testing::fake_continuation;
using testing::FakeRunner;

Sequence make_seq(int64_t id, std::vector<TokenId> tokens) {
  Sequence s;
  s.id = id;
  s.n_prompt = static_cast<int32_t>(tokens.size());
  s.tokens = std::move(tokens);
  return s;
}

TEST(BlockManager, PrefixOfFullBlocksIsSharedAndSurvivesItsSequence) {
  BlockManager bm(8, 4);
  std::vector<BlockCopy> copies;
  Sequence a = make_seq(0, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  EXPECT_EQ(bm.acquire_prefix(a, 10), 0);
  bm.grow(a, 10, copies);
  EXPECT_EQ(a.block_table.size(), 3u);
  a.n_computed = 10;
  bm.commit(a);  // two full blocks enter the cache
  EXPECT_EQ(bm.cached_prefix(a.tokens), 8);
  Sequence b = make_seq(1, {1, 2, 3, 4, 5, 6, 7, 8, 42});
  EXPECT_EQ(bm.acquire_prefix(b, 9), 8);
  EXPECT_EQ(b.block_table[0], a.block_table[0]);
  EXPECT_EQ(b.block_table[1], a.block_table[1]);
  const Sequence* holders[] = {&a, &b};
  ASSERT_TRUE(bm.check(holders).ok()) << bm.check(holders).message();
  bm.release(a);
  bm.release(b);
  EXPECT_EQ(bm.n_free(), 8);
  EXPECT_EQ(bm.n_cached_free(), 2);
  ASSERT_TRUE(bm.check({}).ok()) << bm.check({}).message();
  // A prompt that differs inside the first block shares nothing.
  Sequence c = make_seq(2, {1, 2, 3, 9, 5, 6, 7, 8, 1});
  EXPECT_EQ(bm.acquire_prefix(c, 9), 0);
}

TEST(BlockManager, WholeCachedPromptRunsItsLastTokenAgainInACopy) {
  BlockManager bm(6, 4);
  std::vector<BlockCopy> copies;
  Sequence a = make_seq(0, {1, 2, 3, 4, 5, 6, 7, 8});
  bm.acquire_prefix(a, 8);
  bm.grow(a, 8, copies);
  a.n_computed = 8;
  bm.commit(a);
  Sequence b = make_seq(1, a.tokens);
  EXPECT_EQ(bm.acquire_prefix(b, 8), 7);  // the last token runs again for its logits
  EXPECT_EQ(bm.blocks_to_grow(b, 8), 1);  // its block is shared: copy-on-write
  bm.grow(b, 8, copies);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, a.block_table[1]);
  EXPECT_EQ(copies[0].dst, b.block_table[1]);
  EXPECT_NE(b.block_table[1], a.block_table[1]);
  EXPECT_EQ(b.block_table[0], a.block_table[0]);
  const Sequence* holders[] = {&a, &b};
  ASSERT_TRUE(bm.check(holders).ok()) << bm.check(holders).message();
}

TEST(BlockManager, EvictsCleanBlocksFirstThenLeastRecentlyReleased) {
  BlockManager bm(4, 2);
  std::vector<BlockCopy> copies;
  auto fill = [&](int64_t id, std::vector<TokenId> t) {
    Sequence s = make_seq(id, std::move(t));
    bm.acquire_prefix(s, 0);
    bm.grow(s, static_cast<int32_t>(s.tokens.size()), copies);
    s.n_computed = static_cast<int32_t>(s.tokens.size());
    bm.commit(s);
    bm.release(s);
  };
  fill(0, {1, 2});
  fill(1, {3, 4});
  EXPECT_EQ(bm.n_cached_free(), 2);
  // Two clean blocks remain: a two-block sequence takes them and evicts nothing.
  Sequence c = make_seq(2, {5, 6, 7, 8});
  bm.acquire_prefix(c, 0);
  bm.grow(c, 4, copies);
  EXPECT_EQ(bm.stats().evictions, 0);
  EXPECT_EQ(bm.cached_prefix(std::vector<TokenId>{1, 2}), 2);
  // The next block evicts {1, 2}, released before {3, 4}.
  Sequence d = make_seq(3, {9, 9});
  bm.acquire_prefix(d, 0);
  bm.grow(d, 2, copies);
  EXPECT_EQ(bm.stats().evictions, 1);
  EXPECT_EQ(bm.cached_prefix(std::vector<TokenId>{1, 2}), 0);
  EXPECT_EQ(bm.cached_prefix(std::vector<TokenId>{3, 4}), 2);
}

// One randomized workload through the simulated engine loop.
struct Workload {
  int32_t n_blocks, block_size, budget;
  std::vector<int32_t> pool_slots;
  int32_t steps;
  uint32_t seed;
  double arrivals;  // new sequences per step (below what the slots serve: a queue that drains)
};

// No sequence waits forever: each finishes within this many steps of its arrival.
constexpr int64_t kMaxLifeSteps = 1500;

// Adds the steps that ran something to *steps.
void run_workload(const Workload& w, int64_t* steps) {
  constexpr int32_t kVocab = 1000, kCtx = 96;
  BlockManager bm(w.n_blocks, w.block_size);
  Scheduler sched(bm, SchedulerOptions{w.pool_slots, w.budget});
  FakeRunner runner(w.n_blocks, w.block_size, kVocab);
  std::mt19937 rng(w.seed);
  // A few shared prefixes make prefix-cache hits (and copy-on-write) common.
  std::vector<std::vector<TokenId>> roots;
  for (int r = 0; r < 4; ++r) {
    std::vector<TokenId> root(1 + rng() % 40);
    for (auto& t : root) t = static_cast<TokenId>(rng() % kVocab);
    roots.push_back(root);
  }
  struct Job {
    std::unique_ptr<Sequence> seq;
    int32_t n_predict;
    std::vector<TokenId> expected, got;
    int64_t arrived_step;
    bool admitted = false;
  };
  std::map<int64_t, Job> jobs;
  int64_t next_id = 0, finished = 0, cancelled = 0, checked = 0, max_wait = 0;
  StepOutput out;
  for (int32_t step = 0; step < w.steps || !jobs.empty(); ++step) {
    ASSERT_LT(step, w.steps + 20000) << "sequences did not drain";
    // Arrivals (none after the last step: the rest drains).
    const int n_new = step < w.steps && std::uniform_real_distribution<double>(0, 1)(rng) < w.arrivals ? 1 + (rng() % 4 == 0) : 0;
    for (int k = 0; k < n_new; ++k) {
      std::vector<TokenId> prompt = roots[rng() % roots.size()];
      if (rng() % 4 == 0) prompt.resize(1 + rng() % prompt.size());  // a prefix of a root, maybe a whole block
      const int extra = static_cast<int>(rng() % 24);
      for (int i = 0; i < extra; ++i) prompt.push_back(static_cast<TokenId>(rng() % kVocab));
      const int32_t n_predict = 1 + static_cast<int32_t>(rng() % std::max<size_t>(1, kCtx - prompt.size()));
      Job job;
      job.seq = std::make_unique<Sequence>(make_seq(next_id, prompt));
      job.seq->pool = static_cast<int32_t>(rng() % w.pool_slots.size());
      job.seq->cache_prompt = rng() % 8 != 0;
      job.n_predict = std::min<int32_t>(n_predict, 40);
      job.expected = fake_continuation(prompt, job.n_predict, kVocab);
      job.arrived_step = step;
      sched.add(job.seq.get());
      jobs.emplace(next_id++, std::move(job));
    }
    // Cancellations.
    if (!jobs.empty() && rng() % 25 == 0) {
      auto it = jobs.begin();
      std::advance(it, rng() % jobs.size());
      sched.remove(it->second.seq.get());
      jobs.erase(it);
      ++cancelled;
    }
    StepPlan plan = sched.schedule(rng() % 3 == 0 ? 1 + static_cast<int32_t>(rng() % 8) : INT32_MAX);
    ASSERT_LE(plan.n_tokens, w.budget);
    int32_t n_tok = 0;
    for (const ScheduledRun& r : plan.runs) {
      ASSERT_EQ(r.seq->status, SequenceStatus::kRunning);
      ASSERT_GE(r.n, 1);
      n_tok += r.n;
      // First come, first served: a sequence is first admitted only after every older one of its pool.
      Job& job = jobs.at(r.seq->id);
      if (!job.admitted) {
        job.admitted = true;
        for (const auto& [id, other] : jobs) {
          if (id >= r.seq->id) break;
          ASSERT_TRUE(other.admitted || other.seq->pool != r.seq->pool) << "sequence " << r.seq->id << " overtook " << id;
        }
      }
    }
    ASSERT_EQ(n_tok, plan.n_tokens);
    std::vector<int32_t> per_pool(w.pool_slots.size(), 0);
    for (const Sequence* s : sched.running()) ++per_pool[s->pool];
    for (size_t p = 0; p < per_pool.size(); ++p) ASSERT_LE(per_pool[p], w.pool_slots[p]);
    if (!plan.empty()) {
      StepBatch b;
      b.max_blocks = 1;
      for (const ScheduledRun& r : plan.runs) b.max_blocks = std::max<int32_t>(b.max_blocks, static_cast<int32_t>(r.seq->block_table.size()));
      for (size_t s = 0; s < plan.runs.size(); ++s) {
        const ScheduledRun& r = plan.runs[s];
        for (int32_t i = 0; i < r.n; ++i) {
          const int32_t pos = r.first + i;
          b.tokens.push_back(r.seq->tokens[pos]);
          b.positions.push_back(pos);
          b.slots.push_back(r.seq->block_table[pos / w.block_size] * w.block_size + pos % w.block_size);
          b.seq_ids.push_back(static_cast<int32_t>(s));
        }
        if (r.logits) b.out_rows.push_back(b.n_tokens() - 1);
        b.block_tables.insert(b.block_tables.end(), r.seq->block_table.begin(), r.seq->block_table.end());
        b.block_tables.resize((s + 1) * b.max_blocks, -1);
      }
      runner.copy_blocks(plan.copies);
      Status st = runner.run(b, out);
      ASSERT_TRUE(st.ok()) << st.message();
      sched.commit(plan);
      size_t o = 0;
      for (const ScheduledRun& r : plan.runs) {
        if (!r.logits) continue;
        const float* row = out.logits.data() + (o++) * kVocab;
        const TokenId t = static_cast<TokenId>(std::max_element(row, row + kVocab) - row);
        Job& job = jobs.at(r.seq->id);
        job.got.push_back(t);
        if (static_cast<int32_t>(job.got.size()) == job.n_predict) {
          ASSERT_EQ(job.got, job.expected) << "sequence " << r.seq->id;
          ++checked;
          sched.remove(r.seq);
          max_wait = std::max(max_wait, step - job.arrived_step);
          ASSERT_LE(step - job.arrived_step, kMaxLifeSteps) << "sequence " << r.seq->id << " starved";
          jobs.erase(r.seq->id);
          ++finished;
        } else {
          r.seq->tokens.push_back(t);
        }
      }
    } else {
      ASSERT_TRUE(sched.running().empty() && sched.waiting().empty()) << "an empty step with work left";
    }
    // Invariants after every step.
    std::vector<const Sequence*> holders(sched.running().begin(), sched.running().end());
    for (const Sequence* s : sched.waiting()) ASSERT_TRUE(s->block_table.empty());
    Status inv = bm.check(holders);
    ASSERT_TRUE(inv.ok()) << "step " << step << ": " << inv.message();
  }
  // Nothing leaks: every block is free again.
  EXPECT_EQ(bm.n_free(), w.n_blocks);
  EXPECT_TRUE(bm.check({}).ok());
  EXPECT_GT(checked, 50);
  std::printf("workload seed %u: %lld finished (output checked), %lld cancelled, %lld preemptions, %lld prefix-hit tokens, "
              "%lld copies, %lld evictions, %lld steps, longest life %lld steps\n",
              w.seed, (long long)finished, (long long)cancelled, (long long)sched.stats().preemptions,
              (long long)sched.stats().prefix_hit_tokens, (long long)bm.stats().copies, (long long)bm.stats().evictions,
              (long long)runner.steps, (long long)max_wait);
  EXPECT_GT(sched.stats().prefix_hit_tokens, 0);
  *steps += runner.steps;
}

TEST(Scheduler, RandomizedWorkloadsKeepInvariantsAndOutputs) {
  // Tight pools preempt; small budgets chunk; block size 1 and 16 test the edges.
  const Workload workloads[] = {
      {30, 4, 16, {4}, 4000, 1, 0.1},
      {60, 8, 12, {6, 2}, 3000, 2, 0.2},
      {200, 1, 32, {8}, 3000, 3, 0.12},
      {24, 16, 64, {3}, 3000, 4, 0.08},
      {1000, 4, 8, {8}, 2000, 5, 0.25},
  };
  int64_t steps = 0;
  for (const Workload& w : workloads) {
    SCOPED_TRACE(w.seed);
    run_workload(w, &steps);
    if (HasFatalFailure()) return;
  }
  EXPECT_GE(steps, 10000);
}

TEST(Scheduler, PreemptionHappensUnderATightPool) {
  BlockManager bm(6, 4);  // 24 positions: two sequences of 20 cannot both fit
  Scheduler sched(bm, SchedulerOptions{{2}, 64});
  FakeRunner runner(6, 4, 100);
  Sequence a = make_seq(0, std::vector<TokenId>(10, 1)), b = make_seq(1, std::vector<TokenId>(10, 2));
  sched.add(&a);
  sched.add(&b);
  int64_t preempted_b = 0;
  for (int step = 0; step < 30; ++step) {
    StepPlan plan = sched.schedule();
    for (Sequence* p : plan.preempted) preempted_b += p == &b;
    sched.commit(plan);
    for (const ScheduledRun& r : plan.runs) {
      if (r.logits && r.seq->tokens.size() < 22) r.seq->tokens.push_back(3);
    }
  }
  EXPECT_GT(preempted_b, 0);   // the newest sequence gave way
  EXPECT_EQ(a.n_preemptions, 0);
}

// A sequence that needs every token's row (mean/cls embeddings) runs again from its first token
// after a preemption, though its blocks are still in the prefix cache; any other takes them back.
TEST(Scheduler, EveryRowSequencesTakeNoCachedPrefixEvenAfterAPreemption) {
  for (const bool every_row : {false, true}) {
    BlockManager bm(6, 4);  // 24 positions: a at 13 tokens takes a block of b
    Scheduler sched(bm, SchedulerOptions{{2}, 64});
    Sequence a = make_seq(0, std::vector<TokenId>(10, 1)), b = make_seq(1, std::vector<TokenId>(10, 2));
    b.every_row = every_row;
    sched.add(&a);
    sched.add(&b);
    bool preempted = false;
    int32_t rerun_from = -1;
    for (int step = 0; step < 30 && rerun_from < 0; ++step) {
      StepPlan plan = sched.schedule();
      for (Sequence* p : plan.preempted) preempted |= p == &b;
      for (const ScheduledRun& r : plan.runs) {
        if (preempted && r.seq == &b && rerun_from < 0) rerun_from = r.first;
      }
      sched.commit(plan);
      for (const ScheduledRun& r : plan.runs) {
        if (!r.logits) continue;
        if (r.seq == &a && a.tokens.size() >= 14) {
          sched.remove(&a);  // a is done: b gets the blocks back
        } else if (r.seq->tokens.size() < 22) {
          r.seq->tokens.push_back(3);
        }
      }
    }
    ASSERT_TRUE(preempted) << every_row;
    EXPECT_EQ(b.n_cached, 0);
    if (every_row) {
      EXPECT_EQ(rerun_from, 0);
    } else {
      EXPECT_GE(rerun_from, 8) << "its full blocks come back from the cache";
    }
  }
}

// Recurrent models (SchedulerOptions::state_rows): every running sequence holds a distinct state
// row, a preempted one gives it back and runs again from its first token (its state restarts),
// a finished one gives it back, and no prompt takes a cached prefix (the state at its end is gone).
TEST(Scheduler, RecurrentStateRowsFollowRunningSequences) {
  BlockManager bm(6, 4);  // tight: the newest is preempted
  Scheduler sched(bm, SchedulerOptions{{2}, 64, /*state_rows=*/2});
  Sequence a = make_seq(0, std::vector<TokenId>(10, 1)), b = make_seq(1, std::vector<TokenId>(10, 2));
  sched.add(&a);
  sched.add(&b);
  bool preempted = false, rerun_from_zero = false;
  for (int step = 0; step < 40; ++step) {
    StepPlan plan = sched.schedule();
    for (Sequence* p : plan.preempted) {  // gave its row back, unless admitted again from 0
      preempted |= p == &b;
      const bool again = std::any_of(plan.runs.begin(), plan.runs.end(), [&](const ScheduledRun& r) {
        return r.seq == p && r.first == 0;
      });
      EXPECT_TRUE(p->state_row == -1 || again) << "row " << p->state_row;
    }
    std::vector<int32_t> rows;
    for (const ScheduledRun& r : plan.runs) {
      ASSERT_GE(r.seq->state_row, 0);
      ASSERT_LT(r.seq->state_row, 2);
      rows.push_back(r.seq->state_row);
      if (preempted && r.seq == &b && r.first == 0) rerun_from_zero = true;
    }
    std::sort(rows.begin(), rows.end());
    EXPECT_EQ(std::adjacent_find(rows.begin(), rows.end()), rows.end()) << "distinct rows in a step";
    sched.commit(plan);
    for (const ScheduledRun& r : plan.runs) {
      if (!r.logits) continue;
      if (r.seq == &a && a.tokens.size() >= 14) {
        sched.remove(&a);
        EXPECT_EQ(a.state_row, -1);
      } else if (r.seq->tokens.size() < 22) {
        r.seq->tokens.push_back(3);
      }
    }
  }
  EXPECT_TRUE(preempted);
  EXPECT_TRUE(rerun_from_zero) << "no cached prefix: the preempted sequence recomputes from position 0";
  // A third sequence with the same prompt as a finished one takes no cached prefix.
  Sequence c = make_seq(2, std::vector<TokenId>(10, 2));
  sched.add(&c);
  StepPlan plan = sched.schedule();
  for (const ScheduledRun& r : plan.runs) {
    if (r.seq == &c) EXPECT_EQ(r.first, 0);
  }
  EXPECT_EQ(c.n_cached, 0);
}

}  // namespace
}  // namespace onebit
