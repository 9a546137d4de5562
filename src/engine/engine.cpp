// The engine's worker and scheduler step; see engine.h.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>

namespace onebit {
namespace {

// Prompt time a burst may take from decoding streams at once, and the prompt time each step earns
// per unit of decode time: sustained, decoding keeps 1 / (1 + share) of the time, so a stream keeps
// over half its speed while a long prompt is prefilled (bench/long_prompt.py measures it).
constexpr double kPrefillCreditMs = 2000.0;
constexpr double kPrefillShare = 0.9;

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The positions of run `r` whose final-normed rows an embedding pooled by `p` needs, in order: the
// prompt's last token (kLast), every token (kMean), the first token (kCls).
void embedding_positions(Pooling p, const ScheduledRun& r, std::vector<int32_t>& out) {
  out.clear();
  if (p == Pooling::kMean) {
    for (int32_t i = 0; i < r.n; ++i) out.push_back(r.first + i);
  } else if (p == Pooling::kCls) {
    if (r.first == 0) out.push_back(0);
  } else if (r.logits) {
    out.push_back(r.first + r.n - 1);
  }
}

}  // namespace

uint64_t HandleSignal::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

void HandleSignal::notify() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++count_;
  }
  cv_.notify_all();
}

void HandleSignal::wait(uint64_t seen, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return count_ != seen; });
}

SequenceEvents SequenceHandle::wait(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
               [&] { return !pending_.tokens.empty() || pending_.finished; });
  // The finish stays: later waits see it again, with no tokens.
  SequenceEvents out = pending_;
  pending_.tokens.clear();
  pending_.logprobs.clear();
  return out;
}

void SequenceHandle::push_token(TokenId token, const SampledLogprobs* logprobs) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.tokens.push_back(token);
    if (logprobs != nullptr) pending_.logprobs.push_back(*logprobs);
  }
  cv_.notify_all();
  if (signal_) signal_->notify();
}

void SequenceHandle::set_embedding(std::vector<float> embedding) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.embedding = std::move(embedding);
}

void SequenceHandle::finish(FinishReason reason, const SequenceStats& stats, std::string error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.finished = true;
    pending_.reason = reason;
    pending_.stats = stats;
    pending_.error = std::move(error);
  }
  cv_.notify_all();
  if (signal_) signal_->notify();
}

// One submitted sequence, the worker's side.
struct Engine::Live {
  Sequence seq;
  SequenceRequest request;  // prompt moved into seq.tokens
  std::shared_ptr<SequenceHandle> handle;
  std::unique_ptr<Sampler> sampler;
  std::vector<double> pooled;  // embeddings: the sum of the rows pooled so far [hidden]
  int32_t n_pooled = 0;        // and how many (for kMean: the prompt's first n_pooled tokens)
  SequenceStats stats;
  double queued_ms = 0.0;
  double started_ms = 0.0;         // first scheduled
  double decode_started_ms = 0.0;  // first token sampled
  int32_t n_generated = 0;
  int64_t leader = -1;             // held until this sequence's prompt is computed
  int32_t draft_len = 0;           // the drafts' length at most (0: this sequence does not draft)
  double draft_hits = 1.0;         // fading counts of drafted tokens accepted, and of tokens
  double draft_trials = 2.0;       // verified: their ratio estimates the acceptance (prior 1/2)
  int32_t plain_steps = 0;         // decode steps without a draft since the last one, and how many
  int32_t probe_every = 16;        // make a probe: doubles while probes find that drafting does
                                   // not pay (at most 256), back to 16 once it does
  int32_t undrafted = 0;           // decode steps without a draft since the last one, all of them
  int32_t seen_first = 0;          // positions [seen_first, seen_first + seen_n) were computed and
  int32_t seen_n = 0;              // kept but not yet shown to the drafter,
  std::vector<float> seen_rows;    // with their captured target rows [seen_n, width]
  SampledLogprobs logprobs;        // scratch for the sampler
};

Result<EngineLayout> plan_engine_layout(const EngineOptions& o) {
  if (o.n_ctx < 1) return make_error("engine: context of " + std::to_string(o.n_ctx) + " positions; allowed >= 1 (--ctx-size)");
  if (o.pool_slots.empty() || o.pool_slots.size() > 2) return make_error("engine: one or two slot pools");
  int32_t slots = 0;
  for (int32_t n : o.pool_slots) {
    if (n < 1) return make_error("engine: " + std::to_string(n) + " slots; allowed >= 1 (--parallel)");
    slots += n;
  }
  if (o.block_size < 1 || o.block_size > 1024) {
    return make_error("engine: block size " + std::to_string(o.block_size) + "; allowed 1..1024");
  }
  if (o.cache_type != GgmlType::kF16 && o.cache_type != GgmlType::kF32) {
    return make_error("engine: cache type must be f16 or f32 (--cache-type)");
  }
  if (o.pooling == Pooling::kRank) {
    return make_error("engine: rank pooling (a reranker) is not built; use last, mean or cls (--pooling)");
  }
  EngineLayout l;
  l.n_ctx = o.n_ctx;
  l.block_size = o.block_size;
  l.pool_slots = o.pool_slots;
  l.cache_type = o.cache_type;
  l.batch_tokens = o.batch_tokens > 0 ? o.batch_tokens : std::max(kDefaultBatchTokens, slots);
  if (l.batch_tokens < slots) {
    return make_error("engine: --batch-tokens " + std::to_string(l.batch_tokens) + " is below the " +
                      std::to_string(slots) + " slots; every step must hold one token of every running sequence");
  }
  const int64_t per_seq = (int64_t(o.n_ctx) + o.block_size - 1) / o.block_size;
  const int64_t blocks = o.kv_tokens > 0 ? (o.kv_tokens + o.block_size - 1) / o.block_size : per_seq * slots;
  if (blocks < per_seq) {
    return make_error("engine: the K/V pool holds " + std::to_string(blocks * o.block_size) +
                      " positions, less than one context of " + std::to_string(o.n_ctx) +
                      "; raise --kv-memory or lower --ctx-size");
  }
  if (blocks > INT32_MAX / o.block_size) return make_error("engine: the K/V pool is too large");
  l.n_blocks = static_cast<int32_t>(blocks);
  return l;
}

