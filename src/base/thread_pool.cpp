// The pool's job hand-off: a generation counter the workers wait on, a tagged claim counter the
// participants take index chunks from, an items-done counter the caller waits on. Spinning first
// keeps the ~300 small parallel loops of a decode step cheap.
#include "base/thread_pool.h"

#include <immintrin.h>

#include <algorithm>

#include "base/check.h"

namespace onebit {
namespace {

constexpr int kSpinIterations = 20000;  // ~a millisecond of pause before sleeping
constexpr uint64_t kIndexMask = 0xffffffffu;

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  workers_.reserve(n_threads_ - 1);
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_main(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::work(uint32_t generation, int thread_idx) {
  const int64_t n = n_.load(std::memory_order_acquire);
  const int64_t chunk = chunk_.load(std::memory_order_acquire);
  const bool guided = guided_.load(std::memory_order_acquire);
  const int64_t share = 2 * int64_t(n_threads_);
  const Thunk fn = fn_.load(std::memory_order_acquire);
  void* ctx = ctx_.load(std::memory_order_acquire);
  uint64_t c = claim_.load(std::memory_order_acquire);
  int64_t done = 0;  // counted once at the end: one write to the shared line per thread and job
  for (;;) {
    // A claim tagged with another generation means these fields may be another job's: stop.
    if ((c >> 32) != generation || int64_t(c & kIndexMask) >= n) break;
    const int64_t next = int64_t(c & kIndexMask);
    const int64_t take = guided ? std::max(chunk, (n - next + share - 1) / share) : chunk;
    if (!claim_.compare_exchange_weak(c, c + uint64_t(take), std::memory_order_acq_rel)) continue;
    const int64_t begin = next, end = std::min(n, begin + take);
    fn(ctx, begin, end, thread_idx);
    done += end - begin;
    c = claim_.load(std::memory_order_acquire);
  }
  if (done > 0) n_items_done_.fetch_add(done, std::memory_order_acq_rel);
}

void ThreadPool::worker_main(int thread_idx) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    for (int i = 0; g == seen && i < kSpinIterations; ++i) {
      _mm_pause();
      g = generation_.load(std::memory_order_acquire);
    }
    while (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load()) return;
    work(g, thread_idx);
  }
}

void ThreadPool::run(Parallel strategy, int64_t n, int64_t chunk, Thunk fn, void* ctx) {
  if (n_threads_ == 1 || n == 1) {
    fn(ctx, 0, n, 0);
    return;
  }
  ONEBIT_CHECK(n < (int64_t(1) << 31));
  // kStatic: one contiguous slice per thread (whoever arrives first runs it).
  const int64_t c = strategy == Parallel::kStatic ? (n + n_threads_ - 1) / n_threads_
                    : chunk > 0                 ? chunk
                                                : std::max<int64_t>(1, n / (int64_t(n_threads_) * 8));
  const uint32_t g = generation_.load(std::memory_order_relaxed) + 1;
  // Retag the claim word before the fields change: a late worker of the previous job that reads
  // any new field (acquire) then sees the new tag, and its claim fails.
  claim_.store(uint64_t(g) << 32 | kIndexMask, std::memory_order_relaxed);
  n_.store(n, std::memory_order_release);
  chunk_.store(c, std::memory_order_release);
  guided_.store(strategy == Parallel::kGuided, std::memory_order_release);
  fn_.store(fn, std::memory_order_release);
  ctx_.store(ctx, std::memory_order_release);
  n_items_done_.store(0, std::memory_order_relaxed);
  claim_.store(uint64_t(g) << 32, std::memory_order_release);
  generation_.store(g, std::memory_order_release);
  generation_.notify_all();
  work(g, 0);
  for (int i = 0; n_items_done_.load(std::memory_order_acquire) != n; ++i) {
    if (i > kSpinIterations) std::this_thread::yield();  // a claimed chunk's thread was preempted
    _mm_pause();
  }
}

}  // namespace onebit
