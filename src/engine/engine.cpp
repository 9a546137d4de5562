// The engine's worker and scheduler step; see engine.h.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>

namespace onebit {
namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

size_t common_prefix_length(const std::vector<TokenId>& a, const std::vector<TokenId>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

SequenceEvents SequenceHandle::wait(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
               [&] { return !pending_.tokens.empty() || pending_.finished; });
  // The finish stays: later waits see it again, with no tokens.
  SequenceEvents out = pending_;
  pending_.tokens.clear();
  return out;
}

void SequenceHandle::push_token(TokenId token) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.tokens.push_back(token);
  }
  cv_.notify_all();
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
}

// One slot: a K/V cache that outlives its sequences (the prefix cache) and the running sequence.
struct Engine::Slot {
  KvCache kv;
  std::vector<TokenId> kv_tokens;  // [kv.n_past] the tokens whose K/V the cache holds
  bool active = false;
  int64_t id = -1;
  SequenceRequest request;
  std::shared_ptr<SequenceHandle> handle;
  std::unique_ptr<Sampler> sampler;
  SequenceStats stats;
  std::vector<TokenId> to_feed;  // tokens this step runs: the uncached prompt, then the last sample
  bool prefilling = false;
  int32_t n_cached_published = 0;  // kv_tokens.size() as of the last admit/retire, under mu_
  double started_ms = 0.0;
  double decode_started_ms = 0.0;
};

Engine::Engine(Model& model, EngineOptions options) : model_(model), options_(std::move(options)) {}

Result<std::unique_ptr<Engine>> Engine::start(Model& model, EngineOptions options) {
  if (options.n_ctx < 1) return make_error("engine: n_ctx is " + std::to_string(options.n_ctx) + "; allowed >= 1");
  if (options.n_slots < 1) return make_error("engine: n_slots is " + std::to_string(options.n_slots) + "; allowed >= 1");
  std::unique_ptr<Engine> engine(new Engine(model, std::move(options)));
  if (engine->options_.is_end) {
    for (TokenId id = 0; id < model.config().vocab_size; ++id) {
      if (engine->options_.is_end(id)) engine->end_tokens_.push_back(id);
    }
  }
  for (int32_t i = 0; i < engine->options_.n_slots; ++i) {
    auto slot = std::make_unique<Slot>();
    ONEBIT_ASSIGN_OR_RETURN(slot->kv, model.new_kv_cache(engine->options_.n_ctx));
    engine->slots_.push_back(std::move(slot));
  }
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
  for (auto& p : queue_) p.handle->finish(FinishReason::kCancelled, {});
  for (auto& slot : slots_) {
    if (slot->active) retire(*slot, FinishReason::kCancelled);
    model_.free_kv_cache(slot->kv);
  }
}

Result<std::shared_ptr<SequenceHandle>> Engine::submit(SequenceRequest request) {
  if (request.prompt.empty()) return make_error("the prompt has no tokens");
  if (request.n_predict < 1) return make_error("n_predict is " + std::to_string(request.n_predict) + "; allowed >= 1");
  const int64_t needed = static_cast<int64_t>(request.prompt.size()) + request.n_predict;
  if (needed > options_.n_ctx) {
    return make_error("prompt (" + std::to_string(request.prompt.size()) + " tokens) + " +
                      std::to_string(request.n_predict) + " new tokens exceed the context of " +
                      std::to_string(options_.n_ctx));
  }
  auto handle = std::make_shared<SequenceHandle>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= options_.max_queue) {
      return make_error("the queue is full (" + std::to_string(queue_.size()) + " waiting); retry later");
    }
    queue_.push_back(Pending{next_id_++, std::move(request), handle, now_ms()});
  }
  cv_.notify_all();
  return handle;
}

EngineState Engine::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineState s;
  s.n_queued = queue_.size();
  for (const auto& slot : slots_) {
    s.slot_task.push_back(slot->active ? slot->id : -1);
    s.slot_n_cached.push_back(slot->n_cached_published);
  }
  return s;
}

bool Engine::has_active_slot() const {
  return std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->active; });
}

void Engine::worker_loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || has_active_slot(); });
      if (stopping_) return;
      // Admission: the free slot whose cache shares the longest prefix takes the oldest request.
      while (!queue_.empty()) {
        Slot* best = nullptr;
        size_t best_len = 0;
        for (auto& slot : slots_) {
          if (slot->active) continue;
          const size_t len = common_prefix_length(slot->kv_tokens, queue_.front().request.prompt);
          if (!best || len > best_len) best = slot.get(), best_len = len;
        }
        if (!best) break;
        Pending p = std::move(queue_.front());
        queue_.pop_front();
        admit(*best, std::move(p));
      }
    }
    step();
  }
}

