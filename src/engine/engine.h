// The serving engine: a request queue and one worker thread that owns the model and runs
// sequences through a scheduler over Model::forward. Each step admits waiting sequences into free
// slots (reusing the slot's cached K/V for the longest common token prefix), then runs one batch
// of every active sequence (a prefill or one decode token each) and samples. Continuous batching
// only widens the step (more slots, chunked prefill); the request/handle contract stays.
// Knows tokens only: no text, no HTTP.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "engine/sampler.h"
#include "model/model.h"

namespace onebit {

enum class FinishReason { kNone, kEnd, kLength, kCancelled, kError };

// What a client asks the engine to run.
struct SequenceRequest {
  std::vector<TokenId> prompt;  // at least one token
  int32_t n_predict = 128;      // new tokens at most (>= 1)
  SamplerParams sampler;        // validated by the caller
  bool cache_prompt = true;     // reuse the slot's K/V for the longest common prefix
  bool ignore_eos = false;      // end-of-generation tokens are never sampled (as llama-server's
                                // ignore_eos): only n_predict or the context end the sequence
};

// Counts and times of one finished sequence.
struct SequenceStats {
  int32_t n_prompt_tokens = 0;
  int32_t n_cached_tokens = 0;     // prompt tokens whose K/V came from the prefix cache
  int32_t n_generated_tokens = 0;  // sampled tokens, an end token included
  double prompt_ms = 0.0;
  double decode_ms = 0.0;
  double queue_ms = 0.0;
};

// What the worker sends a sequence's owner: new tokens, then once the finish.
struct SequenceEvents {
  std::vector<TokenId> tokens;
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  std::string error;  // for kError
  SequenceStats stats;
};

// The owner's side of one submitted sequence. Thread-safe.
class SequenceHandle {
 public:
  // Waits up to timeout_ms for news; returns what arrived (tokens and/or the finish) and clears it.
  SequenceEvents wait(int timeout_ms);
  // Asks the worker to drop the sequence at its next step (a client left, a stop string matched).
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  // Worker side.
  void push_token(TokenId token);
  void finish(FinishReason reason, const SequenceStats& stats, std::string error = {});

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  SequenceEvents pending_;
  std::atomic<bool> cancelled_{false};
};

struct EngineOptions {
  int32_t n_ctx = 2048;                 // positions per slot
  int32_t n_slots = 1;                  // sequences run together
  size_t max_queue = 64;                // waiting sequences beyond this are refused
  std::function<bool(TokenId)> is_end;  // end-of-generation tokens
};

// A snapshot for /slots and /metrics.
struct EngineState {
  size_t n_queued = 0;
  std::vector<int64_t> slot_task;        // [n_slots] id of the running sequence, -1 when idle
  std::vector<int32_t> slot_n_cached;    // [n_slots] tokens whose K/V the slot holds
};

class Engine {
 public:
  // Allocates every slot's K/V on `model` (which must outlive the engine) and starts the worker.
  static Result<std::unique_ptr<Engine>> start(Model& model, EngineOptions options);
  ~Engine();  // stops the worker; queued and running sequences finish as kCancelled

  // Queues a sequence. Errors: an empty prompt, n_predict < 1, prompt + n_predict over n_ctx
  // (the message says so; callers check first for their own wording), the queue full.
  Result<std::shared_ptr<SequenceHandle>> submit(SequenceRequest request);

  int32_t n_ctx() const { return options_.n_ctx; }
  EngineState state() const;

 private:
  struct Slot;
  struct Pending {
    int64_t id;
    SequenceRequest request;
    std::shared_ptr<SequenceHandle> handle;
    double queued_at_ms;
  };
  Engine(Model& model, EngineOptions options);
  void worker_loop();
  // One scheduler step: admit, run one batch, sample, retire. Catches everything per sequence.
  void step();
  void admit(Slot& slot, Pending pending);
  void retire(Slot& slot, FinishReason reason, const std::string& error = {});
  void fail_all(const std::vector<Slot*>& running, const std::string& error);
  bool has_active_slot() const;

  Model& model_;
  EngineOptions options_;
  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  int64_t next_id_ = 0;
  bool stopping_ = false;
  std::thread worker_;
  std::vector<float> logits_;  // [n_out, vocab]
  std::vector<TokenId> end_tokens_;  // every id is_end accepts (for ignore_eos), found at start
};

// Length of the common prefix of a and b.
size_t common_prefix_length(const std::vector<TokenId>& a, const std::vector<TokenId>& b);

}  // namespace onebit
