// Micro-benchmarks (Google Benchmark) of the CPU backend's matmul kernels, one thread, for every
// weight type and ISA this machine has: matrix-vector (n = 1, the decode shape) and matrix-matrix
// (n = 64, prompt tiles), with the scalar reference backend's time for the same product as the
// counter `x_vs_ref` (reference time / kernel time) and the weight bytes streamed per second.
// Where the CPU has AMX, `matmul64/<type>/avx512_vnni+amx` times the AMX tiles (cpu/amx.h).
// The decode profile (docs/kernels.md): `matvec_l2` is a 256 KiB weight that stays in the core's
// L2 (the kernel's arithmetic alone: compute-bound), `matvec_dram` walks 512 MiB of distinct
// weights (memory-bound), with `of_read` its GB/s over a one-thread streaming read measured in
// the same benchmark (bench/read_bandwidth.h): a kernel whose L2 rate is not well above that read
// rate cannot reach the roofline. `pool_handoff/<strategy>/<threads>`: one empty parallel loop, per job.
// `attn_values/<isa>`: attention's value sums of one task (8 heads x 64 over 800 F16 rows).
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/amx.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "gguf/quants.h"
#include "read_bandwidth.h"

namespace onebit {
namespace {

constexpr int64_t kM = 2048, kK = 2048;  // one square TinyLlama-sized projection

const GgmlType kTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0,
                           GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                           GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

struct Problem {
  std::vector<uint8_t> w;   // [kM, row bytes]
  std::vector<float> x;     // [n, kK]
};

Problem make_problem(GgmlType type, int64_t n, int64_t m = kM) {
  Problem p;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  const size_t rb = row_size(type, kK).value();
  p.w.resize(rb * m);
  std::vector<float> row(kK);
  for (int64_t r = 0; r < m; ++r) {
    for (float& v : row) v = dist(rng);
    quantize_row_reference(type, row.data(), p.w.data() + r * rb, kK);
  }
  p.x.resize(size_t(n * kK));
  for (float& v : p.x) v = dist(rng);
  return p;
}

// One matmul on `be`; returns seconds.
double time_once(Backend& be, const Tensor& w, const Tensor& x, const Tensor& out) {
  const auto t0 = std::chrono::steady_clock::now();
  be.matmul(w, x, out);
  be.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Mean seconds of call(i) over the benchmark's iterations (i: the iteration's index).
template <class Call>
double mean_seconds(benchmark::State& state, Call&& call) {
  double total = 0;
  int64_t iters = 0;
  for (auto _ : state) total += call(iters++);
  return total / double(iters);
}

double reference_seconds(GgmlType type, int64_t n) {
  static std::map<std::pair<int, int64_t>, double> cache;
  const auto key = std::make_pair(int(type), n);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  Problem p = make_problem(type, n);
  auto be = make_reference_backend();
  Tensor w = be->weight_from_host(type, kM, kK, p.w).value();
  Tensor x = be->alloc(GgmlType::kF32, n, kK).value();
  be->write(x, p.x.data());
  Tensor out = be->alloc(GgmlType::kF32, n, kM).value();
  double best = 1e30;
  for (int i = 0; i < 2; ++i) best = std::min(best, time_once(*be, w, x, out));
  return cache[key] = best;
}

void bm_matmul(benchmark::State& state, CpuIsa isa, GgmlType type, int64_t n, bool amx = false) {
  Problem p = make_problem(type, n);
  // The panel rows without AMX even where it would be on by default (the AMX rows are their own).
  const char* panels_env = std::getenv("ONEBIT_CPU_PANELS");
  const bool panels = panels_env == nullptr || std::string(panels_env) != "0";
  auto be = make_cpu_backend(1, isa, panels, amx);
  Tensor w = be->weight_from_host(type, kM, kK, p.w).value();
  Tensor x = be->alloc(GgmlType::kF32, n, kK).value();
  be->write(x, p.x.data());
  Tensor out = be->alloc(GgmlType::kF32, n, kM).value();
  const double per_call = mean_seconds(state, [&](int64_t) { return time_once(*be, w, x, out); });
  state.counters["x_vs_ref"] = reference_seconds(type, n) / per_call;
  state.counters["weight_GB/s"] = double(p.w.size()) / per_call / 1e9;
  state.counters["GFLOP/s"] = 2.0 * kM * kK * n / per_call / 1e9;
}

// Decode in the core's L2: m rows making ~256 KiB of weights (a multiple of 16 rows, the panel
// kernels' chunk), called over and over.
void bm_matvec_l2(benchmark::State& state, CpuIsa isa, GgmlType type) {
  const int64_t m = std::max<int64_t>(16, int64_t((256 << 10) / row_size(type, kK).value()) / 16 * 16);
  Problem p = make_problem(type, 1, m);
  auto be = make_cpu_backend(1, isa);
  Tensor w = be->weight_from_host(type, m, kK, p.w).value();
  Tensor x = be->alloc(GgmlType::kF32, 1, kK).value();
  be->write(x, p.x.data());
  Tensor out = be->alloc(GgmlType::kF32, 1, m).value();
  state.counters["weight_GB/s"] =
      double(p.w.size()) / mean_seconds(state, [&](int64_t) { return time_once(*be, w, x, out); }) / 1e9;
}

// The DRAM rows' threads: ONEBIT_BENCH_THREADS (default 1; the read bandwidth is one thread's).
int dram_threads() {
  const char* e = std::getenv("ONEBIT_BENCH_THREADS");
  return e != nullptr ? std::max(1, std::atoi(e)) : 1;
}

// Decode (n = 1) and verification steps (n = 2..8) from DRAM: distinct copies of one kM x kK
// weight, 512 MiB in all, each product reading the next; the read bandwidth measured right before
// gives the roofline fraction.
void bm_matvec_dram(benchmark::State& state, CpuIsa isa, GgmlType type, int64_t n) {
  Problem p = make_problem(type, n);
  auto be = make_cpu_backend(dram_threads(), isa);
  // Distinct host copies too: a type without panels keeps the host bytes it was given.
  const size_t copies = ((size_t(512) << 20) + p.w.size() - 1) / p.w.size();
  std::vector<std::vector<uint8_t>> hosts;
  hosts.reserve(copies);
  std::vector<Tensor> ws;
  for (size_t i = 0; i < copies; ++i) {
    hosts.push_back(p.w);
    ws.push_back(be->weight_from_host(type, kM, kK, hosts.back()).value());
  }
  Tensor x = be->alloc(GgmlType::kF32, n, kK).value();
  be->write(x, p.x.data());
  Tensor out = be->alloc(GgmlType::kF32, n, kM).value();
  static ReadBandwidth read(size_t(512) << 20);
  const double read_gbs = read.measure(1, 2);
  const double gbs =
      double(p.w.size()) / mean_seconds(state, [&](int64_t i) { return time_once(*be, ws[size_t(i) % ws.size()], x, out); }) / 1e9;
  state.counters["weight_GB/s"] = gbs;
  state.counters["read_GB/s"] = read_gbs;
  state.counters["of_read"] = gbs / read_gbs;
}

// The thread pool's hand-off: one parallel loop of n_threads indices with an empty body, per job
// (a decode step of onebit-20m runs ~110 loops, a step of 8 tokens ~265).
void bm_pool_handoff(benchmark::State& state, Parallel strategy, int threads) {
  ThreadPool pool(threads);
  std::atomic<int64_t> sink{0};
  for (auto _ : state) {
    pool.parallel_for(strategy, threads, [&](int64_t b, int64_t e, int) { sink.fetch_add(e - b, std::memory_order_relaxed); });
  }
  benchmark::DoNotOptimize(sink.load());
}

// Attention's value sums of one task (8 heads of 64 over 800 F16 value rows of a pool, in order):
// the AVX2 kernel (weighted_sum_heads_rows) or, for `isa` with one, its DotTable::attn_sum.
void bm_attn_values(benchmark::State& state, CpuIsa isa) {
  constexpr int kHeads = 8;
  constexpr int64_t kHd = 64, kKeys = 800, kStride = 2 * kHd;  // two K/V heads a pool row
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> p(size_t(kHeads * kKeys)), out(size_t(kHeads * kHd));
  for (float& x : p) x = u(rng);
  std::vector<uint16_t> v(size_t(kKeys * kStride));
  for (uint16_t& x : v) x = uint16_t(0x3c00 | (rng() & 0x3ff));  // halves in [1, 2)
  std::vector<int32_t> rows(kKeys);
  for (int64_t j = 0; j < kKeys; ++j) rows[size_t(j)] = int32_t(j);
  const cpu::KvRows vr{v.data(), kStride, rows.data(), true};
  const cpu::AttnSumFn fn = cpu::dot_table(isa).attn_sum;
  for (auto _ : state) {
    if (fn != nullptr) {
      fn(p.data(), kHeads, kKeys, vr, kKeys, kHd, out.data());
    } else {
      cpu::weighted_sum_heads_rows(p.data(), kHeads, kKeys, vr, kKeys, kHd, out.data());
    }
    benchmark::DoNotOptimize(out.data());
  }
}

void register_all() {
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
    if (!cpu_isa_supported(isa)) continue;
    benchmark::RegisterBenchmark(("attn_values/" + std::string(cpu_isa_name(isa))).c_str(),
                                 [=](benchmark::State& s) { bm_attn_values(s, isa); })
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(0.2);
  }
  for (int threads : {2, 4}) {
    for (Parallel st : {Parallel::kStatic, Parallel::kDynamic}) {
      const std::string name = std::string("pool_handoff/") + (st == Parallel::kStatic ? "static/" : "dynamic/") + std::to_string(threads);
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bm_pool_handoff(s, st, threads); })
          ->Unit(benchmark::kMicrosecond)
          ->MinTime(0.3);
    }
  }
  // AMX tiles (cpu/amx.h) for the prompt shape, where the CPU has them.
  if (cpu::amx_ready()) {
    for (GgmlType type : kTypes) {
      if (!cpu::amx_supports(type)) continue;
      const std::string name = std::string("matmul64/") + ggml_type_name(uint32_t(type)) + "/avx512_vnni+amx";
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bm_matmul(s, CpuIsa::kAvx512Vnni, type, 64, true); })
          ->Unit(benchmark::kMicrosecond)
          ->MinTime(0.2);
    }
  }
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvxVnni, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni}) {
    if (!cpu_isa_supported(isa)) continue;
    for (GgmlType type : kTypes) {
      for (int64_t n : {1, 2, 4, 8, 64}) {  // decode, verification steps / small batches, prompts
        const std::string name = (n == 1 ? std::string("matvec/") : "matmul" + std::to_string(n) + "/") +
                                 ggml_type_name(uint32_t(type)) + "/" + std::string(cpu_isa_name(isa));
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bm_matmul(s, isa, type, n); })
            ->Unit(benchmark::kMicrosecond)
            ->MinTime(0.2);
      }
      const std::string suffix = std::string(ggml_type_name(uint32_t(type))) + "/" + std::string(cpu_isa_name(isa));
      benchmark::RegisterBenchmark(("matvec_l2/" + suffix).c_str(), [=](benchmark::State& s) { bm_matvec_l2(s, isa, type); })
          ->Unit(benchmark::kMicrosecond)
          ->MinTime(0.2);
      for (int64_t n : {1, 2, 4, 8}) {
        const std::string name = (n == 1 ? std::string("matvec_dram/") : "matmul" + std::to_string(n) + "_dram/") + suffix;
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bm_matvec_dram(s, isa, type, n); })
            ->Unit(benchmark::kMicrosecond)
            ->MinTime(0.5);
      }
    }
  }
}

}  // namespace
}  // namespace onebit

int main(int argc, char** argv) {
  onebit::register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
