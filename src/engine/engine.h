// The serving engine: the thin loop over the serving core. Clients submit sequences from any
// thread; one worker thread owns the Scheduler (continuous batching, chunked prefill, preemption),
// the BlockManager (paged K/V, the prefix cache shared by all requests) and the ModelRunner, and
// repeats: schedule a step, run it, sample the sequences whose run reached their last token,
// stream the tokens to their handles. `1bit run` and the server are both its clients.
// Knows tokens only: no text, no HTTP.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "engine/block_manager.h"
#include "engine/draft_governor.h"
#include "engine/drafter.h"
#include "grammar/constraint.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "model/model.h"

namespace onebit {

// kAborted: the server stopped it (shutdown); the error says why.
enum class FinishReason { kNone, kEnd, kLength, kCancelled, kError, kAborted };

// What a client asks the engine to run.
struct SequenceRequest {
  std::vector<TokenId> prompt;  // at least one token
  int32_t n_predict = 128;      // new tokens at most (>= 1)
  SamplerParams sampler;        // validated by the caller
  bool cache_prompt = true;     // reuse cached K/V of the longest cached prefix
  int32_t pool = 0;             // slot pool: 0 primary, 1 overflow (--adaptive)
  bool ignore_eos = false;      // end-of-generation tokens are never sampled (as llama-server's
                                // ignore_eos): only n_predict or the context end the sequence
  int32_t draft_max = -1;       // drafted tokens per step at most (0: never drafts); -1: the
                                // engine's draft_max
  int32_t after = -1;           // submit_all: the index of an earlier request of the same call
                                // whose prompt must be computed before this one is admitted, so
                                // this one takes that prompt from the prefix cache (n > 1)
  // A grammar the tokens must follow (one per request, never shared): its mask applies before
  // sampling (and to every verified draft position), and the reply ends when it is complete.
  std::shared_ptr<TokenConstraint> constraint = nullptr;
};

// Counts and times of one finished sequence.
struct SequenceStats {
  int32_t n_prompt_tokens = 0;
  int32_t n_cached_tokens = 0;     // prompt tokens whose K/V came from the prefix cache
  int32_t n_generated_tokens = 0;  // sampled tokens, an end token included
  double prompt_ms = 0.0;
  double decode_ms = 0.0;
  double queue_ms = 0.0;
  int32_t n_draft_tokens = 0;      // tokens a drafter proposed
  int32_t n_draft_accepted = 0;    // of those, kept by the verification
  int32_t n_draft_steps = 0;       // verification steps that carried a draft
};

// What the worker sends a sequence's owner: new tokens, then once the finish.
struct SequenceEvents {
  std::vector<TokenId> tokens;
  std::vector<SampledLogprobs> logprobs;  // [tokens] when the sampler was asked for them
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  std::string error;  // for kError
  SequenceStats stats;
  std::vector<float> embedding;  // [hidden] L2-normalised, with the finish of an embedding sequence
};

// Wakes the owner of several handles when any of them has news (submit_all gives one to all).
class HandleSignal {
 public:
  uint64_t count() const;
  void notify();
  // Waits up to timeout_ms for a notify after count() was `seen`.
  void wait(uint64_t seen, int timeout_ms);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t count_ = 0;
};

// The owner's side of one submitted sequence. Thread-safe.
class SequenceHandle {
 public:
  explicit SequenceHandle(std::shared_ptr<HandleSignal> signal = nullptr) : signal_(std::move(signal)) {}
  const std::shared_ptr<HandleSignal>& signal() const { return signal_; }
  // Waits up to timeout_ms for news; returns what arrived (tokens and/or the finish) and clears it.
  SequenceEvents wait(int timeout_ms);
  // Asks the worker to drop the sequence at its next step (a client left, a stop string matched).
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  // Worker side.
  void push_token(TokenId token, const SampledLogprobs* logprobs = nullptr);
  void finish(FinishReason reason, const SequenceStats& stats, std::string error = {});
  // An embedding sequence's vector, sent with its finish (call before finish()).
  void set_embedding(std::vector<float> embedding);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<HandleSignal> signal_;
  SequenceEvents pending_;
  std::atomic<bool> cancelled_{false};
};

struct EngineOptions {
  int32_t n_ctx = 2048;                   // positions per sequence at most
  std::vector<int32_t> pool_slots = {1};  // sequences running together, per pool (--parallel)
  int32_t batch_tokens = 0;               // tokens per step at most; 0 = kDefaultBatchTokens
  int32_t block_size = 16;                // positions per K/V block
  int64_t kv_tokens = 0;                  // K/V pool capacity in positions; 0 = n_ctx x slots
  GgmlType cache_type = GgmlType::kF16;   // K/V storage: F16 or F32
  bool fair_prefill = true;               // while streams decode, prompt work gets about as much
                                          // time as decoding (plus a credit for bursts), so decode
                                          // keeps at least about half its speed
  size_t max_queue = 1024;                // sequences waiting for a slot beyond this are refused (503);
                                          // as many as the HTTP server runs handlers at once
  std::function<bool(TokenId)> is_end;    // end-of-generation tokens
  std::shared_ptr<Drafter> drafter;       // speculative decoding of pool 0's sequences; null = off;
                                          // one engine's own (it keeps per-sequence state)
  int32_t draft_max = 3;                  // tokens drafted per step at most (--mtp-max)
  bool draft_when_it_pays = true;         // the cost model picks each draft's length; false:
                                          // always draft_max (tests of the bookkeeping)
  bool argmax_ids = true;                 // plain greedy rows come back as argmax ids, not logits
                                          // (Backend::argmax_rows); ONEBIT_ARGMAX_ROWS=0 also turns
                                          // it off, for comparisons
  // kLast, kMean or kCls: an embedding engine. Each sequence runs its prompt only (n_predict is
  // not used) and finishes (kEnd) with SequenceEvents::embedding: its final-normed hidden rows
  // pooled (the last token's, the mean over every prompt token, the first token's) and
  // L2-normalised. kMean and kCls need every token's row, so their sequences take no cached prefix.
  Pooling pooling = Pooling::kNone;
};

inline constexpr int32_t kDefaultBatchTokens = 512;

// The fixed sizes chosen at start (reported at startup and by /metrics).
struct EngineLayout {
  int32_t n_ctx = 0;
  int32_t block_size = 0;
  int32_t n_blocks = 0;
  int32_t batch_tokens = 0;
  std::vector<int32_t> pool_slots;
  GgmlType cache_type = GgmlType::kF16;
  int32_t total_slots() const;  // over all pools
  int32_t max_blocks() const;   // block table entries of one sequence at most (the context)
};

// One sequence in a snapshot.
struct SequenceState {
  int64_t id = 0;
  int32_t pool = 0;
  std::string state;         // "waiting", "prefill", "decode"
  int32_t n_tokens = 0;      // prompt + generated
  int32_t n_prompt = 0;
  int32_t n_computed = 0;    // tokens whose K/V are in blocks
  int32_t n_cached = 0;      // prompt tokens from the prefix cache
};

// A snapshot for /slots and /metrics, published after every step.
struct EngineState {
  size_t n_queued = 0;       // waiting for admission (incl. preempted)
  size_t n_running = 0;
  std::vector<SequenceState> sequences;
  int32_t blocks_used = 0, blocks_free = 0, blocks_cached = 0;  // cached: free but holding a prefix
  int64_t prefix_hit_tokens = 0;
  int64_t preemptions = 0;
  int64_t steps = 0;
  int64_t step_tokens = 0;   // over all steps
  int32_t last_step_tokens = 0;
  int64_t draft_verdicts_paid = 0;    // the draft governor's verdicts (draft_governor.h)
  int64_t draft_verdicts_failed = 0;
  int64_t draft_retired = 0;          // sequences that stopped drafting for good
};

// Sizes the K/V pool and step limits for `options` (pure): errors name the option to change.
Result<EngineLayout> plan_engine_layout(const EngineOptions& options);

// A least-squares line through recent decode steps' (tokens, milliseconds), older steps fading:
// a step costs about t0 + per_token * tokens.
class StepCostFit {
 public:
  void add(double tokens, double ms);
  // False until steps of different sizes were seen.
  bool fit(double& t0, double& per_token) const;

