// Decode matrix-vector on the CUDA backend (not a test): time per product and weight bytes per
// second for the 8B shape's matrices, on the panel kernels (the default) and the row kernels
// (ONEBIT_CUDA_PANELS=0), against the device copy bandwidth of the same run.
// Weights are random bytes (timing only: the values do not change the work). Each timed step is
// N products then synchronize(), repeated, so after the first two steps it runs from a CUDA graph.
// With --rows R (R > 1) it times prompt-sized products instead: R activation rows against each
// matrix, on the default path and with --vs NAME=VALUE set (default ONEBIT_CUDA_MMA=0: the float
// tiles instead of tensor cores), in TFLOP/s.
// Usage: cuda_matvec_bench [--device N] [--reps 20] [--n 20] [--rows 1] [--vs ONEBIT_CUDA_MMA=0]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "gguf/ggml_type.h"

namespace onebit {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Shape {
  const char* name;
  int64_t m, k;
};

const Shape kShapes[] = {{"ffn_up 14336x4096", 14336, 4096},
                         {"ffn_down 4096x14336", 4096, 14336},
                         {"attn_q 4096x4096", 4096, 4096},
                         {"attn_k 1024x4096", 1024, 4096},
                         {"output 128256x4096", 128256, 4096}};
const GgmlType kTypes[] = {GgmlType::kF16, GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K};

// Random bytes of one m x k weight of `type` (half scales may be NaN or huge: fine for timing,
// the work is the same).
std::vector<uint8_t> random_weight(GgmlType type, const Shape& sh) {
  const auto tr = ggml_type_traits(uint32_t(type));
  const size_t bytes = size_t(sh.m) * size_t(sh.k / tr->block_elems) * tr->block_bytes;
  std::vector<uint8_t> w(bytes);
  uint64_t st = 0x9E3779B97F4A7C15ull ^ uint64_t(sh.m * 31 + sh.k);
  for (size_t i = 0; i < bytes; i += 8) {
    st ^= st << 13, st ^= st >> 7, st ^= st << 17;
    for (size_t j = 0; j < 8 && i + j < bytes; ++j) w[i + j] = uint8_t(st >> (8 * j));
  }
  return w;
}

// Seconds per product of `rows` activation rows against w (best step of `reps`, n_per_step
// products per step), on a backend made with the environment as it is; -1 with *why set.
double time_product(int device, GgmlType type, const Shape& sh, const std::vector<uint8_t>& w, int64_t rows, int reps,
                    int n_per_step, std::string* why) {
  auto be = make_cuda_backend(device, why);
  if (be == nullptr) return -1;
  Tensor wt = be->weight_from_host(type, sh.m, sh.k, w).value();
  Tensor x = be->alloc(GgmlType::kF32, rows, sh.k).value();
  Tensor out = be->alloc(GgmlType::kF32, rows, sh.m).value();
  std::vector<float> xv(size_t(rows * sh.k));
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = float(int(i % 17) - 8) * 0.125f;
  be->write(x, xv.data());
  be->synchronize();
  double best = 1e30;
  for (int r = 0; r < reps + 2; ++r) {
    const double t0 = now_s();
    for (int i = 0; i < n_per_step; ++i) be->matmul(wt, x, out);
    be->synchronize();
    if (r >= 2) best = std::min(best, (now_s() - t0) / n_per_step);
  }
  return best;
}

int run_prompt(int device, int reps, int n_per_step, int64_t rows, const std::string& vs) {
  std::string why;
  const size_t eq = vs.find('=');
  if (eq == std::string::npos || eq == 0) return std::fprintf(stderr, "--vs wants NAME=VALUE, got '%s'\n", vs.c_str()), 2;
  const std::string vs_name = vs.substr(0, eq), vs_value = vs.substr(eq + 1);
  std::printf("| type | matrix | rows | default us | TFLOP/s | %s us | TFLOP/s | default speedup |\n", vs.c_str());
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (GgmlType type : kTypes) {
    for (const Shape& sh : kShapes) {
      const auto w = random_weight(type, sh);
      double s[2];
      for (int v = 0; v < 2; ++v) {
        if (v == 1) setenv(vs_name.c_str(), vs_value.c_str(), 1);
        s[v] = time_product(device, type, sh, w, rows, reps, n_per_step, &why);
        if (v == 1) unsetenv(vs_name.c_str());
        if (s[v] < 0) return std::fprintf(stderr, "%s\n", why.c_str()), 1;
      }
      const double flop = 2.0 * double(sh.m) * double(sh.k) * double(rows);
      std::printf("| %s | %s | %lld | %.1f | %.1f | %.1f | %.1f | %.2fx |\n", ggml_type_name(uint32_t(type)).c_str(),
                  sh.name, static_cast<long long>(rows), s[0] * 1e6, flop / s[0] / 1e12, s[1] * 1e6,
                  flop / s[1] / 1e12, s[1] / s[0]);
      std::fflush(stdout);
    }
  }
  return 0;
}

int run(int argc, char** argv) {
  int device = 0, reps = 20, n_per_step = 20;
  int64_t rows = 1;
  std::string vs = "ONEBIT_CUDA_MMA=0";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--device") device = std::atoi(argv[i + 1]);
    else if (k == "--reps") reps = std::atoi(argv[i + 1]);
    else if (k == "--n") n_per_step = std::atoi(argv[i + 1]);
    else if (k == "--rows") rows = std::atoll(argv[i + 1]);
    else if (k == "--vs") vs = argv[i + 1];
  }
  if (rows > 1) return run_prompt(device, reps, n_per_step, rows, vs);
  std::string why;
  const double copy_gbs = cuda_copy_bandwidth_gbs(device, size_t(1) << 30, 5, &why);
  if (copy_gbs <= 0) return std::fprintf(stderr, "%s\n", why.c_str()), 1;
  std::printf("copy bandwidth %.1f GB/s (read + write)\n", copy_gbs);
  std::printf("| type | matrix | MB | panels us | panels GB/s | of copy | rows us | rows GB/s | panels / rows |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (GgmlType type : kTypes) {
    for (const Shape& sh : kShapes) {
      const auto w = random_weight(type, sh);
      const size_t bytes = w.size();
      // variant 0: panels (the default), 1: row kernels
      double us[2] = {0, 0};
      for (int v = 0; v < 2; ++v) {
        setenv("ONEBIT_CUDA_PANELS", v == 1 ? "0" : "1", 1);
        const double s = time_product(device, type, sh, w, 1, reps, n_per_step, &why);
        if (s < 0) return std::fprintf(stderr, "%s\n", why.c_str()), 1;
        us[v] = s * 1e6;
      }
      unsetenv("ONEBIT_CUDA_PANELS");
      const double mb = bytes / 1e6;
      auto gbs = [&](double t) { return mb / t * 1e3; };
      std::printf("| %s | %s | %.1f | %.2f | %.0f | %.0f%% | %.2f | %.0f | %.2fx |\n",
                  ggml_type_name(uint32_t(type)).c_str(), sh.name, mb, us[0], gbs(us[0]), 100 * gbs(us[0]) / copy_gbs,
                  us[1], gbs(us[1]), us[1] / us[0]);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace onebit

int main(int argc, char** argv) { return onebit::run(argc, argv); }
