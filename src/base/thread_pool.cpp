// The pool's job hand-off: one generation counter the workers wait on, one done counter the caller
// waits on. Spinning first keeps the ~300 small parallel loops of a decode step cheap.
#include "base/thread_pool.h"

#include <immintrin.h>

#include <algorithm>

namespace onebit {
namespace {

constexpr int kSpinIterations = 20000;  // ~tens of microseconds of pause before sleeping

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  workers_.reserve(n_threads_ - 1);
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_main(t); });
}

ThreadPool::~ThreadPool() {
  stop_ = true;
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::work(int thread_idx) {
  if (strategy_ == Parallel::kStatic) {
    const int64_t begin = n_ * thread_idx / n_threads_;
    const int64_t end = n_ * (thread_idx + 1) / n_threads_;
    if (begin < end) fn_(ctx_, begin, end, thread_idx);
    return;
  }
  for (;;) {
    const int64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (begin >= n_) return;
    fn_(ctx_, begin, std::min(n_, begin + chunk_), thread_idx);
  }
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
    if (stop_) return;
    work(thread_idx);
    n_done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(Parallel strategy, int64_t n, int64_t chunk, Thunk fn, void* ctx) {
  if (n_threads_ == 1 || n == 1) {
    fn(ctx, 0, n, 0);
    return;
  }
  strategy_ = strategy;
  n_ = n;
  chunk_ = chunk > 0 ? chunk : std::max<int64_t>(1, n / (int64_t(n_threads_) * 8));
  fn_ = fn;
  ctx_ = ctx;
  next_.store(0, std::memory_order_relaxed);
  n_done_.store(0, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  work(0);
  const int n_workers = n_threads_ - 1;
  while (n_done_.load(std::memory_order_acquire) != n_workers) _mm_pause();
}

}  // namespace onebit