 private:
  double w_ = 0, x_ = 0, y_ = 0, xx_ = 0, xy_ = 0;
};

// What drafting costs one sequence besides the verified tokens, in milliseconds: the drafter's work
// per position shown to it (observe), and per proposal, fixed and per token proposed (measured by
// the engine).
struct DrafterCosts {
  double observe_ms = 0.0;
  double propose_ms = 0.0;        // per token
  double propose_fixed_ms = 0.0;  // per proposal (a DFlash block costs the same for 1 or 7 tokens)
};

// The draft length that pays for itself. With N sequences decoding, a plain step gives each a token
// for tau = (t0 + per_token N) / N; the i-th drafted token is kept with probability acceptance^i,
// saving tau, and costs per_token + propose_ms, and every kept token must also be observed. So k is
// the largest length (at most max_len) whose last token still gains, acceptance^k (tau - observe_ms)
// > per_token + propose_ms, and 0 when the whole draft does not gain more than its fixed costs (the
// proposal's, and observing the step's own token).
int32_t worthwhile_draft(double acceptance, int32_t max_len, double t0, double per_token, int32_t n_decoding,
                         DrafterCosts costs = {});

class Engine {
 public:
  // Allocates the K/V pool and step buffers on `model` (which must outlive the engine) and starts
  // the worker.
  static Result<std::unique_ptr<Engine>> start(Model& model, EngineOptions options);
  // The same over any runner (tests: a fake one). `runner` must fit plan_engine_layout(options).
  static Result<std::unique_ptr<Engine>> start(std::unique_ptr<ModelRunner> runner, EngineOptions options);
  ~Engine();  // stops the worker; queued and running sequences finish as kCancelled

