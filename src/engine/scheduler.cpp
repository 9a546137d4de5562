// Continuous batching; see scheduler.h. (nano-vllm's Scheduler and vLLM's chunked-prefill policy
// are the models: decodes first, then prompt chunks under a token budget, FCFS admission by free
// blocks, recompute preemption of the newest sequence.)
#include "engine/scheduler.h"

#include <algorithm>

#include "base/check.h"

namespace onebit {

Scheduler::Scheduler(BlockManager& blocks, SchedulerOptions options)
    : blocks_(blocks), options_(std::move(options)), pool_running_(options_.pool_slots.size(), 0) {
  ONEBIT_CHECK(!options_.pool_slots.empty());
  int32_t total = 0;
  for (int32_t n : options_.pool_slots) {
    ONEBIT_CHECK(n >= 1);
    total += n;
  }
  ONEBIT_CHECK_MSG(options_.token_budget >= total, "the token budget must hold one token of every slot");
  ONEBIT_CHECK(options_.state_rows == 0 || options_.state_rows >= total);
  for (int32_t r = options_.state_rows - 1; r >= 0; --r) free_state_rows_.push_back(r);
}

void Scheduler::release_state_row(Sequence* seq) {
  if (seq->state_row < 0) return;
  free_state_rows_.push_back(seq->state_row);
  seq->state_row = -1;
}

void Scheduler::insert_waiting(Sequence* seq) {
  const auto at = std::upper_bound(waiting_.begin(), waiting_.end(), seq,
                                   [](const Sequence* a, const Sequence* b) { return a->id < b->id; });
  waiting_.insert(at, seq);
}

void Scheduler::add(Sequence* seq) {
  ONEBIT_CHECK(seq->pool >= 0 && seq->pool < static_cast<int32_t>(pool_running_.size()));
  ONEBIT_CHECK(seq->block_table.empty() && seq->n_computed == 0 && seq->n_pending() >= 1);
  seq->status = SequenceStatus::kWaiting;
  insert_waiting(seq);
}

void Scheduler::remove(Sequence* seq) {
  if (seq->status == SequenceStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), seq));
    --pool_running_[seq->pool];
    release_state_row(seq);
  } else if (seq->status == SequenceStatus::kWaiting) {
    const auto it = std::find(waiting_.begin(), waiting_.end(), seq);
    if (it != waiting_.end()) waiting_.erase(it);
  }
  blocks_.release(*seq);
  seq->status = SequenceStatus::kFinished;
}

int32_t Scheduler::tokens_that_fit(const Sequence& seq, int32_t want, int32_t reserve) const {
  const int32_t avail = blocks_.n_free() - reserve;
  if (avail < 0) return 0;
  // blocks_to_grow is monotone in the token count: the largest n in [0, want] that fits.
  int32_t lo = 0, hi = want;
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo + 1) / 2;
    if (blocks_.blocks_to_grow(seq, seq.n_computed + mid) <= avail) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

Sequence* Scheduler::newest_unscheduled(const StepPlan& plan) const {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    const bool scheduled = std::any_of(plan.runs.begin(), plan.runs.end(), [&](const ScheduledRun& r) { return r.seq == *it; });
    if (!scheduled) return *it;
  }
  return nullptr;
}

void Scheduler::drop_draft(Sequence* seq) {
  seq->tokens.resize(seq->tokens.size() - static_cast<size_t>(seq->n_draft));
  seq->n_draft = 0;
}

void Scheduler::preempt(Sequence* seq, StepPlan& plan) {
  drop_draft(seq);
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  --pool_running_[seq->pool];
  release_state_row(seq);  // it recomputes from position 0, from a zero state
  blocks_.release(*seq);
  seq->status = SequenceStatus::kWaiting;
  ++seq->n_preemptions;
  ++stats_.preemptions;
  insert_waiting(seq);
  plan.preempted.push_back(seq);
}

void Scheduler::add_run(Sequence* seq, int32_t n, StepPlan& plan) {
  blocks_.grow(*seq, seq->n_computed + n, plan.copies);
  const bool logits = seq->n_computed + n == static_cast<int32_t>(seq->tokens.size());
  const int32_t n_logits = logits ? 1 + (n > seq->n_draft ? seq->n_draft : 0) : 0;
  plan.runs.push_back(ScheduledRun{seq, seq->n_computed, n, logits, n_logits});
  plan.n_tokens += n;
}