void Engine::admit(Slot& slot, Pending pending) {
  const auto& prompt = pending.request.prompt;
  size_t n_common = pending.request.cache_prompt ? common_prefix_length(slot.kv_tokens, prompt) : 0;
  // At least one prompt token is run, for the logits of the first new token.
  n_common = std::min(n_common, prompt.size() - 1);
  slot.kv.n_past = static_cast<int32_t>(n_common);
  slot.kv_tokens.resize(n_common);
  slot.n_cached_published = static_cast<int32_t>(n_common);
  slot.to_feed.assign(prompt.begin() + static_cast<std::ptrdiff_t>(n_common), prompt.end());
  slot.stats = SequenceStats{};
  slot.stats.n_prompt_tokens = static_cast<int32_t>(prompt.size());
  slot.stats.n_cached_tokens = static_cast<int32_t>(n_common);
  slot.started_ms = now_ms();
  slot.stats.queue_ms = slot.started_ms - pending.queued_at_ms;
  slot.sampler = std::make_unique<Sampler>(pending.request.sampler);
  slot.id = pending.id;
  slot.request = std::move(pending.request);
  slot.handle = std::move(pending.handle);
  slot.prefilling = true;
  slot.active = true;
}

void Engine::retire(Slot& slot, FinishReason reason, const std::string& error) {
  const double now = now_ms();
  if (slot.prefilling) {
    slot.stats.prompt_ms = now - slot.started_ms;
  } else {
    slot.stats.decode_ms = now - slot.decode_started_ms;
  }
  auto handle = std::move(slot.handle);
  slot.sampler.reset();
  {
    // The slot is idle before its owner hears of the end (state() reads these under the lock).
    std::lock_guard<std::mutex> lock(mu_);
    slot.active = false;
    slot.id = -1;
    slot.n_cached_published = static_cast<int32_t>(slot.kv_tokens.size());
  }
  handle->finish(reason, slot.stats, error);
}

void Engine::step() {
  std::vector<Slot*> running;
  for (auto& slot : slots_) {
    if (!slot->active) continue;
    if (slot->handle->cancelled()) {
      retire(*slot, FinishReason::kCancelled);
    } else {
      running.push_back(slot.get());
    }
  }
  if (running.empty()) return;
  Batch batch;
  for (Slot* slot : running) batch.sequences.push_back({&slot->kv, slot->to_feed, /*all_logits=*/false});
  try {
    auto st = model_.forward(batch, logits_);
    if (!st.ok()) {
      // The forward ran nothing: every sequence of the batch fails alone, the caches stay as they were.
      for (Slot* slot : running) retire(*slot, FinishReason::kError, st.message());
      return;
    }
    const size_t vocab = logits_.size() / running.size();
    const double now = now_ms();
    for (size_t i = 0; i < running.size(); ++i) {
      Slot& slot = *running[i];
      slot.kv_tokens.insert(slot.kv_tokens.end(), slot.to_feed.begin(), slot.to_feed.end());
      if (slot.prefilling) {
        slot.prefilling = false;
        slot.stats.prompt_ms = now - slot.started_ms;
        slot.decode_started_ms = now;
      }
      float* row = logits_.data() + i * vocab;
      if (slot.request.ignore_eos) {
        for (TokenId id : end_tokens_) {
          if (static_cast<size_t>(id) < vocab) row[id] = -std::numeric_limits<float>::infinity();
        }
      }
      const TokenId token = slot.sampler->sample(std::span<const float>(row, vocab));
      ++slot.stats.n_generated_tokens;
      slot.handle->push_token(token);
      if (!slot.request.ignore_eos && options_.is_end && options_.is_end(token)) {
        retire(slot, FinishReason::kEnd);
      } else if (slot.stats.n_generated_tokens >= slot.request.n_predict || slot.kv.n_past >= slot.kv.n_ctx) {
        retire(slot, FinishReason::kLength);
      } else {
        slot.to_feed.assign(1, token);
      }
    }
  } catch (const std::exception& e) {
    fail_all(running, std::string("internal error: ") + e.what());
  } catch (...) {
    fail_all(running, "internal error");
  }
}

void Engine::fail_all(const std::vector<Slot*>& running, const std::string& error) {
  for (Slot* slot : running) {
    // The cache may be half written: forget it.
    slot->kv.n_past = 0;
    slot->kv_tokens.clear();
    if (slot->active) retire(*slot, FinishReason::kError, error);
  }
}

}  // namespace onebit