  // Queues a sequence. Errors: an empty prompt, n_predict < 1, prompt + n_predict over n_ctx
  // (the message says so; callers check first for their own wording), a token id outside the
  // vocabulary, a pool that does not exist, the queue full.
  Result<std::shared_ptr<SequenceHandle>> submit(SequenceRequest request);
  // Queues several sequences at once (all or none, as one request's choices): the same checks,
  // and the queue limit counts them together.
  Result<std::vector<std::shared_ptr<SequenceHandle>>> submit_all(std::vector<SequenceRequest> requests);

  // Shutdown: every queued and running sequence ends as kAborted with `message` at the worker's
  // next turn, and later submissions are refused with it. Thread-safe.
  void abort_all(std::string message);

  int32_t n_ctx() const { return layout_.n_ctx; }
  const EngineLayout& layout() const { return layout_; }
  EngineState state() const;

 private:
  struct Live;
  Engine(std::unique_ptr<ModelRunner> runner, EngineOptions options, EngineLayout layout);
  void worker_loop();
  // One step: drop cancelled sequences, schedule, run, sample, finish; publishes the state.
  void step();
  void build_batch(const StepPlan& plan);
  // Whether `live`'s logits rows are read by nothing but a plain greedy choice (no bias,
  // penalties, log probabilities or grammar): they come back as argmax ids.
  static bool greedy_ids(const Live& live);
  void sample_and_stream(const StepPlan& plan, double now);
  // Embedding engines: adds the step's hidden rows to each run's pooled sum; finishes the runs
  // that reached their prompt's end.
  void pool_embeddings(const StepPlan& plan);
  void finish(Live& live, FinishReason reason, const std::string& error = {});
  int32_t prefill_cap() const;
  // Admits held sequences whose leader computed its prompt (or ended).
  void release_held();
  // Appends a draft to every decoding sequence that drafts (speculative decoding), first showing
  // the drafter what those sequences computed since it last saw them.
  void propose_drafts();
  // The sequence drafts no more: its drafter forgets it, its unseen rows are dropped.
  void retire_drafting(Live& live);
  // Empties `rows` and keeps its memory for the next sequence's unseen rows: a buffer of a few
  // MB grown afresh for every request (new pages, each faulted in) cost onebit-20m 7% of its
  // decode on this VM even while nothing drafted.
  void keep_rows_buffer(std::vector<float>& rows);
  // Shows the drafter the unseen positions of `show` (in calls of at most a step's tokens).
  void show_unseen(const std::vector<Live*>& show);
  // After a step: what each sequence that may draft computed and kept (kept_), with the captured
  // target rows, is added to what its drafter has yet to see (shown lazily: a sequence that does
  // not draft costs the drafter nothing).
  void collect_observations(const StepPlan& plan);
  Status check(const SequenceRequest& request) const;
  void learn_timing(const StepPlan& plan, double step_ms);
  void publish();