Engine::Engine(std::unique_ptr<ModelRunner> runner, EngineOptions options, EngineLayout layout)
    : runner_(std::move(runner)), options_(std::move(options)), layout_(std::move(layout)),
      blocks_(layout_.n_blocks, layout_.block_size),
      scheduler_(blocks_, SchedulerOptions{layout_.pool_slots, layout_.batch_tokens, runner_->state_rows()}) {
  credit_ms_ = kPrefillCreditMs;
  const char* e = std::getenv("ONEBIT_ARGMAX_ROWS");
  argmax_rows_ = options_.argmax_ids && (e == nullptr || std::string(e) != "0");
}

int32_t EngineLayout::total_slots() const {
  int32_t n = 0;
  for (int32_t s : pool_slots) n += s;
  return n;
}

int32_t EngineLayout::max_blocks() const { return (n_ctx + block_size - 1) / block_size; }

Result<std::unique_ptr<Engine>> Engine::start(Model& model, EngineOptions options) {
  ONEBIT_ASSIGN_OR_RETURN(EngineLayout layout, plan_engine_layout(options));
  RunnerOptions ro;
  ro.n_blocks = layout.n_blocks;
  ro.block_size = layout.block_size;
  ro.cache_type = layout.cache_type;
  const int32_t slots = layout.total_slots();
  // An embedding engine wants hidden rows (for kMean, one per token of a step) and no logits; a
  // drafting one logits for every drafted token.
  const bool embed = options.pooling != Pooling::kNone;
  const int32_t per_seq_out = options.drafter ? 1 + std::max(options.draft_max, 0) : 1;
  ro.limits = StepLimits{layout.batch_tokens, slots, layout.max_blocks(),
                         embed ? layout.batch_tokens : std::min(slots * per_seq_out, layout.batch_tokens), !embed,
                         options.drafter ? options.drafter->target_layers() : std::vector<int32_t>{}};
  ro.hidden = embed;
  ro.checkpoints = options.drafter ? std::max(options.draft_max, 0) : 0;  // recurrent models: rollback rows
  auto runner = make_model_runner(model, ro);
  if (!runner.ok()) return make_error("engine: " + runner.message());
  return start(std::move(*runner), std::move(options));
}

Result<std::unique_ptr<Engine>> Engine::start(std::unique_ptr<ModelRunner> runner, EngineOptions options) {
  ONEBIT_ASSIGN_OR_RETURN(EngineLayout layout, plan_engine_layout(options));
  if (options.drafter && (options.draft_max < 1 || options.draft_max > 64)) {
    return make_error("engine: draft length " + std::to_string(options.draft_max) + "; allowed 1..64 (--mtp-max)");
  }
  if (options.drafter && runner->state_rows() > 0 && runner->checkpoint_row(0, options.draft_max - 1) < 0) {
    return make_error("engine: the model has recurrent layers and the runner keeps no checkpoint rows for drafts of " +
                      std::to_string(options.draft_max) + " tokens (internal: RunnerOptions::checkpoints)");
  }
  if (options.pooling != Pooling::kNone) options.fair_prefill = false;  // nothing decodes
  if (options.drafter) {
    DrafterLayout dl;
    dl.n_blocks = layout.n_blocks;
    dl.block_size = layout.block_size;
    dl.max_blocks = layout.max_blocks();
    dl.max_seqs = layout.pool_slots[0];
    dl.max_tokens = layout.batch_tokens;
    dl.max_draft = options.draft_max;
    dl.cache_type = layout.cache_type;
    if (Status st = options.drafter->start(dl); !st.ok()) return make_error("engine: drafter: " + st.message());
  }
  std::unique_ptr<Engine> engine(new Engine(std::move(runner), std::move(options), std::move(layout)));
  if (engine->options_.is_end) {
    for (TokenId id = 0; id < engine->runner_->vocab_size(); ++id) {
      if (engine->options_.is_end(id)) engine->end_tokens_.push_back(id);
    }
  }
  engine->publish();
  engine->worker_ = std::thread([e = engine.get()] { e->worker_loop(); });
  return engine;
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  for (auto& live : incoming_) live->handle->finish(FinishReason::kCancelled, {});
  while (!live_.empty()) finish(*live_.begin()->second, FinishReason::kCancelled);
  if (const char* e = std::getenv("ONEBIT_ENGINE_STATS"); e != nullptr && std::string(e) == "1" && times_.steps > 0) {
    const TurnTimes& t = times_;
    const double per = 1.0 / double(t.steps);
    std::fprintf(stderr,
                 "engine: %lld steps of %.2f tokens giving %.2f; per step %.3f ms: propose %.3f (observe %.3f), "
                 "model step %.3f, sample and observe after %.3f\n",
                 (long long)t.steps, double(t.tokens) * per, double(t.given) * per, t.turn_ms * per,
                 t.propose_ms * per, t.observe_ms * per, t.run_ms * per, t.after_ms * per);
  }
}

