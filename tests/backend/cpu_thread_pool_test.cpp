// The thread pool under the CPU backend: every index runs exactly once under every strategy, for
// n = 0, 1, fewer and more indices than threads, and thousands of back-to-back jobs (the decode
// pattern), with thread indices in range.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "base/thread_pool.h"

namespace onebit {
namespace {

TEST(CpuThreadPool, EveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (Parallel s : {Parallel::kStatic, Parallel::kDynamic, Parallel::kGuided}) {
      for (int64_t n : {0, 1, 2, 5, 7, 64, 1000, 12345}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<bool> bad_thread{false};
        std::atomic<int64_t> chunks{0};
        pool.parallel_for(s, n, [&](int64_t b, int64_t e, int t) {
          if (t < 0 || t >= threads) bad_thread = true;
          chunks.fetch_add(1);
          for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
        }, /*chunk=*/s == Parallel::kGuided ? 3 : 0);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << threads << " " << n << " " << i;
        EXPECT_FALSE(bad_thread.load());
        // guided: shares of what is left, at least 3 indices: far fewer grabs than indices, yet more
        // than one per thread once there is plenty
        if (s == Parallel::kGuided && threads > 1 && n == 12345) {
          EXPECT_LT(chunks.load(), n / 20) << threads;
          EXPECT_GT(chunks.load(), 2 * threads) << threads;
        }
      }
    }
  }
}

TEST(CpuThreadPool, ManySmallJobsBackToBack) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int job = 0; job < 20000; ++job) {
    pool.parallel_for(job % 2 ? Parallel::kStatic : Parallel::kDynamic, 1 + job % 7,
                      [&](int64_t b, int64_t e, int) { sum.fetch_add(e - b); }, /*chunk=*/1);
  }
  int64_t want = 0;
  for (int job = 0; job < 20000; ++job) want += 1 + job % 7;
  EXPECT_EQ(sum.load(), want);
}

}  // namespace
}  // namespace onebit