StepPlan Scheduler::schedule(int32_t prefill_cap) {
  StepPlan plan;
  int32_t budget = options_.token_budget;
  // 1. One token of every decoding sequence, oldest first, with its draft when the budget and
  //    the free blocks allow (else the draft is dropped); the newest make room when blocks run out.
  const std::vector<Sequence*> decoding = running_;
  int32_t n_decoding = 0;
  for (Sequence* seq : decoding) n_decoding += seq->status == SequenceStatus::kRunning && seq->n_pending() == 1 + seq->n_draft;
  for (Sequence* seq : decoding) {
    if (seq->status != SequenceStatus::kRunning || seq->n_pending() != 1 + seq->n_draft) continue;
    --n_decoding;
    if (seq->n_draft > 0 && (budget - seq->n_draft - 1 < n_decoding || !blocks_.can_grow(*seq, seq->n_computed + 1 + seq->n_draft))) {
      drop_draft(seq);
    }
    while (seq->status == SequenceStatus::kRunning && !blocks_.can_grow(*seq, seq->n_computed + 1)) {
      preempt(newest_unscheduled(plan), plan);
    }
    if (seq->status != SequenceStatus::kRunning) continue;
    add_run(seq, 1 + seq->n_draft, plan);
    ++plan.n_decode;
    plan.n_draft += seq->n_draft;
    budget -= 1 + seq->n_draft;
  }
  int32_t prefill_left = plan.n_decode > 0 ? std::min(prefill_cap, budget) : budget;
  prefill_left = std::max(prefill_left, 0);
  // 2. Chunks of running sequences with prompt (or a recomputation) left.
  const std::vector<Sequence*> filling = running_;
  for (Sequence* seq : filling) {
    if (prefill_left == 0) break;
    if (seq->status != SequenceStatus::kRunning || seq->n_pending() <= 1 + seq->n_draft) continue;
    const int32_t want = std::min(seq->n_pending(), prefill_left);
    int32_t n = tokens_that_fit(*seq, want, 0);
    while (n == 0 && seq->status == SequenceStatus::kRunning) {
      preempt(newest_unscheduled(plan), plan);  // seq itself when it is the newest
      if (seq->status == SequenceStatus::kRunning) n = tokens_that_fit(*seq, want, 0);
    }
    if (n == 0) continue;
    add_run(seq, n, plan);
    prefill_left -= n;
  }
  // 3. Admissions, first come first served per pool; a sequence that does not fit the free blocks
  //    (keeping one for each running sequence's next token) stops them: nobody overtakes it.
  for (auto it = waiting_.begin(); it != waiting_.end() && prefill_left > 0;) {
    Sequence* seq = *it;
    if (pool_running_[seq->pool] >= options_.pool_slots[seq->pool]) {
      ++it;
      continue;
    }
    const bool use_cache = !seq->every_row && (seq->cache_prompt || seq->admitted_once) && options_.state_rows == 0;
    const int32_t hit = blocks_.acquire_prefix(*seq, use_cache ? static_cast<int32_t>(seq->tokens.size()) : 0);
    const int32_t n = tokens_that_fit(*seq, std::min(seq->n_pending(), prefill_left),
                                      static_cast<int32_t>(running_.size()));
    if (n == 0) {
      blocks_.release(*seq);
      break;
    }
    if (!seq->admitted_once) {
      seq->admitted_once = true;
      seq->n_cached = hit;
      stats_.prefix_hit_tokens += hit;
    }
    it = waiting_.erase(it);
    seq->status = SequenceStatus::kRunning;
    if (options_.state_rows > 0) {  // one per running sequence: there are as many as slots
      ONEBIT_CHECK(!free_state_rows_.empty());
      seq->state_row = free_state_rows_.back();
      free_state_rows_.pop_back();
    }
    running_.insert(std::upper_bound(running_.begin(), running_.end(), seq,
                                     [](const Sequence* a, const Sequence* b) { return a->id < b->id; }),
                    seq);
    ++pool_running_[seq->pool];
    add_run(seq, n, plan);
    prefill_left -= n;
  }
  return plan;
}

void Scheduler::commit(const StepPlan& plan) {
  for (const ScheduledRun& r : plan.runs) {
    ONEBIT_CHECK(r.seq->n_computed == r.first);
    r.seq->n_computed += r.n;
    blocks_.commit(*r.seq, r.seq->n_computed - (r.n_logits > 0 ? r.n_logits - 1 : 0));
  }
  ++stats_.steps;
  stats_.step_tokens += plan.n_tokens;
}

void Scheduler::rollback(Sequence* seq, int32_t n_keep) {
  ONEBIT_CHECK(n_keep <= seq->n_computed);
  seq->n_computed = n_keep;
  blocks_.truncate(*seq, n_keep);
  blocks_.commit(*seq);
}

}  // namespace onebit