Status Engine::check(const SequenceRequest& request) const {
  if (request.prompt.empty()) return make_error("the prompt has no tokens");
  if (request.n_predict < 1) return make_error("n_predict is " + std::to_string(request.n_predict) + "; allowed >= 1");
  const int32_t n_new = options_.pooling == Pooling::kNone ? request.n_predict : 0;  // embeddings: the prompt only
  const int64_t needed = static_cast<int64_t>(request.prompt.size()) + n_new;
  if (needed > layout_.n_ctx) {
    return make_error("prompt (" + std::to_string(request.prompt.size()) + " tokens) + " +
                      std::to_string(n_new) + " new tokens exceed the context of " +
                      std::to_string(layout_.n_ctx));
  }
  for (TokenId id : request.prompt) {
    if (id < 0 || id >= runner_->vocab_size()) {
      return make_error("token id " + std::to_string(id) + " is outside the vocabulary 0.." +
                        std::to_string(runner_->vocab_size() - 1));
    }
  }
  if (request.pool < 0 || request.pool >= static_cast<int32_t>(layout_.pool_slots.size())) {
    return make_error("slot pool " + std::to_string(request.pool) + " does not exist");
  }
  return ok_status();
}

Result<std::shared_ptr<SequenceHandle>> Engine::submit(SequenceRequest request) {
  std::vector<SequenceRequest> one;
  one.push_back(std::move(request));
  ONEBIT_ASSIGN_OR_RETURN(auto handles, submit_all(std::move(one)));
  return handles[0];
}

Result<std::vector<std::shared_ptr<SequenceHandle>>> Engine::submit_all(std::vector<SequenceRequest> requests) {
  if (requests.empty()) return make_error("no sequences to run");
  for (size_t i = 0; i < requests.size(); ++i) {
    ONEBIT_TRY(check(requests[i]));
    if (requests[i].after >= static_cast<int32_t>(i)) return make_error("a sequence can only wait for an earlier one");
  }
  std::vector<std::unique_ptr<Live>> lives;
  std::vector<std::shared_ptr<SequenceHandle>> handles;
  auto signal = std::make_shared<HandleSignal>();
  for (size_t i = 0; i < requests.size(); ++i) {
    auto live = std::make_unique<Live>();
    live->handle = std::make_shared<SequenceHandle>(signal);
    live->queued_ms = now_ms();
    handles.push_back(live->handle);
    lives.push_back(std::move(live));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborting_) return make_error(abort_message_);
    // Those that a free slot will take at once do not wait.
    const size_t total = size_t(layout_.total_slots());
    const size_t free_slots = total - std::min(total, published_.n_running);
    const size_t waiting = incoming_.size() + published_.n_queued + requests.size() - 1;
    if (waiting >= options_.max_queue + free_slots) {
      return make_error("the queue is full (" + std::to_string(waiting - std::min(waiting, free_slots)) +
                        " waiting); retry later");
    }
    const int64_t first_id = next_id_;
    for (size_t i = 0; i < requests.size(); ++i) {
      Live& live = *lives[i];
      SequenceRequest& request = requests[i];
      live.seq.id = next_id_++;
      live.seq.pool = request.pool;
      live.seq.tokens = std::move(request.prompt);
      live.seq.n_prompt = static_cast<int32_t>(live.seq.tokens.size());
      live.seq.cache_prompt = request.cache_prompt;
      live.seq.every_row = options_.pooling == Pooling::kMean || options_.pooling == Pooling::kCls;
      if (request.after >= 0) live.leader = first_id + request.after;
      live.request = std::move(request);
      incoming_.push_back(std::move(lives[i]));
    }
  }
  cv_.notify_all();
  return handles;
}

EngineState Engine::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineState s = published_;
  s.n_queued += incoming_.size();
  return s;
}

void Engine::publish() {
  EngineState s;
  s.n_queued = scheduler_.waiting().size() + held_.size();
  s.n_running = scheduler_.running().size();
  for (const auto& [id, live] : live_) {
    const Sequence& q = live->seq;
    const char* st = q.status == SequenceStatus::kWaiting ? "waiting" : q.n_pending() > 1 ? "prefill" : "decode";
    s.sequences.push_back({q.id, q.pool, st, static_cast<int32_t>(q.tokens.size()), q.n_prompt, q.n_computed, q.n_cached});
  }
  s.blocks_free = blocks_.n_free();
  s.blocks_used = blocks_.n_blocks() - blocks_.n_free();
  s.blocks_cached = blocks_.n_cached_free();
  const SchedulerStats& st = scheduler_.stats();
  s.prefix_hit_tokens = st.prefix_hit_tokens;
  s.preemptions = st.preemptions;
  s.steps = st.steps;
  s.step_tokens = st.step_tokens;
  s.draft_verdicts_paid = governor_.verdicts_paid();
  s.draft_verdicts_failed = governor_.verdicts_failed();
  s.draft_retired = retired_;
  std::lock_guard<std::mutex> lock(mu_);
  s.last_step_tokens = published_.last_step_tokens;
  published_ = std::move(s);
}

void Engine::abort_all(std::string message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborting_ = true;
    abort_message_ = message.empty() ? "the server is shutting down" : std::move(message);
  }
  cv_.notify_all();
}

