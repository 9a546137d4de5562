// End-to-end benchmark (not a test): prompt processing (pp) and decode (tg) tokens/s of a GGUF
// model on the CPU backend, next to the machine's measured memory read bandwidth, with decode as a
// fraction of the bandwidth roofline (weight bytes read per token / bandwidth). As llama-bench:
// pp = one batch of N prompt tokens into an empty cache, tg = N single-token steps from empty.
// Usage: e2e_bench MODEL.gguf [--threads N] [--pp 512] [--tg 128] [--reps 3] [--bw-mib 2048]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "base/cpu_features.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"

namespace onebit {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Streaming read of `bytes` split over n_threads (AVX2 loads, 4 independent sums so the loop is
// bound by memory, not by add latency). Returns GB/s (1e9 bytes/s), best of `reps`.
double read_bandwidth_gbs(size_t bytes, int n_threads, int reps) {
  const size_t n = bytes / sizeof(float);
  float* buf = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
  for (size_t i = 0; i < n; ++i) buf[i] = float(i & 1023);  // touch every page
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<std::thread> ts;
    std::vector<float> sums(static_cast<size_t>(n_threads));
    const double t0 = now_s();
    for (int t = 0; t < n_threads; ++t) {
      ts.emplace_back([&, t] {
        const size_t b = n * t / n_threads / 32 * 32, e = n * (t + 1) / n_threads / 32 * 32;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (size_t i = b; i < e; i += 32) {
          a0 = _mm256_add_ps(a0, _mm256_load_ps(buf + i));
          a1 = _mm256_add_ps(a1, _mm256_load_ps(buf + i + 8));
          a2 = _mm256_add_ps(a2, _mm256_load_ps(buf + i + 16));
          a3 = _mm256_add_ps(a3, _mm256_load_ps(buf + i + 24));
        }
        float out[8];
        _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        sums[size_t(t)] = out[0];
      });
    }
    for (auto& th : ts) th.join();
    const double dt = now_s() - t0;
    for (float s : sums) sink = sink + s;
    best = std::max(best, double(n / 32 * 32 * sizeof(float)) / dt / 1e9);
  }
  std::free(buf);
  return best;
}

// Bytes of weights one decode token reads: every tensor but the token embedding (one row of it).
uint64_t weight_bytes_per_token(const GgufFile& f) {
  uint64_t sum = 0;
  const bool tied = f.find_tensor("output.weight") == nullptr;
  for (const GgufTensorInfo& t : f.tensors()) {
    if (t.name == "token_embd.weight" && !tied) {
      sum += t.n_bytes / t.ne[1];
    } else {
      sum += t.n_bytes;
    }
  }
  return sum;
}

struct Stats {
  double best = 0, median = 0;
};
Stats summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.back(), v[(v.size() - 1) / 2]};  // the lower median for an even count
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: e2e_bench MODEL.gguf [--threads N] [--pp 512] [--tg 128] [--reps 3] [--bw-mib 2048]\n");
    return 2;
  }
  int threads = 1, pp = 512, tg = 128, reps = 3, bw_mib = 2048;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--threads") threads = v;
    else if (k == "--pp") pp = v;
    else if (k == "--tg") tg = v;
    else if (k == "--reps") reps = v;
    else if (k == "--bw-mib") bw_mib = v;
  }
  auto file = GgufFile::open(argv[1]);
  if (!file.ok()) return std::fprintf(stderr, "%s\n", file.message().c_str()), 1;
  auto backend = make_cpu_backend(threads);
  auto model = Model::load(*file, *backend);
  if (!model.ok()) return std::fprintf(stderr, "%s\n", model.message().c_str()), 1;
  auto kv = (*model)->new_kv_cache(std::max(pp, tg) + 1);
  if (!kv.ok()) return std::fprintf(stderr, "%s\n", kv.message().c_str()), 1;
  const int32_t vocab = (*model)->config().vocab_size;
  std::vector<float> logits;
  std::vector<TokenId> prompt(static_cast<size_t>(pp));
  for (int i = 0; i < pp; ++i) prompt[size_t(i)] = TokenId((i * 7919 + 13) % vocab);

  // Warm-up: one short pass maps the weights in (page faults are not what we measure).
  Batch warm{{BatchSequence{&*kv, std::span<const TokenId>(prompt.data(), 1), false}}};
  if (!(*model)->forward(warm, logits).ok()) return 1;
  for (int i = 0; i < 2 && tg > 0; ++i) {
    TokenId t = 1;
    Batch b{{BatchSequence{&*kv, std::span<const TokenId>(&t, 1), false}}};
    if (!(*model)->forward(b, logits).ok()) return 1;
  }

  std::vector<double> pp_rates, tg_rates;
  for (int r = 0; r < reps; ++r) {
    kv->n_past = 0;
    Batch b{{BatchSequence{&*kv, prompt, false}}};
    const double t0 = now_s();
    if (!(*model)->forward(b, logits).ok()) return 1;
    pp_rates.push_back(pp / (now_s() - t0));

    kv->n_past = 0;
    TokenId tok = 1;
    const double t1 = now_s();
    for (int i = 0; i < tg; ++i) {
      Batch d{{BatchSequence{&*kv, std::span<const TokenId>(&tok, 1), false}}};
      if (!(*model)->forward(d, logits).ok()) return 1;
      tok = TokenId(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    tg_rates.push_back(tg / (now_s() - t1));
  }
  const Stats p = summarize(pp_rates), d = summarize(tg_rates);
  const double bw = read_bandwidth_gbs(size_t(bw_mib) << 20, threads, 5);
  const double gb_per_token = weight_bytes_per_token(*file) / 1e9;
  const double roofline = bw / gb_per_token;
  std::printf("| %s | %s | %d | %.1f / %.1f | %.2f / %.2f | %.3f | %.1f | %.2f | %.0f%% / %.0f%% |\n",
              argv[1], std::string(backend->name()).c_str(), threads, p.best, p.median, d.best, d.median,
              gb_per_token, bw, roofline, 100 * d.best / roofline, 100 * d.median / roofline);
  return 0;
}

}  // namespace
}  // namespace onebit

int main(int argc, char** argv) { return onebit::run(argc, argv); }
