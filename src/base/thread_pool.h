// An explicit threading context: a fixed pool of worker threads and named parallel-for
// strategies, after gemma.cpp's ThreadingContext / ParallelFor (util/threading_context.h). Knows
// nothing of tensors; kernels pass it down explicitly (no global pool).
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace onebit {

// How a parallel loop hands out its index range.
enum class Parallel {
  kStatic,   // one contiguous slice per thread: best for even, streaming work (decode matvec)
  kDynamic,  // chunks from a shared counter: best when threads are uneven (busy machine, tiles)
  kGuided,   // as kDynamic, each chunk a 1/(2 n_threads) share of what is left, at least `chunk`:
             // long stretches first (prefetchers keep running), small ones at the end (threads
             // finish together)
};

// A pool of n_threads - 1 workers plus the calling thread. run() is not reentrant and must be
// called from one thread at a time (the backend's driver thread). Index chunks are claimed from a
// counter tagged with the job's generation, and the caller waits for the work items, not for the
// workers: on a shared machine a descheduled worker never holds a step, the caller does its share.
// Workers spin briefly after a job, then sleep on an atomic wait.
class ThreadPool {
 public:
  // n_threads >= 1 (1: everything runs on the caller, no workers are started).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Calls body(begin, end, thread_idx) over disjoint ranges covering [0, n); returns when all are
  // done. kDynamic hands out `chunk` indices at a time (0: picked from n and the thread count);
  // kGuided at least `chunk`.
  template <class Body>
  void parallel_for(Parallel strategy, int64_t n, Body&& body, int64_t chunk = 0) {
    if (n <= 0) return;
    auto thunk = [](void* ctx, int64_t b, int64_t e, int t) { (*static_cast<Body*>(ctx))(b, e, t); };
    run(strategy, n, chunk, thunk, &body);
  }

 private:
  using Thunk = void (*)(void* ctx, int64_t begin, int64_t end, int thread_idx);
  void run(Parallel strategy, int64_t n, int64_t chunk, Thunk fn, void* ctx);
  // Claims and runs chunks of job `generation` until none are left (or the job is over).
  void work(uint32_t generation, int thread_idx);
  void worker_main(int thread_idx);

  int n_threads_;
  std::vector<std::thread> workers_;
  // The current job, published by a release store of `generation_`; relaxed atomics because a late
  // worker may read them while the next job is written (its claim then fails on the tag).
  std::atomic<int64_t> n_{0};
  std::atomic<int64_t> chunk_{1};
  std::atomic<bool> guided_{false};
  std::atomic<Thunk> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  alignas(64) std::atomic<uint64_t> claim_{0};       // generation << 32 | next unclaimed index
  alignas(64) std::atomic<uint32_t> generation_{0};  // bumped once per job
  alignas(64) std::atomic<int64_t> n_items_done_{0}; // indices of the current job finished
  std::atomic<bool> stop_{false};
};

}  // namespace onebit