void Engine::worker_loop() {
  for (;;) {
    std::string abort;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !incoming_.empty() || !live_.empty(); });
      if (stopping_) return;
      while (!incoming_.empty()) {
        std::unique_ptr<Live> live = std::move(incoming_.front());
        incoming_.pop_front();
        live->sampler = std::make_unique<Sampler>(live->request.sampler);
        const int32_t asked = live->request.draft_max;
        live->draft_len = !options_.drafter || live->request.pool != 0 ? 0
                          : asked >= 0 ? std::min(asked, options_.draft_max) : options_.draft_max;
        live->stats.n_prompt_tokens = live->seq.n_prompt;
        Sequence* seq = &live->seq;
        if (live->leader >= 0) held_.push_back(live.get());
        else scheduler_.add(seq);
        live_.emplace(seq->id, std::move(live));
        ++published_.n_queued;  // still counted by submit's queue limit until the next publish
      }
      if (aborting_) abort = abort_message_;
    }
    if (!abort.empty()) {
      while (!live_.empty()) finish(*live_.begin()->second, FinishReason::kAborted, abort);
      continue;
    }
    step();
  }
}

void Engine::finish(Live& live, FinishReason reason, const std::string& error) {
  const double now = now_ms();
  if (live.started_ms == 0.0) {
    live.stats.queue_ms = now - live.queued_ms;
  } else if (live.decode_started_ms == 0.0) {
    live.stats.prompt_ms = now - live.started_ms;
  } else {
    live.stats.decode_ms = now - live.decode_started_ms;
  }
  live.stats.n_cached_tokens = live.seq.n_cached;
  live.stats.n_generated_tokens = live.n_generated;
  scheduler_.remove(&live.seq);
  if (options_.drafter && live.draft_len > 0) options_.drafter->forget(live.seq.id);
  keep_rows_buffer(live.seen_rows);
  held_.erase(std::remove(held_.begin(), held_.end(), &live), held_.end());
  auto handle = std::move(live.handle);
  const SequenceStats stats = live.stats;
  live_.erase(live.seq.id);  // `live` is gone from here on
  publish();                 // the owner hears of the end after the state shows it
  handle->finish(reason, stats, error);
}

