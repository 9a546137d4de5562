// Continuous batching: which tokens of which sequences the next step runs. Each step takes, in
// this order, one token of every running sequence that decodes, then chunks of running
// sequences that still have prompt (or a recomputation) to run, then admits waiting sequences
// first come, first served, while the token budget, the slots of their pool and the free K/V
// blocks allow. An admitted sequence first takes its longest cached prefix. When a decoding
// sequence finds no free block, the newest running sequence is preempted: its blocks go back
// (they stay in the prefix cache) and it waits at the head of the queue to be recomputed.
// No model and no threads: tests drive it with a fake runner.
#pragma once

#include <climits>
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/block_manager.h"
#include "engine/sequence.h"

namespace onebit {

struct SchedulerOptions {
  std::vector<int32_t> pool_slots = {1};  // running sequences at most, per pool
  int32_t token_budget = 512;             // tokens of a step at most (>= the sum of pool_slots)
  int32_t state_rows = 0;                 // recurrent models: rows to hand to running sequences
                                          // (>= the sum of pool_slots); their prompts never take a
                                          // cached prefix (the state at its end is not kept)
};

// Tokens [first, first + n) of one sequence, run in this step.
struct ScheduledRun {
  Sequence* seq = nullptr;
  int32_t first = 0;
  int32_t n = 0;
  bool logits = false;  // the run ends at the sequence's last token: sample from its logits
  int32_t n_logits = 0; // trailing tokens that get logits: 1, or 1 + the draft when verifying
};

struct StepPlan {
  std::vector<ScheduledRun> runs;     // at most one per sequence
  std::vector<BlockCopy> copies;      // copy-on-write, before the step runs
  std::vector<Sequence*> preempted;   // lost their blocks while this step was built
  int32_t n_tokens = 0;
  int32_t n_decode = 0;               // runs that continue a generation (one token and its draft)
  int32_t n_draft = 0;                // draft tokens of those runs
  bool empty() const { return runs.empty(); }
};

struct SchedulerStats {
  int64_t preemptions = 0;
  int64_t prefix_hit_tokens = 0;      // prompt tokens taken from the prefix cache at admission
  int64_t steps = 0;
  int64_t step_tokens = 0;            // tokens of every step so far
};

class Scheduler {
 public:
  Scheduler(BlockManager& blocks, SchedulerOptions options);

  // Queues a new sequence (kWaiting, no blocks).
  void add(Sequence* seq);
  // Drops a sequence wherever it is (finished, cancelled, failed); its blocks are released.
  void remove(Sequence* seq);

  // Builds the next step. While some sequence decodes, prompt tokens of the step are at most
  // prefill_cap (the engine's lever for keeping decode speed while a long prompt arrives).
  StepPlan schedule(int32_t prefill_cap = INT32_MAX);
  // After the step ran: every run's tokens are computed, and full blocks enter the prefix cache
  // (draft tokens only once verified).
  void commit(const StepPlan& plan);
  // After verifying seq's draft: only its first n_keep tokens stay computed (the rest of the
  // draft was rejected: its blocks go back); the newly valid full blocks enter the prefix cache.
  void rollback(Sequence* seq, int32_t n_keep);

  const std::deque<Sequence*>& waiting() const { return waiting_; }
  const std::vector<Sequence*>& running() const { return running_; }
  const SchedulerStats& stats() const { return stats_; }
  const SchedulerOptions& options() const { return options_; }

 private:
  // Tokens of seq that fit the free blocks from n_computed on, at most `want`, keeping `reserve`
  // blocks free.
  int32_t tokens_that_fit(const Sequence& seq, int32_t want, int32_t reserve) const;
  void preempt(Sequence* seq, StepPlan& plan);
  // The newest running sequence without a run in `plan`, or nullptr.
  Sequence* newest_unscheduled(const StepPlan& plan) const;
  void add_run(Sequence* seq, int32_t n, StepPlan& plan);
  static void drop_draft(Sequence* seq);
  void insert_waiting(Sequence* seq);  // by id: preempted ones come before newer arrivals
  void release_state_row(Sequence* seq);

  BlockManager& blocks_;
  SchedulerOptions options_;
  std::deque<Sequence*> waiting_;      // by id
  std::vector<Sequence*> running_;     // by id
  std::vector<int32_t> pool_running_;  // [pools]
  std::vector<int32_t> free_state_rows_;  // recurrent models: rows no running sequence holds
  SchedulerStats stats_;
};

}  // namespace onebit