  std::unique_ptr<ModelRunner> runner_;
  EngineOptions options_;
  EngineLayout layout_;
  BlockManager blocks_;
  Scheduler scheduler_;
  std::map<int64_t, std::unique_ptr<Live>> live_;  // worker only
  std::vector<Live*> held_;                         // worker only: live, waiting for a leader
  StepBatch batch_;                                 // worker only: reused every step
  bool argmax_rows_ = true;  // EngineOptions::argmax_ids and not ONEBIT_ARGMAX_ROWS=0
  StepOutput out_;
  std::vector<float> row_again_;  // worker only: a logits row read again (sample_and_stream)
  std::vector<int32_t> positions_;   // worker only: embedding_positions of one run
  std::vector<int32_t> kept_;        // worker only: per run of the step, the positions it computed
                                     // and kept (a rejected draft's not), -1 when its sequence ended
  std::vector<DraftAsk> asks_;       // worker only: propose_drafts' asks and their drafts
  std::vector<std::vector<TokenId>> drafts_;
  std::vector<DraftObservation> observations_;
  std::vector<std::vector<float>> spare_rows_;  // ended sequences' seen_rows buffers (memory kept)
  DrafterCosts drafter_costs_;       // the drafter's measured work: observe_ms a fading average,
  StepCostFit propose_cost_;         // the propose costs a line through (tokens, ms) per proposal
  int64_t draft_explore_ = 0;        // until the step line is fitted: cycles the draft lengths
  std::vector<TokenId> end_tokens_;  // every id is_end accepts (for ignore_eos), found at start
  double decode_step_ms_ = 0.0;      // moving averages for prefill_cap (0 = not yet seen)
  double token_ms_ = 0.0;            // a step's time per token
  double prefill_token_ms_ = 0.0;    // a prompt token's time beside decoding
  double credit_ms_ = 0.0;           // prompt time allowed before it slows the decoding streams
  StepCostFit decode_cost_;          // decode steps' time against their tokens (drafting's cost)
  DraftGovernor governor_;           // whether drafting pays at each number of decoding sequences
  int32_t step_tokens_ = 0;          // tokens the last step gave (sample_and_stream)
  int64_t retired_ = 0;              // sequences retire_drafting stopped
  // Where the worker's steps spent their time (printed at exit with ONEBIT_ENGINE_STATS=1).
  struct TurnTimes {
    int64_t steps = 0, tokens = 0, given = 0;  // model steps, their tokens, tokens they gave
    double propose_ms = 0, observe_ms = 0, run_ms = 0, after_ms = 0, turn_ms = 0;
  } times_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Live>> incoming_;      // submitted, not yet seen by the worker
  EngineState published_;
  int64_t next_id_ = 0;
  bool stopping_ = false;
  bool aborting_ = false;
  std::string abort_message_;
  std::thread worker_;
};


}  // namespace onebit