void Engine::release_held() {
  for (auto it = held_.begin(); it != held_.end();) {
    const auto leader = live_.find((*it)->leader);
    if (leader == live_.end() || leader->second->seq.n_computed >= leader->second->seq.n_prompt) {
      scheduler_.add(&(*it)->seq);
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
}

int32_t Engine::prefill_cap() const {
  if (!options_.fair_prefill) return INT32_MAX;
  const double cost = prefill_token_ms_ > 0.0 ? prefill_token_ms_ : token_ms_;
  if (cost <= 0.0) return 64;  // until a step of several tokens is measured
  return std::max(1, static_cast<int32_t>(credit_ms_ / cost));
}

void StepCostFit::add(double tokens, double ms) {
  constexpr double kKeep = 0.97;  // about the last 30 steps count
  w_ = kKeep * w_ + 1.0;
  x_ = kKeep * x_ + tokens;
  y_ = kKeep * y_ + ms;
  xx_ = kKeep * xx_ + tokens * tokens;
  xy_ = kKeep * xy_ + tokens * ms;
}

bool StepCostFit::fit(double& t0, double& per_token) const {
  if (w_ < 4.0) return false;
  const double mx = x_ / w_, my = y_ / w_;
  const double var = xx_ / w_ - mx * mx;
  if (var < 0.02) return false;
  per_token = std::max(0.0, (xy_ / w_ - mx * my) / var);
  t0 = std::max(0.0, my - per_token * mx);
  return true;
}

int32_t worthwhile_draft(double acceptance, int32_t max_len, double t0, double per_token, int32_t n_decoding,
                         DrafterCosts costs) {
  if (n_decoding < 1) n_decoding = 1;
  const double tau = (t0 + per_token * n_decoding) / n_decoding;  // a plain step's time per token
  const double gain = tau - costs.observe_ms, cost = per_token + costs.propose_ms;
  int32_t k = 0;
  double net = -costs.observe_ms - costs.propose_fixed_ms;  // the step's own token is observed too
  for (double p = acceptance; k < max_len && p * gain > cost; p *= acceptance) {
    ++k;
    net += p * gain - cost;
  }
  return net > 0.0 ? k : 0;
}

void Engine::learn_timing(const StepPlan& plan, double step_ms) {
  auto ema = [](double& avg, double x) { avg = avg <= 0.0 ? x : 0.8 * avg + 0.2 * x; };
  const int32_t n_prefill = plan.n_tokens - plan.n_decode - plan.n_draft;
  if (plan.n_decode > 0 && n_prefill == 0) decode_cost_.add(plan.n_tokens, step_ms);
  if (plan.n_decode > 0 && n_prefill == 0 && plan.n_draft == 0) ema(decode_step_ms_, step_ms);
  if (plan.n_tokens >= 8) ema(token_ms_, step_ms / plan.n_tokens);
  if (plan.n_decode == 0) {  // nobody decodes: nothing to protect
    credit_ms_ = kPrefillCreditMs;
    return;
  }
  // What a prompt token costs beside decoding (its attention grows with its position); measured on
  // mixed steps, and only estimated here, so noise in one step's time is not carried over.
  if (decode_step_ms_ > 0.0 && n_prefill >= 4) ema(prefill_token_ms_, std::max(0.0, step_ms - decode_step_ms_) / n_prefill);
  const double cost = prefill_token_ms_ > 0.0 ? prefill_token_ms_ : token_ms_;
  const double decode_ms = decode_step_ms_ > 0.0 ? decode_step_ms_ : step_ms;
  credit_ms_ = std::clamp(credit_ms_ + kPrefillShare * decode_ms - n_prefill * cost, 0.0, kPrefillCreditMs);
}

bool Engine::greedy_ids(const Live& live) {
  return live.sampler && live.sampler->plain_greedy() && !live.request.constraint;
}

void Engine::build_batch(const StepPlan& plan) {
  StepBatch& b = batch_;
  b.clear();
  const int32_t bs = layout_.block_size;
  int32_t widest = 1;
  for (const ScheduledRun& r : plan.runs) widest = std::max(widest, static_cast<int32_t>(r.seq->block_table.size()));
  b.max_blocks = StepBatch::table_width(widest, layout_.max_blocks());
  bool any_ids = false;
  for (size_t s = 0; s < plan.runs.size(); ++s) {
    const ScheduledRun& r = plan.runs[s];
    const std::vector<int32_t>& table = r.seq->block_table;
    for (int32_t i = 0; i < r.n; ++i) {
      const int32_t pos = r.first + i;
      b.tokens.push_back(r.seq->tokens[pos]);
      b.positions.push_back(pos);
      b.slots.push_back(table[pos / bs] * bs + pos % bs);
      b.seq_ids.push_back(static_cast<int32_t>(s));
    }
    if (options_.pooling != Pooling::kNone) {
      embedding_positions(options_.pooling, r, positions_);
      for (int32_t pos : positions_) b.out_rows.push_back(static_cast<int32_t>(b.tokens.size()) - r.n + pos - r.first);
    } else {
      for (int32_t k = r.n_logits; k > 0; --k) b.out_rows.push_back(static_cast<int32_t>(b.tokens.size()) - k);
      // Rows only a plain greedy choice reads come back as their argmax id, not a vocabulary of
      // logits (computed where the logits are: on a GPU, no logits copy).
      const bool ids_only = r.n_logits > 0 && argmax_rows_ && greedy_ids(*live_.at(r.seq->id));
      any_ids |= ids_only;
      b.argmax_out.insert(b.argmax_out.end(), size_t(r.n_logits), uint8_t(ids_only));
    }
    b.block_tables.insert(b.block_tables.end(), table.begin(), table.end());
    b.block_tables.resize(size_t(s + 1) * b.max_blocks, -1);
    if (r.seq->state_row >= 0) b.state_rows.push_back(r.seq->state_row);
  }
  if (!any_ids) b.argmax_out.clear();
  // Recurrent models: a drafted run keeps the state after each of its rows but the last (the
  // verified one of them is restored in sample_and_stream when the draft's rest is rejected).
  if (runner_->state_rows() == 0 || plan.n_draft == 0) return;
  b.ckpt_rows.assign(b.tokens.size(), -1);
  size_t row = 0;
  for (const ScheduledRun& r : plan.runs) {
    row += size_t(r.n);
    for (int32_t i = 0; i + 1 < r.n_logits && r.seq->state_row >= 0; ++i) {
      b.ckpt_rows[row - size_t(r.n_logits) + size_t(i)] = runner_->checkpoint_row(r.seq->state_row, i);
    }
  }
}

void Engine::step() {
  // Cancelled sequences leave before the step is built.
  for (auto it = live_.begin(); it != live_.end();) {
    Live& live = *(it++)->second;
    if (live.handle->cancelled()) finish(live, FinishReason::kCancelled);
  }
  release_held();
  const double turn_start = now_ms();  // the drafter's work counts in what drafting costs
  propose_drafts();
  const double proposed = now_ms();
  StepPlan plan = scheduler_.schedule(prefill_cap());
  if (plan.empty()) {
    publish();
    return;
  }
  const double t0 = now_ms();
  for (const ScheduledRun& r : plan.runs) {
    Live& live = *live_.at(r.seq->id);
    if (live.started_ms == 0.0) {
      live.started_ms = t0;
      live.stats.queue_ms = t0 - live.queued_ms;
    }
  }
  Status st = ok_status();
  try {
    build_batch(plan);
    runner_->copy_blocks(plan.copies);
    if (options_.drafter) options_.drafter->copy_blocks(plan.copies);
    st = runner_->run(batch_, out_);
  } catch (const std::exception& e) {
    st = make_error(std::string("internal error: ") + e.what());
  } catch (...) {
    st = make_error("internal error");
  }
  if (!st.ok()) {
    // What the step wrote is forgotten with the blocks of its sequences; each of them fails alone.
    for (const ScheduledRun& r : plan.runs) finish(*live_.at(r.seq->id), FinishReason::kError, st.message());
    publish();
    return;
  }
  scheduler_.commit(plan);
  const double now = now_ms();
  learn_timing(plan, now - t0);
  if (options_.pooling != Pooling::kNone) {
    pool_embeddings(plan);
  } else {
    sample_and_stream(plan, now);
    if (options_.drafter) collect_observations(plan);
  }
  const double done = now_ms();
  times_.steps += 1;
  times_.tokens += plan.n_tokens;
  times_.given += step_tokens_;
  times_.propose_ms += proposed - turn_start;
  times_.run_ms += now - t0;
  times_.after_ms += done - now;
  times_.turn_ms += done - turn_start;
  // Decode-only turns teach the governor what drafting gives against not drafting.
  if (options_.drafter && options_.draft_when_it_pays && plan.n_decode > 0 && plan.n_tokens == plan.n_decode + plan.n_draft) {
    governor_.record(plan.n_decode, plan.n_draft > 0, done - turn_start, step_tokens_);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    published_.last_step_tokens = plan.n_tokens;
  }
  publish();
}

void Engine::propose_drafts() {
  if (!options_.drafter) return;
  constexpr int32_t kMaxUnseen = 512;    // positions kept for the drafter at most before it sees them
  int32_t n_decoding = 0;
  for (Sequence* seq : scheduler_.running()) n_decoding += seq->n_pending() == 1;
  double t0 = 0.0, per_token = 0.0;
  const bool fitted = options_.draft_when_it_pays && decode_cost_.fit(t0, per_token);
  // What drafting gave lately at this many decoding sequences may forbid it (draft_governor.h).
  const bool allowed = !options_.draft_when_it_pays || governor_.allows(n_decoding);
  // Who drafts how much; and who the drafter must first be shown (the drafting ones, and any
  // sequence whose unseen positions grew too many).
  std::vector<Sequence*> who;
  std::vector<Live*> show;
  asks_.clear();
  for (Sequence* seq : scheduler_.running()) {
    Live& live = *live_.at(seq->id);
    if (live.draft_len == 0) continue;
    const bool decoding = seq->n_pending() == 1 && seq->n_draft == 0;
    // Until decode steps of several sizes were timed, draft 1, 2, .. --mtp-max tokens in turn
    // (that is how they get timed); the bookkeeping's tests draft at full length.
    int32_t len = !allowed ? 0
                  : !options_.draft_when_it_pays ? live.draft_len
                  : fitted ? worthwhile_draft(live.draft_hits / live.draft_trials, live.draft_len, t0, per_token,
                                              n_decoding, drafter_costs_)
                           : 1 + static_cast<int32_t>(draft_explore_ % live.draft_len);
    if (decoding && len > 0) live.probe_every = 16;
    // Keep learning the acceptance, unless drafting could not pay even if every draft were kept.
    const bool could_pay = !fitted || worthwhile_draft(1.0, live.draft_len, t0, per_token, n_decoding, drafter_costs_) > 0;
    if (decoding && len == 0 && allowed && could_pay && ++live.plain_steps >= live.probe_every) {
      len = 1;
      live.probe_every = std::min(2 * live.probe_every, 256);
    }
    // Room for the draft and the token after it, within n_predict and the context.
    const int64_t room = std::min<int64_t>(live.request.n_predict - live.n_generated - 1,
                                           int64_t(layout_.n_ctx) - int64_t(seq->tokens.size()) - 1);
    const int32_t k = decoding ? static_cast<int32_t>(std::min<int64_t>(len, room)) : 0;
    // A sequence that decoded kMaxUnseen tokens without a draft (drafting does not pay, or may not)
    // stops drafting for good rather than catch the drafter up on them.
    if (decoding && k <= 0 && ++live.undrafted > kMaxUnseen) {
      retire_drafting(live);
      continue;
    }
    if ((k > 0 || live.seen_n > kMaxUnseen) && live.seen_n > 0) show.push_back(&live);
    if (k <= 0) continue;
    live.plain_steps = 0;
    live.undrafted = 0;
    who.push_back(seq);
    asks_.push_back(DraftAsk{DraftSequence{seq->id, seq->tokens, seq->block_table, seq->n_computed}, k, nullptr});
  }
  show_unseen(show);
  if (asks_.empty()) return;
  ++draft_explore_;
  if (drafts_.size() < asks_.size()) drafts_.resize(asks_.size());
  int64_t wanted = 0;
  for (size_t i = 0; i < asks_.size(); ++i) {
    drafts_[i].clear();
    asks_[i].out = &drafts_[i];
    wanted += asks_[i].max;
  }
  const double start = now_ms();
  auto fade = [](double& avg, double x) { avg = avg <= 0.0 ? x : 0.9 * avg + 0.1 * x; };
  options_.drafter->propose(asks_);
  const double n_asks = double(asks_.size());
  propose_cost_.add(double(wanted) / n_asks, (now_ms() - start) / n_asks);
  if (!propose_cost_.fit(drafter_costs_.propose_fixed_ms, drafter_costs_.propose_ms)) {
    drafter_costs_.propose_fixed_ms = 0.0;
    fade(drafter_costs_.propose_ms, (now_ms() - start) / double(wanted));
  }
  for (size_t i = 0; i < who.size(); ++i) {
    Sequence* seq = who[i];
    std::vector<TokenId>& draft = drafts_[i];
    if (draft.size() > size_t(asks_[i].max)) draft.resize(size_t(asks_[i].max));
    bool valid = true;
    for (TokenId t : draft) valid = valid && t >= 0 && t < runner_->vocab_size();
    if (!valid) continue;  // a drafter's bug must not reach the model
    seq->tokens.insert(seq->tokens.end(), draft.begin(), draft.end());
    seq->n_draft = static_cast<int32_t>(draft.size());
  }
}

void Engine::retire_drafting(Live& live) {
  ++retired_;
  options_.drafter->forget(live.seq.id);
  live.draft_len = 0;
  live.seen_n = 0;
  keep_rows_buffer(live.seen_rows);
}

void Engine::keep_rows_buffer(std::vector<float>& rows) {
  rows.clear();
  if (rows.capacity() > 0 && spare_rows_.size() < size_t(layout_.total_slots())) spare_rows_.push_back(std::move(rows));
  rows = {};
}

// In calls of at most a step's tokens (what the drafter sized its buffers for), a long range in
// pieces, in order; the drafter's time per position shown feeds the cost model.
void Engine::show_unseen(const std::vector<Live*>& show) {
  if (show.empty()) return;
  const double start = now_ms();
  int64_t positions = 0, in_call = 0;
  observations_.clear();
  auto call = [&] {
    if (!observations_.empty()) options_.drafter->observe(observations_);
    observations_.clear();
    in_call = 0;
  };
  for (Live* live : show) {
    const Sequence& seq = live->seq;
    const size_t width = live->seen_rows.size() / size_t(live->seen_n);
    for (int32_t done = 0; done < live->seen_n;) {
      if (in_call == layout_.batch_tokens) call();
      const int32_t n = static_cast<int32_t>(std::min<int64_t>(live->seen_n - done, layout_.batch_tokens - in_call));
      const std::span<const float> rows = std::span<const float>(live->seen_rows).subspan(size_t(done) * width, size_t(n) * width);
      observations_.push_back(DraftObservation{DraftSequence{seq.id, seq.tokens, seq.block_table, seq.n_computed},
                                               live->seen_first + done, n, rows});
      done += n;
      in_call += n;
    }
    positions += live->seen_n;
    live->seen_n = 0;
  }
  call();
  for (Live* live : show) live->seen_rows.clear();  // after the calls: their spans point into these
  const double elapsed = now_ms() - start;
  times_.observe_ms += elapsed;
  const double ms = elapsed / double(positions);
  drafter_costs_.observe_ms = drafter_costs_.observe_ms <= 0.0 ? ms : 0.9 * drafter_costs_.observe_ms + 0.1 * ms;
}

void Engine::collect_observations(const StepPlan& plan) {
  const size_t n_tokens = static_cast<size_t>(batch_.n_tokens());
  const size_t width = n_tokens > 0 ? out_.captured.size() / n_tokens : 0;
  size_t row = 0;
  for (size_t i = 0; i < plan.runs.size(); ++i) {
    const ScheduledRun& r = plan.runs[i];
    const size_t first_row = row;
    row += static_cast<size_t>(r.n);
    if (kept_[i] <= 0) continue;
    Live& live = *live_.at(r.seq->id);  // kept_ >= 0: the sequence lives
    if (live.draft_len == 0) continue;  // not one that drafts (the overflow pool)
    // A recomputation (after a preemption) starts at or before the unseen end: keep what is before it.
    const int32_t end = live.seen_first + live.seen_n;
    if (live.seen_n == 0 || r.first < live.seen_first || r.first > end) {
      live.seen_first = r.first;
      live.seen_n = 0;
    } else {
      live.seen_n = r.first - live.seen_first;
    }
    if (live.seen_rows.capacity() == 0 && !spare_rows_.empty()) {
      live.seen_rows = std::move(spare_rows_.back());
      spare_rows_.pop_back();
    }
    live.seen_rows.resize(size_t(live.seen_n) * width);
    live.seen_rows.insert(live.seen_rows.end(), out_.captured.begin() + ptrdiff_t(first_row * width),
                          out_.captured.begin() + ptrdiff_t((first_row + size_t(kept_[i])) * width));
    live.seen_n += kept_[i];
  }
}

// Samples every run that reached its last token. A run with a draft is verified: row i's token
// is sampled with draft[i] as the proposal (sampler.h); while it equals the draft the next row
// counts, and the first token that differs (or the one after the whole draft) ends the run. The
// rejected draft's K/V are given back.
void Engine::sample_and_stream(const StepPlan& plan, double now) {
  const size_t vocab = static_cast<size_t>(runner_->vocab_size());
  size_t out_row = 0;
  kept_.assign(plan.runs.size(), 0);
  step_tokens_ = 0;
  for (size_t run = 0; run < plan.runs.size(); ++run) {
    const ScheduledRun& r = plan.runs[run];
    kept_[run] = r.n;
    if (r.n_logits == 0) continue;
    const size_t first_row = out_row;
    out_row += static_cast<size_t>(r.n_logits);
    Live& live = *live_.at(r.seq->id);
    Sequence& seq = live.seq;
    if (live.decode_started_ms == 0.0) {
      live.stats.prompt_ms = now - live.started_ms;
      live.decode_started_ms = now;
    }
    const int32_t n_draft = r.n_logits - 1;
    const int32_t last = r.first + r.n - r.n_logits;  // the sampled token whose logits are row 0
    const bool want_logprobs = live.request.sampler.n_logprobs >= 0;
    live.stats.n_draft_tokens += n_draft;
    live.stats.n_draft_steps += n_draft > 0;
    int32_t accepted = 0;
    bool ended = false;
    for (int32_t i = 0; i <= n_draft && !ended; ++i) {
      // A row that came back as its argmax id (build_batch: plain greedy, no grammar). (A runner
      // that does not hand back ids, as the tests' fake ones, fills every logits row.) Masking
      // end tokens (ignore_eos) only lowers them, so it changes the greedy token only when that
      // is an end token: then the row's logits after all.
      const size_t o = first_row + size_t(i);
      bool by_id = !out_.argmax.empty() && batch_.argmax_out[o] != 0;
      float* row = by_id ? nullptr : out_.logits.data() + o * vocab;
      if (by_id && live.request.ignore_eos && out_.argmax[o] >= 0 && options_.is_end && options_.is_end(out_.argmax[o])) {
        row_again_.resize(vocab);
        runner_->logits_row(int32_t(o), row_again_);
        row = row_again_.data();
        by_id = false;
      }
      if (live.request.ignore_eos && !by_id) {
        for (TokenId id : end_tokens_) row[id] = -std::numeric_limits<float>::infinity();
      }
      // A constraint masks each row as it stands after the tokens accepted before it, so a draft
      // that leaves the grammar is rejected like any other mismatch.
      TokenConstraint* constraint = live.request.constraint.get();  // (none on a row by id)
      // Tokens that may still come, this one included: max_tokens and the context both end it.
      const int32_t budget = std::min(live.request.n_predict - live.n_generated, layout_.n_ctx - (last + 1 + i) + 1);
      if (constraint && constraint->mask(std::span<float>(row, vocab), budget) == 0) {
        finish(live, FinishReason::kError,
               "the grammar allows no token of this model's vocabulary here (the text so far cannot be continued)");
        ended = true;
        break;
      }
      const TokenId draft = i < n_draft ? seq.tokens[size_t(last + 1 + i)] : -1;
      const std::span<const TokenId> context(seq.tokens.data(), size_t(last + 1 + i));
      const TokenId token = by_id ? out_.argmax[o]
                                  : live.sampler->sample(std::span<float>(row, vocab), context, size_t(seq.n_prompt),
                                                         want_logprobs ? &live.logprobs : nullptr, draft);
      if (token < 0) {
        finish(live, FinishReason::kError,
               constraint ? "no token can be sampled: logit_bias bans every token the grammar allows"
                          : "no token can be sampled: logit_bias bans every token");
        ended = true;
        break;
      }
      if (constraint && !constraint->accept(token)) {
        finish(live, FinishReason::kError, "internal error: the sampler chose token " + std::to_string(token) +
                                               ", which the grammar's mask excluded");
        ended = true;
        break;
      }
      kept_[run] = r.n - n_draft + i;  // the row's position and those before it are verified
      ++live.n_generated;
      ++step_tokens_;
      live.stats.n_draft_accepted += token == draft;
      live.handle->push_token(token, want_logprobs ? &live.logprobs : nullptr);
      if ((!live.request.ignore_eos && options_.is_end && options_.is_end(token)) ||
          (constraint && constraint->finished())) {
        finish(live, FinishReason::kEnd);
        ended = true;
      } else if (live.n_generated >= live.request.n_predict || last + 1 + i >= layout_.n_ctx) {
        finish(live, FinishReason::kLength);
        ended = true;
      } else if (token == draft) {
        ++accepted;
      } else {
        // The draft's rest is rejected: keep what was verified, then the new token.
        const int32_t keep = last + 1 + i;
        seq.tokens.resize(size_t(keep));
        seq.tokens.push_back(token);
        seq.n_draft = 0;
        if (n_draft > 0) scheduler_.rollback(&seq, keep);
        // a recurrent state ran through the whole draft: back to its checkpoint after row i
        if (i < n_draft && seq.state_row >= 0) runner_->copy_state(runner_->checkpoint_row(seq.state_row, i), seq.state_row);
        break;
      }
    }
    if (ended) {
      kept_[run] = -1;
      continue;
    }
    // The acceptance estimate: each verified position is a trial (a draft stops at its first
    // rejection), older ones fading.
    constexpr double kKeep = 0.9;
    if (n_draft > 0) {
      live.draft_hits = kKeep * live.draft_hits + accepted;
      live.draft_trials = kKeep * live.draft_trials + accepted + (accepted < n_draft ? 1 : 0);
    }
  }
}

void Engine::pool_embeddings(const StepPlan& plan) {
  const size_t n_out = batch_.out_rows.size();
  const size_t width = n_out > 0 ? out_.hidden.size() / n_out : 0;
  if (n_out > 0 && (width == 0 || width * n_out != out_.hidden.size())) {
    const std::string error = "internal error: the step gave " + std::to_string(out_.hidden.size()) +
                              " hidden values for " + std::to_string(n_out) + " rows";
    for (const ScheduledRun& r : plan.runs) finish(*live_.at(r.seq->id), FinishReason::kError, error);
    return;
  }
  size_t row = 0;
  for (const ScheduledRun& r : plan.runs) {
    Live& live = *live_.at(r.seq->id);
    embedding_positions(options_.pooling, r, positions_);
    for (int32_t pos : positions_) {
      const float* h = out_.hidden.data() + (row++) * width;
      // kMean and kCls take each position once: a run again after a preemption is pooled already.
      if (options_.pooling != Pooling::kLast && pos != live.n_pooled) continue;
      if (live.pooled.empty()) live.pooled.assign(width, 0.0);
      for (size_t k = 0; k < width; ++k) live.pooled[k] += h[k];
      ++live.n_pooled;
    }
    if (!r.logits) continue;  // more of the prompt to run
    const int32_t want = options_.pooling == Pooling::kMean ? live.seq.n_prompt : 1;
    if (live.n_pooled != want) {
      finish(live, FinishReason::kError, "internal error: pooled " + std::to_string(live.n_pooled) + " rows of " +
                                             std::to_string(want));
      continue;
    }
    // The mean (or the one row), L2-normalised as llama.cpp's common_embd_normalize: a zero vector stays zero.
    double sq = 0.0;
    for (double& x : live.pooled) {
      x /= live.n_pooled;
      sq += x * x;
    }
    const double inv = sq > 0.0 ? 1.0 / std::sqrt(sq) : 0.0;
    std::vector<float> v(live.pooled.size());
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(live.pooled[k] * inv);
    live.handle->set_embedding(std::move(v));
    finish(live, FinishReason::kEnd);
  }
}

}  // namespace onebit
