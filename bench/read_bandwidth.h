// The streaming-read bandwidth that the benchmarks divide by (e2e_bench's roofline, kernel_bench's
// out-of-cache profile). Header-only: bench/ holds executables, not a library.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "base/large_alloc.h"

namespace onebit {

// Streaming read of a buffer of `bytes` (allocated as the repacked weights are, so with huge pages
// where the kernel gives them) split over n_threads: AVX2 loads, 4 independent sums so the loop is
// bound by memory, not by add latency, each pass once with hardware prefetch alone and once with a
// software prefetch 4 KiB ahead as the kernels do (one thread sometimes reads faster with it).
// measure() returns GB/s (1e9 bytes/s), the best of `passes` x both loops.
class ReadBandwidth {
 public:
  explicit ReadBandwidth(size_t bytes)
      : n_(bytes / sizeof(float) / 32 * 32), buf_(static_cast<float*>(large_alloc(n_ * sizeof(float)))) {
    for (size_t i = 0; i < n_; ++i) buf_[i] = float(i & 1023);  // touch every page
  }
  ~ReadBandwidth() { std::free(buf_); }
  ReadBandwidth(const ReadBandwidth&) = delete;
  ReadBandwidth& operator=(const ReadBandwidth&) = delete;

  double measure(int n_threads, int passes) {
    double best = 0;
    for (int r = 0; r < 2 * passes; ++r) {
      std::vector<std::thread> ts;
      std::vector<float> sums(static_cast<size_t>(n_threads));
      const bool prefetch = r % 2 == 1;
      const auto t0 = std::chrono::steady_clock::now();
      for (int t = 0; t < n_threads; ++t) {
        ts.emplace_back([&, t] {
          const size_t b = n_ * t / n_threads / 32 * 32, e = n_ * (t + 1) / n_threads / 32 * 32;
          __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
          for (size_t i = b; i < e; i += 32) {
            if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(buf_ + i) + 4096, _MM_HINT_T0);
            a0 = _mm256_add_ps(a0, _mm256_load_ps(buf_ + i));
            a1 = _mm256_add_ps(a1, _mm256_load_ps(buf_ + i + 8));
            a2 = _mm256_add_ps(a2, _mm256_load_ps(buf_ + i + 16));
            a3 = _mm256_add_ps(a3, _mm256_load_ps(buf_ + i + 24));
          }
          float out[8];
          _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
          sums[size_t(t)] = out[0];
        });
      }
      for (auto& th : ts) th.join();
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (float v : sums) sink_ = sink_ + v;
      best = std::max(best, double(n_ * sizeof(float)) / dt / 1e9);
    }
    return best;
  }

 private:
  size_t n_;
  float* buf_;
  volatile float sink_ = 0;
};

}  // namespace onebit
